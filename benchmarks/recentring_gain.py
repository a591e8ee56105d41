"""What re-centring each subject on its own mean gains on the real subjects, without privacy: the baseline of
personalised models.

pyRiemann's transfer learning re-centres each domain's covariances on the domain's own Riemannian mean
(``pyriemann.transfer.TLCenter``), so that every subject's trials sit around the identity before one shared
classifier. This measures that gain, non-private, on the 24 real PhysioNet subjects (``--data``; left/right imagery,
trace-normalised OAS covariances, 9 motor channels or all 64: ``--channels``), with pyRiemann's TangentSpace +
LogisticRegression:

* within subjects (a stratified third of every subject's trials held out, ``benchmarks/physionet_real.py``'s split,
  ``--seeds``): held-out accuracy of one pooled model; of every subject re-centred on the mean of its training
  trials (its held-out trials too); and with the held-out trials re-centred on their own mean (transductive);
* across subjects (``--folds`` folds of whole subjects held out, each held-out subject re-centred on the mean of its
  own trials, as a new subject's site would): ROC AUC per held-out subject, pooled against re-centred.

A private personal model can at most reach the re-centred figures; the gap between them and the pooled ones is what
personalisation can add.

With ``--private NOISE:EPS ...`` (e.g. ``local:10 distributed:10``) it also measures the *private* tangent-space
classifier (its defaults, 24 one-subject clients, the same held-out thirds) on three versions of the trials:

* ``global``: as they are (what a user gets today), at ε;
* ``re-centred on exact means``: every subject on its own training mean (not private: the ceiling of re-centring
  under private training), at ε;
* ``re-centred on private means``: every subject on its mean released by a Gaussian mechanism at
  ``--mean-share`` of ε (its trials' tangent vectors at the pooled training mean, each clipped to their median norm,
  averaged, noised for substitution of one trial, shrunk James–Stein towards the pooled mean with the noise it
  carries), the rounds at the rest. A simulation of the personal release, not the library's: the pooled mean is
  taken as public and the two parts compose by basic composition, (ε, 2δ).

    python benchmarks/recentring_gain.py [--channels motor all] [--seeds 4] [--folds 4] [--cache DIR]
        [--private local:10 distributed:10] [--mean-share 0.2] [--private-channels motor]
"""

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
from pyriemann.geometry.base import expm, invsqrtm, logm, sqrtm
from pyriemann.geometry.mean import mean_riemann
from pyriemann.tangentspace import TangentSpace
from pyriemann.utils.tangentspace import unupper, upper
from scipy.optimize import brentq
from scipy.stats import norm
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold
from sklearn.pipeline import make_pipeline

from skfedriem import FederatedTangentSpaceClassifier

from physionet_real import held_out_mask
from real_planning import DEFAULT_DATA, subjects_of


def recentred(X: np.ndarray, subjects: np.ndarray, means: dict) -> np.ndarray:
    """Every subject's trials re-centred on ``means[subject]``: M^{-1/2} X M^{-1/2}."""
    out = np.empty_like(X)
    for s in np.unique(subjects):
        whiten = invsqrtm(means[s])
        out[subjects == s] = whiten @ X[subjects == s] @ whiten
    return out


def own_means(X: np.ndarray, subjects: np.ndarray) -> dict:
    """Each subject's Riemannian mean of its trials in ``X``."""
    return {s: mean_riemann(X[subjects == s]) for s in np.unique(subjects)}


def pipeline():
    return make_pipeline(TangentSpace(metric="riemann"), LogisticRegression(max_iter=1000))


def within(X, y, subjects, seeds: int) -> dict:
    """Held-out accuracy per seed: pooled, re-centred on the training means, test re-centred on its own."""
    rows = {"pooled": [], "recentred": [], "recentred, test on its own mean": []}
    for seed in range(seeds):
        test = held_out_mask(y, subjects, seed)
        train_means = own_means(X[~test], subjects[~test])
        Xtr = recentred(X[~test], subjects[~test], train_means)
        rows["pooled"].append(pipeline().fit(X[~test], y[~test]).score(X[test], y[test]))
        model = pipeline().fit(Xtr, y[~test])
        rows["recentred"].append(model.score(recentred(X[test], subjects[test], train_means), y[test]))
        rows["recentred, test on its own mean"].append(
            model.score(recentred(X[test], subjects[test], own_means(X[test], subjects[test])), y[test]))
    return {name: {"per_seed": [round(float(v), 4) for v in values], "mean": round(float(np.mean(values)), 4)}
            for name, values in rows.items()}


