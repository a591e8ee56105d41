"""Every estimator as a Flower deployment: one ServerApp and one ClientApp per estimator kind.

Each site runs ``flower-supernode`` with its own records in its node
configuration; the server never reads a site's file. It learns each client's
name, record count (the records in its file, whatever the run; a
subject-level site's: its subjects) and record shape, then θ_t goes out and submissions come back (see
:mod:`skfedriem.flower.protocol.messages`). The Flower App projects naming
these apps ship in :data:`APP_DIRS`::

    flwr run "$(python -c 'from skfedriem.flower.deployment.apps import APP_DIRS; print(APP_DIRS["spdnet"])')" <superlink> \\
        --run-config 'n-clients=3 classes="left_hand,right_hand" eps=10.0 output="/srv/run-1"'

Node configuration of a SuperNode (``--node-config``):

* ``data-path`` (required): the site's records. FederatedPCA: ``.npy``/``.csv``
  (one record per row) or ``.npz`` with ``X``; classifiers: ``.npz`` with
  ``X`` (covariance matrices for SPDNet, raw trials for EEGNet) and ``y``
  (:func:`~skfedriem.flower.deployment.run_config.load_site_records` says how to make one
  from MOABB data).
* ``name``: the client's name (default: the file's stem).
* ``max-epsilon`` (default :data:`~skfedriem.flower.protocol.client_app.DEFAULT_MAX_EPSILON`, 10) and
  ``delta`` (default 1e-5): the site's own budget over every round of every
  run on this data, charged to ``ledger-path`` (default
  ``<data-path>.privacy-ledger.json``) before each round runs. Rounds past
  it, rounds without noise, rounds whose per-step μ0 exceeds 10 and rounds of
  more than 10 000 local steps are refused with an error reply that names only
  the kind of refusal (the site's log has the details). ``max-epsilon=inf``
  removes the limit, not the refusals. ``accounting`` (default ``"rfedproj"``)
  names the registered accounting method that composes the ledger's rounds.
* ``secure-mode``: ``true`` draws batches and noise from the OS's secure
  generator, hardened against floating-point attacks.
* ``client-timings``: ``true`` sends the time Sub took with each submission
  (a timing of work on the records: not private). Default: no timings. Refused
  with ``noise = "distributed"``, whose server may learn only the sum.
* ``non-private``: ``true`` accepts rounds without noise, each charged as
  infinite loss (test benches only; needs ``max-epsilon=inf``).
* ``noise`` (default ``"local"``): ``"distributed"`` lets the site take rounds
  of distributed noise, only under secure aggregation
  (:mod:`skfedriem.flower.protocol.secure_site`). It then needs
  ``federation-keys`` (the roster: one line ``<name> <OpenSSH public key>``
  per site, the keys the SuperNodes authenticate with), ``signing-key`` (this
  SuperNode's private key) and optionally ``distributed-clients`` (K, default
  the roster's size), ``distributed-colluders`` (t, default ⌈K / 10⌉, at
  least 1), ``distributed-dropouts`` (d, default 0: how many more sites may
  drop out of a round with its noise kept whole; the run's ``dropouts``)
  and ``semi-honest-server`` (``true``: ``max-epsilon`` bounds
  ε_central) or ``deviating-server`` (``true``: it bounds what a server that
  deviates from the protocol with t colluding sites could learn, from the
  K − 2t honest shares it can leave, and at least the site's own); default: ε_local, what the
  site's own noise share guarantees against a server that breaks the protocol. Local noise is the default
  because it is the only setting whose guarantee holds against any server;
  a site's ledgers record all three ε's of every round
  (:class:`~skfedriem.flower.protocol.client_app.SiteGuard`).
* ``subject-key``: the array of the site's ``.npz`` holding each record's
  subject (e.g. ``subject``, from MOABB's ``meta.subject``); or
  ``one-subject = true``: the site is one subject (client-level privacy).
  Either makes it a subject-level site, whose unit is its own: it takes only
  runs with ``privacy-unit="subject"`` (and such a run needs one of them). It
  then samples and reports its subjects, its ledger and ``max-epsilon`` are
  per subject, and a ledger that already holds record-level rounds on these
  records takes no subject-level round (what they cost a subject is not
  certified).

A site always draws its batches and noise from fresh OS entropy for every
message; a ``seed`` node setting is refused (a seeded site that restarts would
repeat its noise; seeds are for the in-process simulation).

Run configuration (defaults in each project's ``pyproject.toml``): the
estimator's parameters (:func:`~skfedriem.flower.deployment.run_config.estimator_from_run_config`),
``n-clients`` (sites to wait for), ``classes`` (classifiers: the public class
names, comma-separated), ``validation-path`` (classifiers: an ``.npz`` of
trials the *server* holds, for per-round validation metrics), ``round-timeout``,
``output`` (where the server writes ``result.json``, ``estimator.pkl``,
``learning_curve.png`` and its checkpoint) and ``resume`` (``true``: continue
the run whose checkpoint is in ``output`` after a server crash).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import tomllib
from pathlib import Path

import numpy as np
import torch
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from sklearn.base import is_classifier

from ...federated import ClientRecipe, TrainingState
from ...federated.fixed_features import on_fixed_features
from ...privacy.mechanisms.units import PrivacyUnit
from ..protocol.client_app import DEFAULT_MAX_EPSILON, ClientSetup, SiteGuard, make_client_app
from ..protocol.messages import FlowerTransport, NodeDirectory
from ..protocol.secure_site import DistributedNoise
from .run_config import (DEPLOYMENT_KEYS, ESTIMATORS, classes_from_run_config, estimator_from_run_config,
                         load_site_records, load_site_subjects)
from .site_files import default_ledger_path

__all__ = ["APP_DIRS", "applied_rounds", "client_apps", "deployed_trainer", "project_run_config", "server_apps", "site_setup"]

#: The Flower App project of each deployable kind shipped with skfedriem.
APP_DIRS = {kind: Path(__file__).with_name("projects") / kind for kind in ESTIMATORS.names()}

# Per process: a site's validated records and working model, by kind, data file and run configuration; the
# most recently used few only (a site's worker serves every run, and a server may open many).
_SITES: dict[tuple, tuple] = {}
_SITES_KEPT = 4


def _classes(est, config) -> np.ndarray | None:
    """The run's public classes for a classifier (required), None for any other estimator."""
    return classes_from_run_config(config) if is_classifier(est) else None


