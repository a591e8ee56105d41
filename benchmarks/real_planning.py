"""Planning on real federations of subjects: the tangent-space classifier's schedule on a grid, and the planned one.

For each federation and ε, the estimator's planned defaults (``"auto"``) and every cell of a grid of constant SGD
steps η and rounds T (B planned) are trained on the training trials and scored on held-out trials of the same
subjects; each cell keeps its accuracy per seed, and the plan's own choice and signal-to-noise figure. The ``curator``
cell is the planned defaults with every training trial at one client (a trusted curator running the same private
steps). The grid's search is not private (a study of settings, as a paper tunes): its conclusions become public
defaults.

Federations: the 24 real PhysioNet subjects (``--data``; left/right imagery, 8–32 Hz, 128 Hz, OAS covariances) as
24 clients of one subject, 8 sites of 3 and 4 sites of 6 (``24x1``, ``8x3``, ``4x6``), on 9 motor-cortex channels
and on all 64 (``--channels``); and the synthetic federations the planner was first tuned on (``small-clients``,
``many-30``: ``benchmarks/classifier_planning.py``). A stratified third of every subject's trials is held out
(``benchmarks/physionet_real.py``'s split); pyRiemann's TangentSpace + LogisticRegression on the pooled training
trials is the non-private reference.

Every fit takes the classifier's default reference point (``--reference auto``: the clients' mean, released privately
unless its planned noise would bury it) or the identity (``--reference identity``, the private default before).

    python benchmarks/real_planning.py [--federations 24x1 8x3 4x6 small-clients many-30] [--channels motor all]
        [--eps 4 10 20] [--lrs 0.1 0.3 1 3] [--rounds 100 200 400] [--seeds 5] [--reference auto] [--cache DIR]
"""

import argparse
import itertools
import json
import time
import warnings
from pathlib import Path

import numpy as np
from pyriemann.tangentspace import TangentSpace
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from skfedriem import FederatedTangentSpaceClassifier

from classifier_planning import split as synthetic_split
from distributed_noise import real_subjects
from physionet_real import held_out_mask

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eegmmidb"
REAL = {"24x1": 1, "8x3": 3, "4x6": 6}  # subjects per site
SYNTHETIC = ("small-clients", "many-30")


def subjects_of(data: Path, channels: str, cache: Path | None):
    """(covariances, labels, subjects) of the 24 subjects, read once from ``cache`` when given."""
    stored = None if cache is None else cache / f"eeg24_{channels}.npz"
    if stored is not None and stored.exists():
        kept = np.load(stored)
        return kept["X"], kept["y"], kept["subjects"]
    X, y, subjects = real_subjects(data, channels)
    if stored is not None:
        stored.parent.mkdir(parents=True, exist_ok=True)
        np.savez(stored, X=X, y=y, subjects=subjects)
    return X, y, subjects


def federations(args):
    """(name, splits) of every federation asked for; a split is ((X, y, clients), (X_test, y_test))."""
    for name in (f for f in args.federations if f in SYNTHETIC):
        yield name, [synthetic_split(name, seed) for seed in range(args.seeds)]
    real = [f for f in args.federations if f in REAL]
    if not real or not args.data.is_dir():
        return
    for channels in args.channels:
        X, y, subjects = subjects_of(args.data, channels, args.cache)
        codes = np.unique(subjects, return_inverse=True)[1]
        masks = [held_out_mask(y, subjects, seed) for seed in range(args.seeds)]
        for name in real:
            sites = codes // REAL[name]
            yield f"{channels} {name}", [((X[~t], y[~t], sites[~t]), (X[t], y[t])) for t in masks]


def fit_cell(settings: dict, eps: float, splits) -> dict:
    """One cell's held-out accuracy per seed, and what the fit planned."""
    accuracies, started = [], time.perf_counter()
    for seed, ((X, y, clients), (Xt, yt)) in enumerate(splits):
        clf = FederatedTangentSpaceClassifier(eps=eps, random_state=seed, **settings).fit(X, y, groups=clients)
        accuracies.append(float(clf.score(Xt, yt)))
    plan = clf.plan_
    return {"accuracies": accuracies, "accuracy": float(np.mean(accuracies)), "lr": float(plan.lr),
            "n_rounds": int(plan.n_rounds), "batch_size": plan.batch_size,
            "signal_to_noise": plan.signal_to_noise,
            "seconds_per_fit": (time.perf_counter() - started) / len(splits)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--federations", nargs="+", default=[*REAL, *SYNTHETIC], choices=[*REAL, *SYNTHETIC])
    parser.add_argument("--channels", nargs="+", default=["motor", "all"], choices=["motor", "all"])
    parser.add_argument("--eps", type=float, nargs="+", default=[4.0, 10.0, 20.0])
    parser.add_argument("--lrs", type=float, nargs="+", default=[0.1, 0.3, 1.0, 3.0])
    parser.add_argument("--rounds", type=int, nargs="+", default=[100, 200, 400])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cache", type=Path, default=None, help="keep the real covariances here between runs")
    parser.add_argument("--reference", choices=["auto", "identity"], default="auto",
                        help="every fit's reference point: the classifier's default, or the identity")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    started = time.perf_counter()
    rows, references = [], {}
    print(f"held-out accuracy, mean of {args.seeds} seeds: the planned defaults, and the grid's best cell (η, T); "
          f"reference: {args.reference}")
    print(f"{'federation':<16} {'eps':>4} | {'planned':>7} {'η':>6} {'T':>4} {'B':>4} {'snr':>6} | {'curator':>7} | "
          f"{'best':>6} {'snr':>6}  cell")
    for name, splits in federations(args):
        references[name] = float(np.mean([make_pipeline(TangentSpace(), LogisticRegression(max_iter=1000))
                                           .fit(X, y).score(Xt, yt) for (X, y, _), (Xt, yt) in splits]))
        for eps in args.eps:
            reference = {} if args.reference == "auto" else {"reference": None}
            cells = {"planned": fit_cell(reference, eps, splits),
                     "curator": fit_cell(reference, eps,
                                         [((X, y, np.zeros_like(c)), test) for (X, y, c), test in splits])}
            for lr, rounds in itertools.product(args.lrs, args.rounds):
                cells[f"lr={lr:g} T={rounds}"] = fit_cell({"lr": lr, "n_rounds": rounds, **reference}, eps, splits)
            best = max((c for c in cells if c not in ("planned", "curator")), key=lambda c: cells[c]["accuracy"])
            planned = cells["planned"]
            rows.append({"federation": name, "eps": eps, "reference": args.reference, "cells": cells, "best": best})
            snr = planned["signal_to_noise"]
            print(f"{name:<16} {eps:>4g} | {planned['accuracy']:>7.3f} {planned['lr']:>6.3g} {planned['n_rounds']:>4} "
                  f"{planned['batch_size']!s:>4} {'-' if snr is None else f'{snr:.3g}':>6} | "
                  f"{cells['curator']['accuracy']:>7.3f} | {cells[best]['accuracy']:>6.3f} "
                  f"{cells[best]['signal_to_noise']:>6.3g}  {best}", flush=True)
    print("pyRiemann TangentSpace + LogisticRegression, pooled, no privacy: "
          + ", ".join(f"{name} {accuracy:.3f}" for name, accuracy in references.items()))
    print(json.dumps({"benchmark": "real_planning", "seeds": args.seeds, "rows": rows, "pyriemann_ts_lr": references,
                      "seconds": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
