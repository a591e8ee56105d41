"""The paper's EEG comparison (docs: user guide, EEG) as a resumable study: arms x ε x seeds x participation.

Protocol, per run (dataset, arm, ε, seed, participation):

* data: a MOABB motor-imagery paradigm, band-pass 8-32 Hz, resampled to
  128 Hz; each trial is normalised inside the model (SPDNet: trace of its
  covariance; EEGNet: its standard deviation); clients are fixed groups of
  subjects (docs: user guide, EEG: BNCI2014_001 3 per client, Weibo2014 and Cho2017 2,
  PhysionetMI 2: the 24 subjects with all three imagery runs, 12 clients).
* split: within every subject, stratified by class and drawn with the run's
  seed: 60% training (the client's private records), 20% validation (held by
  the server: the per-round learning curve) and 20% test (the reported
  accuracy).
* arms: ``projavg``, ``rlavg``, ``retavg`` (federated SPDNet with that
  aggregation, ours); ``prirfed`` (SPDNet, Poisson sampling, PriRFed's
  accounting, RetAvg); ``eegnet`` (federated EEGNet, FedAvg); ``tangent``
  (:class:`~skfedriem.FederatedTangentSpaceClassifier`); with local noise.
  ``spdnet-distributed``, ``eegnet-distributed``, ``tangent-distributed``:
  the same models with ``noise="distributed"`` (the noise paid once on the
  clients' sum; at finite ε only). The centralised references
  ``central-spdnet``, ``central-eegnet`` (all training trials in one place:
  trained with skorch when non-private, as one private client otherwise).
* schedule: ``"planned"`` (default), every estimator's own defaults (its
  ``"auto"`` settings, the clients' released mean for the covariance
  models); ``"paper"``, the paper's fixed settings for SPDNet and EEGNet
  (Adam at the dataset's step, batch size and rounds, BiMap size and ε_R)
  and EEGNet without normalisation between its layers.
* participation p: k = max(1, round(p n)) clients per round.

Outputs in ``out``: ``runs.csv`` (one row per finished run, the resume key),
``curves.csv`` (validation accuracy and ε per round), ``table.md`` (mean ± sd
per arm and ε, best federated arm in bold), ``learning_curves.png`` and
``privacy_utility.png``.
"""

from __future__ import annotations

import csv
import math
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from loky import ProcessPoolExecutor
from tqdm.auto import tqdm

from ..classification import FederatedEEGNetClassifier, FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from ..federated.parallel import THREADS_PER_JOB, effective_n_jobs, thread_budget
from .arms import ARM_SPECS, ARMS, Arm
from .report import write_report

__all__ = ["DATASETS", "DatasetConfig", "load_dataset", "run_study", "split_trials"]


RUN_FIELDS = ["dataset", "arm", "eps", "seed", "participation", "test_accuracy", "epsilon_certified",
              "noise_std", "batch_size", "n_clients", "clients_per_round", "n_rounds", "seconds", "aggregation_ms_per_round"]
CURVE_FIELDS = ["dataset", "arm", "eps", "seed", "participation", "round", "valid_accuracy", "epsilon"]


@dataclass(frozen=True)
class DatasetConfig:
    """Paper settings of one dataset (docs: user guide, EEG).

    Parameters
    ----------
    moabb_name : str
        The MOABB dataset class.
    n_classes : int
        Classes of the motor-imagery paradigm.
    subjects_per_client : int
        Consecutive subjects grouped into one client.
    dims : tuple of int
        SPDNet's BiMap output sizes.
    reeig_eps : float
        ε_R.
    spdnet : dict, default={}
        SPDNet's ``lr``, ``batch_size``, ``n_rounds``.
    eegnet : dict, default={}
        EEGNet's.
    subjects : tuple of int, optional
        The subjects used (default: all of the dataset's).
    channels : tuple of str, optional
        The channels kept (default: all of the dataset's).
    """

    moabb_name: str
    n_classes: int
    subjects_per_client: int
    dims: tuple[int, ...]
    reeig_eps: float
    spdnet: dict = field(default_factory=dict)  # lr, batch_size, n_rounds
    eegnet: dict = field(default_factory=dict)
    subjects: tuple[int, ...] | None = None
    channels: tuple[str, ...] | None = None


#: The 9 channels over the motor cortices (10-10 names): on the 24 PhysioNet subjects the private models learn on them
#: where all 64 channels spread the noise too thin (docs: user guide, EEG).
MOTOR_CHANNELS = ("FC3", "FCz", "FC4", "C3", "Cz", "C4", "CP3", "CPz", "CP4")


