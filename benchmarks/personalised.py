"""Personalised models: every client re-centred on its own privately released mean (``recentre="client"``) against
one global model at the same total ε, and against the non-private re-centred pipeline.

On the 24 real PhysioNet subjects (``--data``; left/right imagery, 9 motor channels, trace-normalised OAS
covariances) and on synthetic federations with a site effect (``--synthetic``: ``make_spd_classification`` sites,
each moved by a congruence of its own):

* within clients (``--sites-of K``: sites of K whole subjects, 24 × 1 or 4 × 6; a stratified third of every
  subject's trials held out, ``benchmarks/physionet_real.py``'s split, ``--seeds``): held-out accuracy of the private
  tangent-space classifier at its defaults, ``global`` (``recentre=None``) and ``recentre="client"`` (each held-out
  trial re-centred on its client's released mean, ``groups=``), for every ``--private NOISE:EPS`` arm; beside them,
  without privacy, pyRiemann's TangentSpace + LogisticRegression pooled and with every subject re-centred on its own
  training mean (the ceiling);
* across subjects (``--folds`` folds of whole subjects held out; the training subjects one client each): the mean
  ROC AUC of the held-out subjects, each scored alone and re-centred on its own trials (``groups=None``), as MOABB's
  ``CrossSubjectEvaluation`` scores them.

    python benchmarks/personalised.py [--sites-of 1 6] [--private distributed:10 local:10 ...] [--seeds 3]
        [--folds 4] [--synthetic 8] [--no-real] [--cache DIR]
"""

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
from pyriemann.tangentspace import TangentSpace
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold
from sklearn.pipeline import make_pipeline

from skfedriem import FederatedTangentSpaceClassifier
from skfedriem.classification._recentring import recentred, riemannian_mean, trace_normalised
from skfedriem.datasets import make_spd_classification

from physionet_real import held_out_mask
from real_planning import DEFAULT_DATA, subjects_of


def _own_means_recentred(X, subjects, train):
    """Every subject's trials re-centred on the Riemannian mean of its training trials (not private)."""
    import torch

    out = np.empty_like(X)
    for s in np.unique(subjects):
        rows = subjects == s
        mean = riemannian_mean(trace_normalised(X[rows & train]))
        out[rows] = recentred(torch.from_numpy(X[rows]), mean).numpy()
    return out


def _pooled():
    return make_pipeline(TangentSpace(metric="riemann"), LogisticRegression(max_iter=1000))


def within(splits, arms: list[tuple[str, float]]) -> dict:
    """Held-out accuracy of every arm on each split (X, y, subjects, sites, seed): see the module's docstring."""
    rows: dict[str, list[float]] = {"pyRiemann pooled (no privacy)": [], "pyRiemann re-centred (no privacy)": []}
    for X, y, subjects, sites, seed in splits:
        test = held_out_mask(y, subjects, seed)
        rows["pyRiemann pooled (no privacy)"].append(_pooled().fit(X[~test], y[~test]).score(X[test], y[test]))
        Z = _own_means_recentred(X, subjects, ~test)
        rows["pyRiemann re-centred (no privacy)"].append(_pooled().fit(Z[~test], y[~test]).score(Z[test], y[test]))
        for noise, eps in arms:
            for recentre in (None, "client"):
                clf = FederatedTangentSpaceClassifier(eps=eps, noise=noise, recentre=recentre).fit(
                    X[~test], y[~test], groups=sites[~test])
                groups = sites[test] if recentre else None
                rows.setdefault(f"{noise}:{eps:g} {recentre or 'global'}", []).append(
                    clf.score(X[test], y[test], groups=groups))
    return _summary(rows)


def across(X, y, subjects, folds: int, arms: list[tuple[str, float]]) -> dict:
    """Mean ROC AUC of the held-out subjects of every fold, each scored alone (see the module's docstring)."""
    positive = (y == np.unique(y)[1]).astype(int)
    rows: dict[str, list[float]] = {}
    for train, test in GroupKFold(folds).split(X, y, subjects):
        held = subjects[test]
        for noise, eps in arms:
            for recentre in (None, "client"):
                clf = FederatedTangentSpaceClassifier(eps=eps, noise=noise, recentre=recentre).fit(
                    X[train], y[train], groups=subjects[train])
                rows.setdefault(f"{noise}:{eps:g} {recentre or 'global'}", []).append(float(np.mean([
                    roc_auc_score(positive[test][held == s], clf.decision_function(X[test][held == s]))
                    for s in np.unique(held)])))
    return _summary(rows)


def _summary(rows: dict[str, list[float]]) -> dict:
    return {name: {"per_seed": [round(float(v), 4) for v in values], "mean": round(float(np.mean(values)), 4)}
            for name, values in rows.items()}


def synthetic(n_sites: int, seed: int):
    """``make_spd_classification`` sites of 60 trials (classes 0.3 apart: pyRiemann short of 1.0), each moved by a
    congruence of its own (the site effect)."""
    X, y, groups = make_spd_classification(n_clients=n_sites, n_matrices_per_client=60, n_channels=6,
                                           class_sep=0.3, random_state=seed)
    rng = np.random.default_rng(seed + 1000)
    for g in np.unique(groups):
        a = rng.standard_normal((6, 6)) * 0.5
        root = np.eye(6) + (a + a.T) / 4
        X[groups == g] = root @ X[groups == g] @ root.T
    return X, y, groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cache", type=Path, default=None, help="keep the real covariances here between runs")
    parser.add_argument("--sites-of", nargs="+", type=int, default=[1], help="subjects a site, real federations")
    parser.add_argument("--private", nargs="+", default=["distributed:10"], help="NOISE:EPS arms")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--folds", type=int, default=4, help="cross-subject folds (0: none)")
    parser.add_argument("--synthetic", type=int, default=8, help="sites of the synthetic federation (0: none)")
    parser.add_argument("--no-real", action="store_true", help="the synthetic federation only")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    arms = [(noise, float(eps)) for noise, eps in (arm.split(":") for arm in args.private)]
    started, rows = time.perf_counter(), {}
    if args.synthetic:  # a federation of its own each seed
        splits = [(*synthetic(args.synthetic, seed), seed) for seed in range(args.seeds)]
        rows[f"synthetic {args.synthetic} sites"] = {"within": within([(X, y, g, g, seed) for X, y, g, seed in splits],
                                                                      arms)}
    if not args.no_real and (args.data.is_dir() or args.cache is not None):
        X, y, subjects = subjects_of(args.data, "motor", args.cache)
        codes = np.unique(subjects, return_inverse=True)[1]
        for k in args.sites_of:
            name = f"real {24 // k} x {k}"
            rows[name] = {"within": within([(X, y, subjects, codes // k, seed) for seed in range(args.seeds)], arms)}
        if args.folds:
            rows["real cross-subject"] = {"across": across(X, y, subjects, args.folds, arms)}
    for federation, splits in rows.items():
        for split, table in splits.items():
            metric = "ROC AUC of held-out subjects" if split == "across" else "held-out accuracy"
            for arm, row in table.items():
                print(f"{federation:<20} {arm:<36} {metric}: {row['mean']:.3f}")
    print(json.dumps({"benchmark": "personalised", "rows": rows, "seeds": args.seeds, "folds": args.folds,
                      "private": args.private, "seconds": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