def _loaded_site(kind: str, node, config, path: str) -> tuple:
    """A site's records as its model reads them, its recipe, their digest and one record's shape."""
    est = estimator_from_run_config(kind, config)
    _check_unit(node, est.privacy_unit)
    classes = _classes(est, config)
    X, y = load_site_records(path, targets=is_classifier(est))
    records = est.prepare_records(X, y, classes=classes, site=True)
    if est.privacy_unit == "subject":
        records = (*records, torch.from_numpy(_site_subjects(node, path, len(X))))
    module, loss_fn = est.make_model(X.shape[1:], classes)
    digest = _records_digest(records)
    recipe = ClientRecipe(module, loss_fn, est.client_optimizer(),
                          unit=PrivacyUnit(est.privacy_unit, est.records_per_subject))
    recipe, (records,) = on_fixed_features(recipe, [records])
    return records, recipe, digest, X.shape[1:]


def site_setup(kind: str, context: Context) -> ClientSetup:
    """A site's ClientSetup from its node configuration and the run configuration.

    Parameters
    ----------
    kind : str
        A deployable kind (:data:`~skfedriem.flower.deployment.run_config.ESTIMATORS`).
        The estimator the run trains.
    context : flwr.app.Context
        The ClientApp's context: ``node_config`` (``data-path``, and optional
        ``name``, ``secure-mode``, ``max-epsilon``, ``delta``, ``accounting``, ``ledger-path``,
        ``client-timings``, ``non-private``) and ``run_config``.

    Returns
    -------
    ClientSetup
    """
    node, config = context.node_config, context.run_config
    if "seed" in node:
        raise ValueError("A deployed site does not take a 'seed' node setting: it draws fresh OS entropy for every "
                         "message (a seeded site that restarted would repeat its noise). Remove it.")
    path = str(node["data-path"])
    subjects = (str(node.get("subject-key", "")), _flag(node, "one-subject"))
    key = (kind, path, tuple(sorted(dict(config).items())), subjects)
    if key not in _SITES:
        _SITES[key] = _loaded_site(kind, node, config, path)
        while len(_SITES) > _SITES_KEPT:
            del _SITES[next(iter(_SITES))]
    _SITES[key] = _SITES.pop(key)  # the most recently used last
    records, recipe, digest, input_shape = _SITES[key]
    name = str(node.get("name", Path(path).stem))
    distributed = DistributedNoise.from_node_config(node, name)
    guard = SiteGuard(ledger_path=default_ledger_path(node),
                      max_epsilon=float(node.get("max-epsilon", DEFAULT_MAX_EPSILON)),
                      delta=float(node.get("delta", 1e-5)), allow_non_private=_flag(node, "non-private"),
                      accounting=str(node.get("accounting", "rfedproj")),
                      distributed=distributed)
    # the model a request runs on, and the records it trains on: the kind and the estimator's settings (not the
    # deployment's own keys: a resumed run, with resume=true, re-sends its round to the same model and must get the
    # same reply), and the records' digest (another file, or this one rewritten, is another site)
    model = {k: v for k, v in dict(config).items() if k not in DEPLOYMENT_KEYS or k == "classes"}
    scope = json.dumps([kind, model, digest], sort_keys=True, default=str)
    return ClientSetup(name=name, data=records, recipe=recipe,
                       secure_mode=_flag(node, "secure-mode"), guard=guard, timings=_flag(node, "client-timings"),
                       scope=scope, input_shape=tuple(int(d) for d in input_shape))