def across(X, y, subjects, folds: int) -> dict:
    """Mean ROC AUC of held-out subjects (each scored alone), pooled against every subject re-centred on itself."""
    positive = (y == np.unique(y)[1]).astype(int)
    versions = {"pooled": X, "recentred": recentred(X, subjects, own_means(X, subjects))}
    out = {}
    for name, Z in versions.items():
        per_fold = []
        for train, test in GroupKFold(folds).split(Z, y, subjects):
            model = pipeline().fit(Z[train], positive[train])
            held = subjects[test]
            per_fold.append(np.mean([roc_auc_score(positive[test][held == s], model.decision_function(
                Z[test][held == s])) for s in np.unique(held)]))
        out[name] = {"per_fold": [round(float(v), 4) for v in per_fold], "mean": round(float(np.mean(per_fold)), 4)}
    return out


def private_means(X: np.ndarray, subjects: np.ndarray, train: np.ndarray, eps: float, delta: float,
                  rng: np.random.Generator) -> dict:
    """Each subject's mean of its training trials released by a Gaussian mechanism at (eps, delta) (docstring)."""
    pooled = mean_riemann(X[train])
    inner, outer = invsqrtm(pooled), sqrtm(pooled)
    vectors = upper(logm(inner @ X @ inner))
    clip = float(np.median(np.linalg.norm(vectors[train], axis=1)))
    mu = brentq(lambda m: norm.cdf(-eps / m + m / 2) - np.exp(eps) * norm.cdf(-eps / m - m / 2) - delta, 1e-3, 50)
    means = {}
    for s in np.unique(subjects):
        own = vectors[train & (subjects == s)]
        own = own * np.minimum(1.0, clip / np.linalg.norm(own, axis=1))[:, None]
        sigma = 2 * clip / (len(own) * mu)  # substituting one trial moves the clipped mean by 2C / n
        released = own.mean(0) + rng.normal(0.0, sigma, own.shape[1])
        released *= max(0.0, 1 - (own.shape[1] - 2) * sigma ** 2 / max(float(released @ released), 1e-300))
        means[s] = outer @ expm(unupper(released)) @ outer
    return means


def private_within(X, y, subjects, seeds: int, noise: str, eps: float, mean_share: float) -> dict:
    """Held-out accuracy of the private classifier per seed: global, re-centred on exact means, on private means."""
    rows = {"global": [], "re-centred on exact means": [], "re-centred on private means": []}
    rng = np.random.default_rng(0)
    for seed in range(seeds):
        test = held_out_mask(y, subjects, seed)
        versions = {"global": (X, eps), "re-centred on exact means": (
            recentred(X, subjects, own_means(X[~test], subjects[~test])), eps),
            "re-centred on private means": (
            recentred(X, subjects, private_means(X, subjects, ~test, mean_share * eps, 1e-5, rng)),
            (1 - mean_share) * eps)}
        for name, (Z, budget) in versions.items():
            clf = FederatedTangentSpaceClassifier(eps=budget, noise=noise).fit(Z[~test], y[~test],
                                                                              groups=subjects[~test])
            rows[name].append(clf.score(Z[test], y[test]))
    return {name: {"per_seed": [round(float(v), 4) for v in values], "mean": round(float(np.mean(values)), 4)}
            for name, values in rows.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--channels", nargs="+", default=["motor"], choices=["motor", "all"])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--cache", type=Path, default=None, help="keep the real covariances here between runs")
    parser.add_argument("--private", nargs="*", default=[], help="NOISE:EPS arms of the private classifier")
    parser.add_argument("--mean-share", type=float, default=0.2, help="the share of ε the private means take")
    parser.add_argument("--private-channels", nargs="+", default=["motor"], choices=["motor", "all"],
                        help="the channel sets the private arms run on (64 channels take minutes a fit)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    started, rows = time.perf_counter(), {}
    for channels in args.channels:
        X, y, subjects = subjects_of(args.data, channels, args.cache)
        X = X / (np.trace(X, axis1=1, axis2=2)[:, None, None] / X.shape[1])
        rows[channels] = {"within": within(X, y, subjects, args.seeds), "across": across(X, y, subjects, args.folds)}
        for arm in args.private if channels in args.private_channels else []:
            noise, eps = arm.split(":")
            rows[channels][f"private {arm}"] = private_within(X, y, subjects, args.seeds, noise, float(eps),
                                                              args.mean_share)
        for split in rows[channels]:
            metric = "ROC AUC of held-out subjects" if split == "across" else "held-out accuracy"
            for name, row in rows[channels][split].items():
                print(f"{channels:<6} {split:<18} {name:<34} {metric}: {row['mean']:.3f}")
    print(json.dumps({"benchmark": "recentring_gain", "rows": rows, "seeds": args.seeds, "folds": args.folds,
                      "private": args.private, "mean_share": args.mean_share,
                      "seconds": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
