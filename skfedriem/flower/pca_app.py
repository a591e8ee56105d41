"""FederatedPCA as a Flower deployment: one ServerApp, one ClientApp per site.

Each site runs ``flower-supernode`` with its own data file in its node
configuration; the server never reads client files, it only learns each
client's name and record count, then θ_t goes out and submissions come back
(see :mod:`skfedriem.flower._protocol`). The Flower App project that points at
these two objects ships in :data:`APP_DIR`::

    flwr run "$(python -c 'import skfedriem.flower.pca_app as a; print(a.APP_DIR)')" <superlink> \\
        --run-config 'n-clients=3 n-features=20 eps=2.0 output="/path/results"'

Node configuration of a SuperNode (``--node-config``):

* ``data-path`` (required): ``.npy`` or ``.csv`` file, one record per row.
* ``name``: the client's name (default: the file's stem).
* ``max-epsilon`` (and ``delta``, default 1e-5): the site's own budget over
  every round of every run on this data. The client charges each round it is
  asked to take (from the round's clip, noise and batch size and its own
  record count) to its ledger file before it runs it, and refuses, with an
  error reply, a round that would exceed the budget or that carries no noise.
* ``ledger-path``: the site's ledger file (default: ``<data-path>.privacy-ledger.json``).
  It persists across runs and SuperNode restarts; keep it with the data.
* ``secure-mode``: ``true`` draws batches and noise from the OS's
  cryptographically secure generator, hardened against floating-point attacks.
* ``seed``: test benches only. An integer that, mixed with the run id, seeds
  this client's batches and noise: anyone who knows it can remove the noise.
  Default: fresh OS entropy at the start of every run. It never leaves the site.

Run configuration (``--run-config``; defaults in ``APP_DIR/pyproject.toml``):
``n-clients`` (SuperNodes to wait for), ``n-features``, ``n-components``,
``eps`` (a float, or ``"none"``), ``delta``, ``clip``, ``rounds``,
``local-steps``, ``batch-size``, ``clients-per-round`` (0: all),
``aggregation``, ``optimizer``, ``lr``, ``sampling``, ``manifold``, ``seed``
(server: initial point and client selection), ``round-timeout`` (seconds to
wait for a round's replies; a client that misses it is left out of that
round's average, and the round is still charged), ``output`` (folder where the
server writes ``result.json`` and the fitted ``FederatedPCA`` as
``federated_pca.pkl``).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import torch
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from sklearn.utils import check_array

from .._compat import validate_estimator_params
from .._seeding import run_seeds
from ..decomposition import FederatedPCA, identity_loss
from ..models import PCAProjector
from ._client_app import ClientSetup, make_client_app
from ._protocol import FlowerTransport, discover_clients

__all__ = ["APP_DIR", "client_app", "estimator_from_run_config", "load_site_data", "server_app"]

APP_DIR = Path(__file__).with_name("pca_project")

# Per process: a site's records and working model, by data file (the per-run settings are rebuilt per message).
_SITE: dict[str, tuple[tuple[torch.Tensor, ...], torch.nn.Module]] = {}


def load_site_data(path: str | Path) -> np.ndarray:
    """A site's records: ``.npy`` or ``.csv`` (comma-separated, no header), one record per row."""
    path = Path(path)
    if path.suffix == ".npy":
        X = np.load(path, allow_pickle=False)
    elif path.suffix == ".csv":
        X = np.loadtxt(path, delimiter=",", ndmin=2)
    else:
        raise ValueError(f"The 'data-path' node setting must name a .npy or .csv file. Got {str(path)!r}.")
    return check_array(X, dtype=np.float64, ensure_min_samples=2, input_name=f"data-path {path}")


def _eps(value) -> float | None:
    return None if isinstance(value, str) and value.lower() in ("none", "inf") else float(value)


# run-config key -> (FederatedPCA parameter, conversion); absent keys keep FederatedPCA's defaults
_RUN_CONFIG = {
    "n-components": ("n_components", int), "eps": ("eps", _eps), "delta": ("delta", float),
    "clip": ("clip", float), "rounds": ("n_rounds", int), "local-steps": ("local_steps", int),
    "batch-size": ("batch_size", int), "clients-per-round": ("clients_per_round", lambda k: int(k) or None),
    "aggregation": ("aggregation", str), "optimizer": ("optimizer", str), "lr": ("lr", float),
    "sampling": ("sampling", str), "manifold": ("manifold", str), "seed": ("random_state", int),
}