DATASETS: dict[str, DatasetConfig] = {
    "BNCI2014_001": DatasetConfig("BNCI2014_001", 4, 3, (16,), 8e-5,
                                  dict(lr=1e-2, batch_size=64, n_rounds=200), dict(lr=1e-3, batch_size=16, n_rounds=300)),
    "Weibo2014": DatasetConfig("Weibo2014", 7, 2, (20,), 2e-5,
                               dict(lr=1e-3, batch_size=32, n_rounds=300), dict(lr=3e-3, batch_size=128, n_rounds=300)),
    "Cho2017": DatasetConfig("Cho2017", 2, 2, (16,), 6e-5,
                             dict(lr=3e-2, batch_size=16, n_rounds=300), dict(lr=1e-3, batch_size=64, n_rounds=300)),
    # the 24 subjects with all three imagery runs (1-23 and 42; 1,080 left/right trials), 2 a client like
    # Cho2017 (64 channels, 2 classes, the paper's d and ε_R for it): 12 clients
    "PhysionetMI": DatasetConfig("PhysionetMI", 2, 2, (16,), 6e-5,
                                 dict(lr=1e-2, batch_size=16, n_rounds=200), dict(lr=1e-3, batch_size=16, n_rounds=200),
                                 subjects=(*range(1, 24), 42)),
    "PhysionetMI-motor": DatasetConfig("PhysionetMI", 2, 2, (9,), 6e-5,
                                       dict(lr=1e-2, batch_size=16, n_rounds=200),
                                       dict(lr=1e-3, batch_size=16, n_rounds=200),
                                       subjects=(*range(1, 24), 42), channels=MOTOR_CHANNELS),
    # MOABB's FakeDataset (noise, 3 subjects): for tests and dry runs
    "FakeDataset": DatasetConfig("FakeDataset", 2, 1, (2,), 1e-4,
                                 dict(lr=1e-2, batch_size=8, n_rounds=5), dict(lr=1e-3, batch_size=8, n_rounds=5),
                                 subjects=(1, 2, 3)),
}


