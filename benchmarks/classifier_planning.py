"""Which schedule a private classifier needs: a grid over optimiser settings, per federation and ε.

For each federation (synthetic, the sizes of our users' studies) and each ε, every candidate
setting of each classifier is trained on the training trials and scored on held-out trials of
the same clients (accuracy; chance is 1 / n_classes). The table gives, per classifier and ε, the
grid's best candidate, the estimator's default and their accuracy above chance; the JSON line
holds every score. This is a study of settings, scored on held-out data the way a paper tunes:
the search itself is not private, which is why its conclusions become public defaults rather
than something a user re-runs on private records.

* ``small-clients``: 20 clients × 50 trials (40 to train), 8 channels, 2 classes, a subject
  effect (the cross-subject regime: each subject a client).
* ``bnci``: 3 clients × 1300 trials (1000 to train), 22 channels, 4 classes (BNCI2014_001 size).
* ``many-10``, ``many-30``, ``many-100``: 10, 30 or 100 clients × 45 trials (36 to train), 8 channels,
  2 classes (PhysionetMI-like subjects as clients).
* ``physionet``: the real PhysioNet eegmmidb subjects 1–5 (imagined left vs right hand, 8–32 Hz,
  OAS covariances of 64 channels), one client per subject, a stratified third of each subject's
  trials held out (30–31 to train): ``benchmarks/physionet_real.py``'s pooled split. Needs the
  files of ../shared/data/eegmmidb (or ``--data``).

"default" is the estimator's own (planned) schedule; ``sgd lr=X/tau`` a step of X per round over the
run's τ local steps; ``planned walk=W`` the planner's step at another noise walk W
(:func:`skfedriem.classification.planning.plan_classifier`).

    python benchmarks/classifier_planning.py --federations small-clients --seeds 2
"""

from __future__ import annotations

import argparse
import functools
import json
import time
import warnings
from pathlib import Path

import numpy as np

from skfedriem import FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem.classification.planning import plan_classifier
from skfedriem.datasets import make_spd_classification

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eegmmidb"

#: The real-EEG federation: its clients are the recorded subjects, not a generator's.
REAL = "physionet"
FEDERATIONS = {
    "small-clients": dict(n_clients=20, n_matrices_per_client=50, n_channels=8, n_classes=2, heterogeneity=0.5),
    "bnci": dict(n_clients=3, n_matrices_per_client=1300, n_channels=22, n_classes=4, heterogeneity=0.5),
    **{f"many-{n}": dict(n_clients=n, n_matrices_per_client=45, n_channels=8, n_classes=2, heterogeneity=0.5)
       for n in (10, 30, 100)},
    REAL: dict(n_classes=2),
}
TEST_SHARE = {"small-clients": 0.2, "bnci": 300 / 1300, **{f"many-{n}": 9 / 45 for n in (10, 30, 100)}}

#: A learning rate of X per round ("X/tau"): η = X / τ, τ the run's local steps per round (one epoch at B = 64).
PER_ROUND = "0.5/tau"

#: Candidate settings per classifier; the first is the estimator's default (None: the estimator's own).
CANDIDATES = {
    "tangent": (FederatedTangentSpaceClassifier, {
        "default": {},
        "sgd lr=0.02": dict(optimizer="sgd", lr=0.02, lr_schedule="constant"),
        "sgd lr=0.5": dict(optimizer="sgd", lr=0.5, lr_schedule="constant"),
        "sgd lr=2": dict(optimizer="sgd", lr=2.0, lr_schedule="constant"),
        "planned, clip=auto": dict(clip="auto"),
        "sgd lr=0.5/tau": dict(optimizer="sgd", lr=PER_ROUND, lr_schedule="constant"),
        "sgd lr=2 cosine": dict(optimizer="sgd", lr=2.0, lr_schedule="cosine"),
        "adam lr=1e-2": dict(optimizer="adam", lr=1e-2, lr_schedule="cosine"),
        "adam lr=5e-2": dict(optimizer="adam", lr=5e-2, lr_schedule="cosine"),
    }),
    "spdnet": (FederatedSPDNetClassifier, {
        "default": {},
        "adam lr=1e-2 cosine (before planning)": dict(optimizer="adam", lr=1e-2, lr_schedule="cosine"),
        "sgd lr=0.5 dims=(4,)": dict(optimizer="sgd", lr=0.5, lr_schedule="constant", dims=(4,)),
        "sgd lr=0.5": dict(optimizer="sgd", lr=0.5, lr_schedule="constant"),
        "sgd lr=0.5/tau": dict(optimizer="sgd", lr=PER_ROUND, lr_schedule="constant"),
        "sgd lr=0.1": dict(optimizer="sgd", lr=0.1, lr_schedule="constant"),
        "sgd lr=0.2/tau": dict(optimizer="sgd", lr="0.2/tau", lr_schedule="constant"),
        "sgd lr=0.1/tau": dict(optimizer="sgd", lr="0.1/tau", lr_schedule="constant"),
        **{f"planned walk={w:g}": {"noise_walk": w} for w in (0.1, 0.2, 0.4, 0.8, 1.6)},
        "planned, clip=auto": dict(clip="auto"),
        "adam lr=1e-2 dims=(4,)": dict(optimizer="adam", lr=1e-2, dims=(4,)),
    }),
}