def _check_unit(node, planned: str) -> None:
    """ValueError unless the run protects what the site's own node configuration says it protects.

    A site that names its subjects (``subject-key`` or ``one-subject``) is a subject-level site: it refuses a
    record-level run, which would protect its records one by one (and have it report its record count), whatever the
    server's run configuration says. A site that names none refuses a subject-level run (it cannot sample subjects).
    """
    own = "subject" if str(node.get("subject-key", "")) or _flag(node, "one-subject") else "record"
    if planned == own:
        return
    if own == "subject":
        raise ValueError(f"This site protects each subject (its node config sets subject-key or one-subject): it "
                         f"refuses a run planned for privacy-unit = {planned!r}.")
    raise ValueError("The run protects each subject (privacy-unit = 'subject'): name the array of each record's "
                     "subject in the site's .npz with the node setting subject-key, or declare the site one "
                     "subject with one-subject = true (exactly one of them).")


def _site_subjects(node, path: str, n_records: int) -> np.ndarray:
    """A subject-level site's subject codes: its ``subject-key`` array, or one subject (``one-subject``)."""
    key, one = str(node.get("subject-key", "")), _flag(node, "one-subject")
    if key and one:
        raise ValueError("The site's node config sets both subject-key and one-subject: set exactly one of them.")
    return load_site_subjects(path, key, n_records) if key else np.zeros(n_records, dtype=np.int64)


def _records_digest(records) -> str:
    """SHA-256 of the site's prepared records (shapes, dtypes and values)."""
    digest = hashlib.sha256()
    for tensor in records:
        array = tensor.detach().cpu().contiguous().numpy()
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _flag(node, key: str) -> bool:
    return str(node.get(key, "false")).lower() == "true"


def _validation(est, config, classes):
    path = str(config.get("validation-path", ""))
    if not is_classifier(est) or not path:
        return None
    X, y = load_site_records(path, targets=True)
    return est.prepare_records(X, y, classes=classes)