def load_dataset(name: str, *, eegmmidb: str | Path | None = None):
    """Trials, labels and client of each trial for a configured dataset.

    Parameters
    ----------
    name : str
        A key of ``DATASETS`` (``"BNCI2014_001"``, ``"Weibo2014"``,
        ``"Cho2017"``, ``"PhysionetMI"``, ``"FakeDataset"``).
    eegmmidb : str or Path, optional
        A local copy of EEGMMIDB for ``"PhysionetMI"`` (nothing is downloaded).

    Returns
    -------
    X : ndarray of shape (n_trials, n_channels, n_times)
    y : ndarray of shape (n_trials,)
    subjects : ndarray of shape (n_trials,)
    clients : ndarray of shape (n_trials,)
        ``"client-0"`` ..., fixed groups of ``subjects_per_client`` consecutive subjects.
    """
    from moabb.paradigms import LeftRightImagery, MotorImagery

    from ..datasets import load_moabb, use_local_eegmmidb

    if name not in DATASETS:
        raise ValueError(f"The 'dataset' parameter must be one of {sorted(DATASETS)}. Got {name!r} instead.")
    config = DATASETS[name]
    if name == "FakeDataset":
        from moabb.datasets.fake import FakeDataset

        dataset = FakeDataset(event_list=["left_hand", "right_hand"], n_sessions=1, n_runs=1, n_subjects=3,
                              n_events=40, duration=60, seed=0)
    else:
        import moabb.datasets

        if config.moabb_name == "PhysionetMI" and eegmmidb is not None:
            use_local_eegmmidb(eegmmidb)
        if config.moabb_name == "PhysionetMI":
            dataset = moabb.datasets.PhysionetMI(imagined=True)
            dataset.feet_runs = []  # left/right imagery only (all that is on disk offline)
        else:
            dataset = getattr(moabb.datasets, config.moabb_name)()
    channels = None if config.channels is None else list(config.channels)
    if config.n_classes == 2:
        paradigm = LeftRightImagery(fmin=8, fmax=32, resample=128, channels=channels)
    else:
        paradigm = MotorImagery(n_classes=config.n_classes, fmin=8, fmax=32, resample=128, channels=channels)
    subjects = list(config.subjects or dataset.subject_list)
    X, y, groups = load_moabb(dataset, paradigm, subjects=subjects, clients="subject")
    subject_ids = np.array([int(g.split("-")[1]) for g in groups])
    order = {s: i // config.subjects_per_client for i, s in enumerate(sorted(set(subject_ids)))}
    clients = np.array([f"client-{order[s]}" for s in subject_ids])
    return X, y, subject_ids, clients


def split_trials(y: np.ndarray, subjects: np.ndarray, seed: int, fractions=(0.6, 0.2, 0.2)):
    """Boolean masks (train, valid, test), stratified by subject and class, drawn with ``seed``.

    Parameters
    ----------
    y : ndarray of shape (n_trials,)
        Labels.
    subjects : ndarray of shape (n_trials,)
        Subject of each trial.
    seed : int
        Seeds the split.
    fractions : tuple of float, default=(0.6, 0.2, 0.2)
        Train, validation and test shares within each (subject, class).

    Returns
    -------
    train, valid, test : ndarray of bool, shape (n_trials,)

    Examples
    --------
    >>> import numpy as np
    >>> train, valid, test = split_trials(np.repeat([0, 1], 10), np.zeros(20), seed=0)
    >>> int(train.sum()), int(valid.sum()), int(test.sum())
    (12, 4, 4)
    """
    rng = np.random.default_rng(seed)
    part = np.empty(len(y), dtype=int)
    for s in np.unique(subjects):
        for label in np.unique(y):
            idx = rng.permutation(np.flatnonzero((subjects == s) & (y == label)))
            n_valid, n_test = (int(round(f * len(idx))) for f in fractions[1:])
            part[idx] = 0
            part[idx[:n_test]] = 2
            part[idx[n_test : n_test + n_valid]] = 1
    return part == 0, part == 1, part == 2


SCHEDULES = ("planned", "paper")


def make_estimator(arm: str, eps: float | None, seed: int, config: DatasetConfig, n_clients: int,
                   participation: float, n_rounds: int | None, schedule: str = "planned"):
    """The estimator of one arm: its own planned defaults, or the dataset's paper settings (``schedule="paper"``)."""
    if arm not in ARM_SPECS:
        raise ValueError(f"Unknown arm {arm!r}; choose from {ARMS}.")
    if schedule not in SCHEDULES:
        raise ValueError(f"The 'schedule' parameter must be one of {list(SCHEDULES)}. Got {schedule!r} instead.")
    spec = ARM_SPECS[arm]
    settings = {}
    paper = schedule == "paper" and spec.network != "tangent"
    if paper:  # the paper trains both networks with Adam at these steps, EEGNet with nothing between its layers
        settings = dict(optimizer="adam", **(config.spdnet if spec.takes_covariances else config.eegnet))
        settings.update(dict(dims=config.dims, reeig_eps=config.reeig_eps, reference=None) if spec.takes_covariances
                        else dict(normalization=None))  # the paper's SPDNet reads the inputs unwhitened
    if n_rounds is not None:
        settings["n_rounds"] = n_rounds
    k = None if spec.central else max(1, int(round(participation * n_clients)))
    # timings of the clients' work only where the server sees each release anyway (not under distributed noise)
    timings = spec.settings.get("noise", "local") != "distributed"
    common = dict(eps=eps, delta=1e-5, clients_per_round=k, random_state=seed, client_timings=timings, **settings,
                  **spec.settings)
    if spec.network == "eegnet":
        return FederatedEEGNetClassifier(**common)
    if spec.network == "tangent":
        return FederatedTangentSpaceClassifier(**common)
    return FederatedSPDNetClassifier(**common)


def _key(row: dict) -> tuple:
    return (row["dataset"], row["arm"], str(row["eps"]), str(row["seed"]), f"{float(row['participation']):g}")


def _eps_label(eps: float | None) -> str:
    return "none" if eps is None else f"{eps:g}"


def run_study(dataset: str, arms, eps_values, seeds: int, participations, out: str | Path, *,
              n_rounds: int | None = None, eegmmidb: str | Path | None = None, n_jobs: int | None = None,
              schedule: str = "planned", verbose: int = 1) -> Path:
    """Run every (arm, ε, seed, participation) not already in ``out/runs.csv``; then write the report.

    Parameters
    ----------
    dataset : str
        A key of :data:`DATASETS`.
    arms : sequence of str
        From :data:`~skfedriem.experiments.arms.ARMS`.
    eps_values : sequence of float or None
        None is the non-private run.
    seeds : int
        Seeds 0 .. seeds − 1 (split, initialisation, batches and noise).
    participations : sequence of float
        Fractions of clients per round (central arms ignore it).
    out : path
        Output folder (created).
    n_rounds : int, optional
        Overrides the dataset's number of rounds (quick runs).
    eegmmidb : path, optional
        Local PhysioNet files for ``PhysionetMI``.
    n_jobs : int or None, default=None
        Runs fitted at the same time, each by one process with one thread
        (scikit-learn's convention: None is 1, -1 every CPU). A run's result
        does not depend on it.
    schedule : {"planned", "paper"}, default="planned"
        The estimators' own defaults, or the paper's fixed settings (module
        docstring). A folder holds the runs of one schedule: ``out`` records
        it and refuses the other.
    verbose : int, default=1
        > 0 shows a progress bar over runs.

    Returns
    -------
    out : Path
    """
    out = Path(out)
    bad = [a for a in arms if a not in ARMS]
    if bad:
        raise ValueError(f"Unknown arm(s) {bad}; choose from {ARMS}.")
    if schedule not in SCHEDULES:
        raise ValueError(f"The 'schedule' parameter must be one of {list(SCHEDULES)}. Got {schedule!r} instead.")
    out.mkdir(parents=True, exist_ok=True)
    _check_schedule(out / "schedule.txt", schedule)
    runs_path, curves_path = out / "runs.csv", out / "curves.csv"
    done = set()
    if runs_path.exists():
        with runs_path.open() as f:
            done = {_key(row) for row in csv.DictReader(f)}
    todo = [(arm, eps, seed, p) for p in participations for eps in eps_values for arm in arms for seed in range(seeds)
            if _key(dict(dataset=dataset, arm=arm, eps=_eps_label(eps), seed=seed, participation=p)) not in done]
    todo = [t for t in todo if not (ARM_SPECS[t[0]].central and t[3] != participations[0])]
    todo = [t for t in todo if not (ARM_SPECS[t[0]].private_only and t[1] is None)]
    if todo:
        needs_covariances = any(ARM_SPECS[arm].takes_covariances for arm, *_ in todo)
        for row, curves in tqdm(_runs(dataset, todo, (n_rounds, schedule), eegmmidb, needs_covariances,
                                      effective_n_jobs(n_jobs)),
                                total=len(todo), disable=verbose <= 0, desc=f"{dataset} runs", unit="run"):
            _append(curves_path, CURVE_FIELDS, curves)
            _append(runs_path, RUN_FIELDS, [row])  # last: a run counts as done once its curve is saved
    write_report(out)
    return out


def _check_schedule(path: Path, schedule: str) -> None:
    """Record the folder's schedule, or refuse another one (its runs would be mixed in one table)."""
    if path.exists() and path.read_text().strip() != schedule:
        raise ValueError(f"{path.parent} holds runs of schedule {path.read_text().strip()!r}; got schedule="
                         f"{schedule!r}. Write them to another folder (--out).")
    path.write_text(schedule + "\n")


def _study_data(dataset: str, eegmmidb, needs_covariances: bool) -> tuple:
    X, y, subjects, clients = load_dataset(dataset, eegmmidb=eegmmidb)
    return X, _covariances(X) if needs_covariances else None, y, subjects, clients


# A worker process's copy of the study's data, loaded once when it starts (from the local files, as the parent did).
_WORKER: dict = {}


def _start_worker(dataset: str, eegmmidb, needs_covariances: bool) -> None:
    torch.set_num_threads(THREADS_PER_JOB)
    _WORKER["data"] = _study_data(dataset, eegmmidb, needs_covariances)


def _run_in_worker(dataset: str, task: tuple, options: tuple) -> tuple[dict, list[dict]]:
    return _run_one(dataset, task, options, _WORKER["data"])


def _runs(dataset: str, todo: list[tuple], options: tuple, eegmmidb, needs_covariances: bool,
          n_jobs: int) -> Iterator[tuple[dict, list[dict]]]:
    """Each run's rows, in this process or, with ``n_jobs`` > 1, as ``n_jobs`` worker processes finish them.

    Runs are independent: each job fits one at a time with one thread (tiny-matrix work,
    :mod:`skfedriem.federated.parallel`) and loads the trials itself once, rather than receiving them
    with every run.
    """
    if n_jobs == 1:
        data = _study_data(dataset, eegmmidb, needs_covariances)
        yield from (_run_one(dataset, task, options, data) for task in todo)
        return
    executor = ProcessPoolExecutor(max_workers=n_jobs, initializer=_start_worker,
                                   initargs=(dataset, eegmmidb, needs_covariances))
    futures = [executor.submit(_run_in_worker, dataset, task, options) for task in todo]
    try:
        yield from (future.result() for future in as_completed(futures))
    finally:  # an interrupted study stops now (a resumed one runs what is missing), not after every queued run
        for future in futures:
            future.cancel()
        executor.shutdown(wait=False, kill_workers=True)


def _run_one(dataset: str, task: tuple, options: tuple, data: tuple) -> tuple[dict, list[dict]]:
    """One run's ``runs.csv`` row and ``curves.csv`` rows; ``task`` is (arm, ε, seed, participation), ``options``
    (n_rounds, schedule)."""
    arm, eps, seed, participation = task
    n_rounds, schedule = options
    X, covariances, y, subjects, clients = data
    train, valid, test = split_trials(y, subjects, seed)
    spec = ARM_SPECS[arm]
    inputs = covariances if spec.takes_covariances else X
    groups = np.zeros(len(y), dtype=int) if spec.central else clients
    n_clients = len(np.unique(clients))
    split = (inputs[train], y[train], groups[train], inputs[valid], y[valid], inputs[test], y[test])
    with thread_budget():
        summary, history = _fit_arm(spec, eps, seed, DATASETS[dataset], n_clients, participation, (n_rounds, schedule),
                                    split)
    row = dict(dataset=dataset, arm=arm, eps=_eps_label(eps), seed=seed, participation=f"{participation:g}",
               n_clients=1 if spec.central else n_clients, **summary)
    row["clients_per_round"] = row["clients_per_round"] or (1 if spec.central else n_clients)
    curves = [dict(dataset=dataset, arm=arm, eps=row["eps"], seed=seed, participation=row["participation"],
                   round=h["round"], valid_accuracy=h["valid_accuracy"], epsilon=h["epsilon"]) for h in history]
    return row, curves


def _fit_arm(spec: Arm, eps, seed: int, config: DatasetConfig, n_clients: int, participation: float,
             options: tuple, data) -> tuple[dict, list[dict]]:
    """Train one run; its ``runs.csv`` fields and its per-round history.

    The centralised non-private arms train with skorch (:mod:`skfedriem.experiments.central`);
    every other arm with its federated estimator (one client for the centralised private arms).
    """
    X_train, y_train, g_train, X_valid, y_valid, X_test, y_test = data
    n_rounds, schedule = options
    t0 = time.perf_counter()
    if spec.central and eps is None:
        from sklearn.preprocessing import LabelEncoder

        from .central import central_net, net_history

        encoder = LabelEncoder().fit(y_train)
        settings = dict(config.spdnet if spec.takes_covariances else config.eegnet)
        rounds = n_rounds if n_rounds is not None else settings["n_rounds"]
        torch.manual_seed(seed)  # skorch initialises the network from torch's global generator
        net = central_net(spec.network, input_shape=X_train.shape[1:], n_classes=len(encoder.classes_),
                          lr=settings["lr"], batch_size=settings["batch_size"], n_rounds=rounds, dims=config.dims,
                          reeig_eps=config.reeig_eps,
                          validation=(X_valid, encoder.transform(y_valid)))
        net.fit(X_train.astype(np.float32), encoder.transform(y_train))
        summary = dict(test_accuracy=net.score(X_test.astype(np.float32), encoder.transform(y_test)),
                       epsilon_certified=math.inf, noise_std=0.0, batch_size=net.batch_size, clients_per_round=1,
                       n_rounds=rounds, seconds=time.perf_counter() - t0, aggregation_ms_per_round=0.0)
        return summary, net_history(net)
    est = make_estimator(spec.name, eps, seed, config, n_clients, participation, n_rounds, schedule)
    with warnings.catch_warnings():
        # batch clamping (the CSV records batch_size) and SeededNoiseWarning (the study is seeded on purpose)
        warnings.simplefilter("ignore", UserWarning)
        est.fit(X_train, y_train, groups=g_train, validation_data=(X_valid, y_valid))
    summary = dict(test_accuracy=est.score(X_test, y_test), epsilon_certified=est.epsilon_,
                   noise_std=est.noise_std_, batch_size=est.batch_size_, clients_per_round=est.clients_per_round,
                   n_rounds=est.plan_.n_rounds, seconds=time.perf_counter() - t0,
                   aggregation_ms_per_round=1e3 * float(np.mean([h["aggregation_seconds"] + h.get("submission_seconds", 0.0)
                                                                  for h in est.history_])))
    return summary, est.history_


def _covariances(X: np.ndarray) -> np.ndarray:
    from pyriemann.estimation import Covariances

    return Covariances("oas").fit_transform(X)


def _append(path: Path, fields: list[str], rows: list[dict]) -> None:
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        if new:
            writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) and math.isfinite(v) else v)
                             for k, v in row.items()})