def steps_per_round(groups: np.ndarray, model: str, eps: float | None) -> int:
    """τ of the estimator's planned round on these clients (one epoch of the smallest client under privacy)."""
    sizes = np.unique(groups, return_counts=True)[1].tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan_classifier(model=model, client_sizes=sizes, eps=eps).steps_per_round


@functools.lru_cache(maxsize=1)
def real_covariances(data: Path):
    """The real subjects' OAS covariances, labels and subjects (``benchmarks/physionet_real.py``'s recordings)."""
    from physionet_real import load_subjects
    from pyriemann.estimation import Covariances

    _, _, X, y, groups = load_subjects(data)
    return Covariances("oas").fit_transform(X), y, groups


def real_split(data: Path, seed: int):
    """The real subjects split as ``benchmarks/physionet_real.py`` splits them (a held-out third per subject)."""
    from physionet_real import held_out_mask

    C, y, groups = real_covariances(data)
    test = held_out_mask(y, groups, seed)
    return (C[~test], y[~test], groups[~test]), (C[test], y[test])


def split(name: str, seed: int, data: Path = DEFAULT_DATA):
    if name == REAL:
        return real_split(data, seed)
    X, y, groups = make_spd_classification(**FEDERATIONS[name], class_sep=0.3, scale=1e-10, random_state=seed)
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), dtype=bool)
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        test[rng.choice(idx, size=round(TEST_SHARE[name] * len(idx)), replace=False)] = True
    return (X[~test], y[~test], groups[~test]), (X[test], y[test])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--federations", nargs="+", choices=sorted(FEDERATIONS), default=["small-clients"])
    parser.add_argument("--models", nargs="+", choices=sorted(CANDIDATES), default=sorted(CANDIDATES))
    parser.add_argument("--eps", nargs="+", default=["1", "4", "10", "none"], help="ε values ('none': non-private)")
    parser.add_argument("--seeds", type=int, default=2, help="federations (and runs) per setting")
    parser.add_argument("--rounds", type=int, default=None, help="n_rounds (default: the estimator's)")
    parser.add_argument("--candidates", nargs="+", default=None, help="only these candidate labels")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the eegmmidb files (physionet)")
    args = parser.parse_args()
    epsilons = [None if e == "none" else float(e) for e in args.eps]
    scores: dict = {}
    started = time.perf_counter()
    for federation in args.federations:
        n_classes = FEDERATIONS[federation]["n_classes"]
        data = [split(federation, seed, args.data) for seed in range(args.seeds)]
        for model in args.models:
            cls, candidates = CANDIDATES[model]
            for eps in epsilons:
                for label, params in candidates.items():
                    if args.candidates is not None and label not in args.candidates:
                        continue
                    accuracies = []
                    for seed, ((X, y, groups), (Xt, yt)) in enumerate(data):
                        extra = {} if args.rounds is None else {"n_rounds": args.rounds}
                        if isinstance(params.get("lr"), str):  # "X/tau"
                            extra["lr"] = float(params["lr"].split("/")[0]) / steps_per_round(groups, model, eps)
                        if "noise_walk" in params:  # the planner's η at another noise walk
                            sizes = np.unique(groups, return_counts=True)[1].tolist()
                            extra["lr"] = plan_classifier(model=model, client_sizes=sizes, eps=eps,
                                                          noise_walk=params["noise_walk"]).lr
                        est = cls(eps=eps, random_state=seed,
                                  **{**{k: v for k, v in params.items() if k != "noise_walk"}, **extra})
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            accuracies.append(float(est.fit(X, y, groups=groups).score(Xt, yt)))
                    scores[f"{federation}|{model}|{eps}|{label}"] = accuracies
                    print(f"{federation:13} {model:8} eps={eps!s:5} {label:24} "
                          f"{np.mean(accuracies):.3f} ({time.perf_counter() - started:.0f} s)", flush=True)
        print()
        print(f"{federation}: accuracy above chance (1/{n_classes}), mean of {args.seeds} seeds")
        print(f"{'model':8} {'eps':>5} {'default':>8} {'best':>8}  best setting")
        for model in args.models:
            for eps in epsilons:
                rows = {label: np.mean(scores[f"{federation}|{model}|{eps}|{label}"]) - 1 / n_classes
                        for label in CANDIDATES[model][1] if f"{federation}|{model}|{eps}|{label}" in scores}
                if not rows:
                    continue
                best = max(rows, key=rows.get)
                default = f"{rows['default']:>8.3f}" if "default" in rows else f"{'-':>8}"
                print(f"{model:8} {eps!s:>5} {default} {rows[best]:>8.3f}  {best}")
        print()
    print(json.dumps({"benchmark": "classifier_planning", "seeds": args.seeds, "rounds": args.rounds,
                      "seconds": round(time.perf_counter() - started, 1), "accuracy": scores}))


if __name__ == "__main__":
    main()
