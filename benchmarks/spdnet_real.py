"""SPDNet on the 24 real PhysioNet subjects: its planned defaults, the choices around them, and the tangent model.

Each cell trains on the training trials and scores held-out trials of the same subjects (a stratified third of
every subject's trials, ``benchmarks/physionet_real.py``'s split), one fit per seed with fresh noise:

* ``tangent``: :class:`~skfedriem.FederatedTangentSpaceClassifier` with its defaults (the target);
* ``spdnet``: :class:`~skfedriem.FederatedSPDNetClassifier` with its defaults: inputs whitened by the clients' mean,
  released privately before the rounds, and the planned step;
* ``identity``: SPDNet at the identity (``reference=None``: the default before);
* ``lr/3``, ``lr*3``: the planned step divided or multiplied by 3 (same seed, same split);
* ``dims6``: a BiMap to 6 instead of min(16, n_channels);
* ``rlavg``, ``retavg``: the other aggregation rules (local noise only: with distributed noise every rule takes the
  same one step a round).

Federations (``--cells``): ``24x1-distributed`` (one subject a client, ``noise="distributed"``) and ``4x6-local``
(4 sites of 6 subjects, local noise), at each ε (``--eps``); and ``24x1-none``, without privacy (where SPDNet's
default is Adam). 9 motor-cortex channels by default (``--channels all``: 64).

    python benchmarks/spdnet_real.py [--eps 4 10] [--seeds 5] [--cells 24x1-distributed 4x6-local 24x1-none]
        [--arms tangent spdnet identity lr/3 lr*3 dims6 rlavg retavg] [--channels motor] [--jobs 2]
"""

import argparse
import json
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch

from skfedriem import FederatedSPDNetClassifier, FederatedTangentSpaceClassifier

from distributed_noise import real_subjects
from physionet_real import held_out_mask

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eegmmidb"
CELLS = {"24x1-distributed": (1, "distributed"), "4x6-local": (6, "local"), "24x1-none": (1, None)}
ARMS = {"tangent": (FederatedTangentSpaceClassifier, {}), "spdnet": (FederatedSPDNetClassifier, {}),
        "identity": (FederatedSPDNetClassifier, {"reference": None}),
        "lr/3": (FederatedSPDNetClassifier, {"lr_factor": 1 / 3}), "lr*3": (FederatedSPDNetClassifier, {"lr_factor": 3}),
        "dims6": (FederatedSPDNetClassifier, {"dims": (6,)}),
        "rlavg": (FederatedSPDNetClassifier, {"aggregation": "rlavg"}),
        "retavg": (FederatedSPDNetClassifier, {"aggregation": "retavg"})}
_DATA: dict = {}


def _load(data: Path, channels: str) -> None:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    _DATA["trials"] = real_subjects(data, channels)


def fit_once(arm: str, cell: str, eps: float | None, seed: int) -> float:
    """One fit's held-out accuracy (run in a worker holding the trials)."""
    X, y, subjects = _DATA["trials"]
    per_site, noise = CELLS[cell]
    sites = np.unique(subjects, return_inverse=True)[1] // per_site
    test = held_out_mask(y, subjects, seed)
    cls, settings = ARMS[arm]
    settings = dict(settings)
    factor = settings.pop("lr_factor", None)
    private = {} if noise is None else {"noise": noise}
    fit = lambda **extra: cls(eps=eps, **private, **settings, **extra).fit(X[~test], y[~test], groups=sites[~test])  # noqa: E731
    clf = fit()
    if factor is not None:
        clf = fit(lr=factor * clf.plan_.lr)
    return float(clf.score(X[test], y[test]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eps", type=float, nargs="+", default=[4.0, 10.0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cells", nargs="+", default=list(CELLS), choices=list(CELLS))
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--channels", default="motor", choices=["motor", "all"])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if not args.data.is_dir():
        print(f"no EEGMMIDB files at {args.data}: nothing to run")
        print(json.dumps({"benchmark": "spdnet_real", "rows": []}))
        return
    tasks = []
    for cell in args.cells:
        eps_values = [None] if CELLS[cell][1] is None else args.eps
        for eps in eps_values:
            for arm in args.arms:
                if arm in ("rlavg", "retavg") and CELLS[cell][1] != "local":
                    continue
                tasks.append((arm, cell, eps))
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs, initializer=_load, initargs=(args.data, args.channels)) as pool:
        futures = {task: [pool.submit(fit_once, *task, seed) for seed in range(args.seeds)] for task in tasks}
        rows = []
        print(f"held-out accuracy on the 24 subjects ({args.channels} channels), mean of {args.seeds} seeds "
              "(fresh noise each)")
        print(f"{'cell':<18} {'eps':>5} {'arm':<9} {'mean':>6}  per seed")
        for (arm, cell, eps), results in futures.items():
            accuracies = [f.result() for f in results]
            rows.append({"cell": cell, "eps": eps, "arm": arm, "accuracy": float(np.mean(accuracies)),
                         "accuracies": accuracies})
            label = "none" if eps is None else f"{eps:g}"
            print(f"{cell:<18} {label:>5} {arm:<9} {np.mean(accuracies):>6.3f}  "
                  + " ".join(f"{a:.3f}" for a in accuracies), flush=True)
    print(f"({time.perf_counter() - started:.0f} s)")
    print(json.dumps({"benchmark": "spdnet_real", "channels": args.channels, "seeds": args.seeds, "rows": rows}))


if __name__ == "__main__":
    main()
