"""What makes EEGNet learn the 24 real PhysioNet subjects: its normalisation, the trials' scaling, the schedule.

Each arm trains :class:`~skfedriem.FederatedEEGNetClassifier` on the raw trials of the 24 subjects with all three
imagery runs (left vs right, 8–32 Hz, 128 Hz, 64 channels by default), one subject a client, and scores a held-out
third of every subject's trials (``benchmarks/physionet_real.py``'s split); one fit per seed, seeded by it (split,
initialisation, batches and noise).

Without privacy (``--eps none``), each choice against the defaults (layer normalisation after the spatial and the
pointwise convolutions, each trial scaled by one standard deviation, Adam at 3e-3 with a cosine schedule, B = 16,
T = 200): ``paper`` (nothing between the layers, Adam at 1e-3: the paper's private EEGNet and schedule), ``no-norm``,
``group-norm`` (groups of four maps), ``per-channel`` scaling, Adam at ``lr=1e-3`` and ``lr=1e-2``.
Under privacy (``--eps 10``, ``noise="distributed"``): the defaults (SGD at the planned step), ``group-norm``, SGD
at ``lr/5`` and ``lr*4`` of it, and Adam at 3e-3.

    python benchmarks/eegnet_real.py [--eps none 10] [--seeds 3] [--arms ...] [--channels all] [--jobs 2]
"""

import argparse
import json
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch

from skfedriem import FederatedEEGNetClassifier

from distributed_noise import raw_subjects
from physionet_real import held_out_mask

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eegmmidb"
PLAIN = {"defaults": {}, "paper": {"normalization": None, "lr": 1e-3}, "no-norm": {"normalization": None},
         "group-norm": {"normalization": "group"}, "per-channel": {"per_channel_scaling": True},
         "lr=1e-3": {"lr": 1e-3}, "lr=1e-2": {"lr": 1e-2}}
PRIVATE = {"defaults": {}, "group-norm": {"normalization": "group"}, "lr/5": {"lr_factor": 0.2},
           "lr*4": {"lr_factor": 4.0}, "adam": {"optimizer": "adam", "lr": 3e-3}}
_DATA: dict = {}


def _load(data: Path, channels: str) -> None:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    import mne

    mne.set_log_level("ERROR")
    _DATA["trials"] = raw_subjects(data, channels)


def fit_once(arm: str, eps: float | None, seed: int) -> float:
    """One fit's held-out accuracy (in a worker holding the trials)."""
    X, y, subjects = _DATA["trials"]
    clients = np.unique(subjects, return_inverse=True)[1]
    test = held_out_mask(y, subjects, seed)
    settings = dict((PLAIN if eps is None else PRIVATE)[arm])
    factor = settings.pop("lr_factor", None)
    private = {} if eps is None else {"noise": "distributed"}
    # seeded (initialisation, batches, noise): reproducible, and not private against whoever knows the seed
    fit = lambda **extra: FederatedEEGNetClassifier(eps=eps, **private, **settings, random_state=seed,  # noqa: E731
                                                    **extra).fit(
        X[~test], y[~test], groups=clients[~test])
    clf = fit()
    if factor is not None:
        clf = fit(lr=factor * clf.plan_.lr)
    return float(clf.score(X[test], y[test]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eps", nargs="+", default=["none", "10"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--arms", nargs="+", default=None, help="only these (default: every arm of each ε)")
    parser.add_argument("--channels", default="all", choices=["motor", "all"])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if not args.data.is_dir():
        print(f"no EEGMMIDB files at {args.data}: nothing to run")
        print(json.dumps({"benchmark": "eegnet_real", "rows": []}))
        return
    eps_values = [None if e.lower() == "none" else float(e) for e in args.eps]
    tasks = [(arm, eps) for eps in eps_values for arm in (PLAIN if eps is None else PRIVATE)
             if args.arms is None or arm in args.arms]
    started = time.perf_counter()
    rows = []
    print(f"EEGNet, held-out accuracy on the 24 subjects ({args.channels} channels, one client a subject), "
          f"{args.seeds} seeds")
    print(f"{'eps':>5} {'arm':<12} {'mean':>6}  per seed")
    with ProcessPoolExecutor(args.jobs, initializer=_load, initargs=(args.data, args.channels)) as pool:
        futures = {task: [pool.submit(fit_once, *task, seed) for seed in range(args.seeds)] for task in tasks}
        for (arm, eps), results in futures.items():
            accuracies = [f.result() for f in results]
            rows.append({"eps": eps, "arm": arm, "settings": {k: v for k, v in
                                                              (PLAIN if eps is None else PRIVATE)[arm].items()},
                         "accuracy": float(np.mean(accuracies)), "accuracies": accuracies})
            label = "none" if eps is None else f"{eps:g}"
            print(f"{label:>5} {arm:<12} {np.mean(accuracies):>6.3f}  " + " ".join(f"{a:.3f}" for a in accuracies),
                  flush=True)
    print(f"({time.perf_counter() - started:.0f} s)")
    print(json.dumps({"benchmark": "eegnet_real", "channels": args.channels, "seeds": args.seeds, "rows": rows}))


if __name__ == "__main__":
    main()