def _saved_description(config, out: Path) -> dict | None:
    """The checkpointed run's description when this run resumes it (``resume = true``), else None."""
    meta = out / "checkpoint.json"
    if str(config.get("resume", "false")).lower() != "true" or not meta.exists():
        return None
    return json.loads(meta.read_text())


def _resume_state(config, out: Path, description: dict) -> TrainingState | None:
    """The checkpoint to resume from (``resume = true``), after checking it is this run's."""
    meta = out / "checkpoint.json"
    if str(config.get("resume", "false")).lower() != "true":
        meta.write_text(json.dumps(description, sort_keys=True))
        return None
    if not (out / "checkpoint.pt").exists():
        raise ValueError(f"resume=true, but {out} holds no checkpoint: start the run without resume.")
    saved = json.loads(meta.read_text())
    if saved != description:
        raise ValueError(f"resume=true, but the checkpoint in {out} is of another run: {saved} != {description}.")
    return TrainingState.load(out / "checkpoint.pt")


def applied_rounds(history: list[dict]) -> int:
    """How many rounds of a run's history moved the model: some site replied and the round was not discarded.

    Parameters
    ----------
    history : list of dict

    Returns
    -------
    int
    """
    return sum(1 for entry in history if entry.get("replied") and "discarded" not in entry)


def _write_results(est, kind: str, out: Path, names: list[str], sizes: list[int]) -> None:
    # n_records: each site's number of privacy units (its records, or its subjects), as it reported them
    result = {"estimator": kind, "clients": names, "n_records": sizes, "privacy_unit": est.privacy_unit,
              "epsilon": est.epsilon_, "local_epsilon": getattr(est, "local_epsilon_", est.epsilon_),
              "deviating_epsilon": getattr(est, "deviating_epsilon_", est.epsilon_),
              "delta": est.delta_, "noise_std": est.noise_std_, "applied_rounds": applied_rounds(est.history_),
              "history": est.history_}
    if is_classifier(est):
        result["classes"] = est.classes_.tolist()
    else:
        result["components"] = est.components_.tolist()
    (out / "result.json").write_text(json.dumps(result, indent=1))
    with (out / "estimator.pkl").open("wb") as f:
        pickle.dump(est, f)
    _plot_learning_curve(est, out / "learning_curve.png")