def estimator_from_run_config(config) -> FederatedPCA:
    """A validated, unfitted FederatedPCA from a Flower run configuration (ValueError names a bad key)."""
    params = {}
    for key, (name, convert) in _RUN_CONFIG.items():
        if key in config:
            try:
                params[name] = convert(config[key])
            except (TypeError, ValueError):
                raise ValueError(f"Run config {key!r} = {config[key]!r} is not valid.") from None
    est = FederatedPCA(**params)
    validate_estimator_params(est)
    return est


def _site(context: Context) -> ClientSetup:
    node = context.node_config
    path = str(node["data-path"])
    est = estimator_from_run_config(context.run_config)
    n_features = int(context.run_config["n-features"])
    key = f"{path}|{n_features}|{est.n_components}|{est.manifold}"
    if key not in _SITE:
        X = load_site_data(path)
        if X.shape[1] != n_features:
            raise ValueError(f"{path} holds {X.shape[1]} features per record; the run expects n-features={n_features}.")
        _SITE[key] = (torch.from_numpy(X),), PCAProjector(n_features, est.n_components, est.manifold)
    data, module = _SITE[key]
    seed = node.get("seed")
    max_epsilon = node.get("max-epsilon")
    return ClientSetup(
        name=str(node.get("name", Path(path).stem)), data=data, module=module, loss_fn=identity_loss,
        seed=None if seed is None else np.random.SeedSequence([int(seed), int(context.run_id)]),
        secure_mode=str(node.get("secure-mode", "false")).lower() == "true", optimizer=est.optimizer,
        max_epsilon=None if max_epsilon is None else float(max_epsilon), delta=float(node.get("delta", 1e-5)),
        ledger_path=str(node.get("ledger-path", path + ".privacy-ledger.json")),
    )


client_app = make_client_app(_site)
server_app = ServerApp()


@server_app.main()
def _serve(grid: Grid, context: Context) -> None:
    config = context.run_config
    est = estimator_from_run_config(config)
    n_features = int(config["n-features"])
    est._check_n_features(n_features)
    out = Path(str(config["output"]))
    out.mkdir(parents=True, exist_ok=True)
    timeout = float(config.get("round-timeout", 300.0))
    node_ids, names, sizes = discover_clients(grid, int(config["n-clients"]), timeout=timeout)
    print(f"skfedriem: clients {dict(zip(names, sizes))}", flush=True)
    # the server's seed only draws public choices (initial point, client selection); each site keeps its own noise
    seeds = run_seeds(est.random_state, private=False, secure_mode=False, owner="the FederatedPCA server")
    trainer = est._trainer(n_features, seeds)
    transport = _ProgressTransport(FlowerTransport(grid, node_ids, timeout=timeout, on_failure="skip"), trainer)
    trainer.serve(transport, sizes, names, seeds.server)
    est.n_features_in_ = n_features
    est._set_fitted(trainer)
    result = {"clients": names, "n_records": sizes, "epsilon": est.epsilon_, "delta": est.delta_,
              "noise_std": est.noise_std_, "components": est.components_.tolist(), "history": est.history_}
    (out / "result.json").write_text(json.dumps(result, indent=1))
    with (out / "federated_pca.pkl").open("wb") as f:
        pickle.dump(est, f)
    print(f"skfedriem: done, epsilon={est.epsilon_:.4g}, results in {out}", flush=True)


class _ProgressTransport:
    """Prints one line per finished round (the loopback launcher and users follow the run by it)."""

    def __init__(self, transport: FlowerTransport, trainer) -> None:
        self.transport = transport
        self.trainer = trainer

    def run_round(self, t, selected, theta, instructions):
        replies = self.transport.run_round(t, selected, theta, instructions)
        print(f"skfedriem: round {t + 1}/{self.trainer.n_rounds} selected={selected} replied={sorted(replies)}",
              flush=True)
        return replies