def _plot_learning_curve(est, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ...display import HistoryDisplay

    display = HistoryDisplay.from_estimator(est)
    display.figure_.savefig(path, dpi=100)
    plt.close(display.figure_)


def project_run_config(kind: str) -> dict:
    """The run configuration of ``kind``'s Flower App project (``[tool.flwr.app.config]``): what ``flwr run``
    starts from before its ``--run-config`` overrides.

    Parameters
    ----------
    kind : str

    Returns
    -------
    dict
    """
    with (APP_DIRS[kind] / "pyproject.toml").open("rb") as f:
        return dict(tomllib.load(f)["tool"]["flwr"]["app"]["config"])


def deployed_trainer(kind: str, config, input_shape: tuple[int, ...], client_sizes: list[int], client_names: list,
                     *, validation: bool = False):
    """The estimator and the planned trainer a ServerApp runs for ``config`` on these sites.

    What the ServerApp does once it has found its sites; a launcher calls it
    first, with the sites it is about to start, to refuse a run whose settings
    or plan the server would refuse only once the whole deployment is up.

    Parameters
    ----------
    kind : str
    config : mapping
        The complete run configuration (the project's, with the overrides).
    input_shape : tuple of int
        One record's shape.
    client_sizes : list of int
    client_names : list
    validation : bool, default=False
        Load the server's own validation file (``validation-path``).

    Returns
    -------
    estimator, FederatedTrainer
    """
    est = estimator_from_run_config(kind, config)
    classes = _classes(est, config)
    held_out = _validation(est, config, classes) if validation else None
    trainer = est.make_trainer(tuple(input_shape), classes=classes, held_out=held_out, deployed=True,
                               client_sizes=list(client_sizes), client_names=list(client_names))
    return est, trainer


def _serve(kind: str, grid: Grid, context: Context) -> None:
    config = context.run_config
    estimator_from_run_config(kind, config)  # a bad setting refused before any site is waited for
    out = Path(str(config["output"]))
    out.mkdir(parents=True, exist_ok=True)
    timeout = float(config.get("round-timeout", 300.0))
    directory = NodeDirectory(grid, query_timeout=min(timeout, 60.0))
    saved = _saved_description(config, out)
    if saved is None:
        names, sizes, shapes = directory.discover(int(config["n-clients"]), timeout=max(timeout, 120.0))
    else:  # the clients are the checkpoint's: a site that is gone for good is skipped, as in the run it resumes
        names, sizes = saved["clients"], saved["n_records"]
        back = directory.rejoin(names, timeout=timeout)
        grown = {n: directory.clients[n].n_records for n in back
                 if directory.clients[n].n_records != sizes[names.index(n)]}
        if grown:
            raise ValueError(f"resume=true, but these sites now hold a different number of records: {grown} "
                             f"(the checkpoint has {dict(zip(names, sizes))}).")
        shapes = [directory.clients[n].input_shape for n in back]
        print(f"skfedriem: resuming with {back}; gone: {sorted(set(names) - set(back))}", flush=True)
    if len(set(shapes)) != 1:
        raise ValueError(f"The sites' records have different shapes: {dict(zip(names, shapes))}.")
    print(f"skfedriem: clients {dict(zip(names, sizes))}, records of shape {shapes[0]}", flush=True)
    est, trainer = deployed_trainer(kind, config, shapes[0], sizes, names, validation=True)
    classes = _classes(est, config)
    description = {"estimator": kind, "clients": names, "n_records": sizes,
                   "config": {k: v for k, v in dict(config).items() if k != "resume"}}
    resume = _resume_state(config, out, description)
    if resume is not None:
        print(f"skfedriem: resuming at round {resume.round + 1} ({'restarted' if resume.started else 'next'})",
              flush=True)

    def on_round(state: TrainingState) -> None:
        state.save(out / "checkpoint.pt")  # at a round's start (charged) and at its end
        if not state.started:
            last = state.history[-1]
            print(f"skfedriem: round {state.round}/{trainer.settings.n_rounds} selected={last['clients']} "
                  f"replied={last['replied']} epsilon={last['epsilon']:.4g}", flush=True)

    transport = FlowerTransport(directory, names, sizes, timeout=timeout, on_failure="skip")
    trainer.serve(transport, sizes, names, trainer.seed_sequence, resume=resume, on_round=on_round)
    est.set_fitted(trainer, input_shape=shapes[0], classes=classes)
    _write_results(est, kind, out, names, sizes)
    applied = applied_rounds(est.history_)
    local, deviating = getattr(est, "local_epsilon_", est.epsilon_), getattr(est, "deviating_epsilon_", est.epsilon_)
    print(f"skfedriem: done, epsilon={est.epsilon_:.4g} (epsilon_local={local:.4g}, against a deviating server "
          f"{deviating:.4g}), {applied} of "
          f"{len(est.history_)} rounds applied, results in {out}", flush=True)
    if est.history_ and not applied:
        print("skfedriem: every round was discarded (no site's release reached the model): the model is its initial "
              "one, and each round was still charged", flush=True)


def _make_server_app(kind: str) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        _serve(kind, grid, context)

    return app


#: The ServerApp of each estimator kind, and the ClientApp of its sites as it runs in the site's process.
server_apps = {kind: _make_server_app(kind) for kind in APP_DIRS}
client_apps = {kind: make_client_app(lambda context, kind=kind: site_setup(kind, context)) for kind in APP_DIRS}
# one plain assignment each: Flower finds the apps its projects name by reading this file (the sites' ClientApps
# are the light ones of skfedriem.flower.deployment.site_client, which hand each message to a worker running client_apps[kind])
pca_server_app = server_apps["pca"]
spdnet_server_app = server_apps["spdnet"]
eegnet_server_app = server_apps["eegnet"]
tangent_server_app = server_apps["tangent"]
