"""What protecting a person costs: subject-level (``privacy_unit="subject"``) against record-level fits at equal ε.

Synthetic: 4 sites × 10 subjects × 30 trials (8 channels, 2 classes; each
subject its own distortion, ``make_spd_classification``'s subject effect), a
fifth of each subject's trials held out. Real (when ``--data`` holds the
PhysioNet files): the 5 PhysionetMI subjects' left/right imagery, one client
each (the paper's cross-subject federation: subject-level is then
client-level privacy), a stratified third of each subject's trials held out.

For each model (FederatedTangentSpaceClassifier, FederatedSPDNetClassifier,
default settings) and ε: held-out accuracy of the record-level fit and of the
subject-level fit, and what each run guarantees one subject: the subject-level
fit's ε, and the record-level fit's :meth:`epsilon_for_group` for the most
trials one subject contributed (inf: nothing certified).

    python benchmarks/privacy_unit.py [--seeds 2] [--eps 1 4 10] [--no-real]
"""

import argparse
import json
import math
import time
import warnings
from pathlib import Path

import numpy as np
from pyriemann.estimation import Covariances
from pyriemann.tangentspace import TangentSpace
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from skfedriem import FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem.datasets import make_spd_classification

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eegmmidb"
SITES, SUBJECTS_PER_SITE, TRIALS = 4, 10, 30
MODELS = {"tangent": FederatedTangentSpaceClassifier, "spdnet": FederatedSPDNetClassifier}


def synthetic(seed: int):
    """(X, y, site, subject, test) of the synthetic federation."""
    X, y, subject = make_spd_classification(SITES * SUBJECTS_PER_SITE, TRIALS, 8, n_classes=2, heterogeneity=0.5,
                                            class_sep=0.5, random_state=seed)
    site = subject // SUBJECTS_PER_SITE
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), dtype=bool)
    for s in np.unique(subject):
        idx = np.flatnonzero(subject == s)
        test[rng.choice(idx, len(idx) // 5, replace=False)] = True
    return X, y, site, subject, test


def real(data: Path, seed: int):
    """(X, y, site, subject, test) of the real subjects (covariances), one client each."""
    from physionet_real import held_out_mask, load_subjects  # the same subjects and splits as that benchmark

    _, _, X, y, groups = load_subjects(data)
    covariances = Covariances("oas").fit_transform(X)
    return covariances, y, groups, groups, held_out_mask(y, groups, seed)


def score(cls, eps, unit, rounds, X, y, site, subject, test, seed):
    clf = cls(eps=eps, privacy_unit=unit, n_rounds=rounds, random_state=seed)
    clf.fit(X[~test], y[~test], groups=site[~test], subjects=subject[~test] if unit == "subject" else None)
    most = max(int(np.sum(subject[~test] == s)) for s in np.unique(subject))
    guarantee = clf.epsilon_ if unit == "subject" else clf.epsilon_for_group(most)
    return clf.score(X[test], y[test]), guarantee


def baseline(federation, seeds) -> float:
    """pyRiemann's TangentSpace + LogisticRegression on the pooled training trials (no federation, no privacy)."""
    scores = []
    for seed in range(seeds):
        X, y, _, _, test = federation(seed)
        pipe = make_pipeline(TangentSpace(), LogisticRegression(max_iter=1000)).fit(X[~test], y[~test])
        scores.append(pipe.score(X[test], y[test]))
    return float(np.mean(scores))


def study(name, federation, seeds, epsilons, rounds):
    rows = []
    for model, cls in MODELS.items():
        for eps in [None, *epsilons]:
            row = {"federation": name, "model": model, "eps": eps}
            for unit in ("record", "subject"):
                accuracies, guarantees, started = [], [], time.perf_counter()
                for seed in range(seeds):
                    accuracy, guarantee = score(cls, eps, unit, rounds, *federation(seed), seed)
                    accuracies.append(accuracy)
                    guarantees.append(guarantee)
                row[f"{unit}_accuracy"] = float(np.mean(accuracies))
                worst = float(max(guarantees))
                row[f"{unit}_subject_epsilon"] = None if math.isinf(worst) else worst  # None: nothing certified
                row[f"{unit}_seconds"] = (time.perf_counter() - started) / seeds
            rows.append(row)
    return rows


def table(rows) -> str:
    lines = [f"{'federation':<10} {'model':<8} {'eps':>5} | {'record acc':>10} {'subject ε':>10} | "
             f"{'subject acc':>11} {'subject ε':>10}"]
    for r in rows:
        eps = "none" if r["eps"] is None else format(r["eps"], "g")
        rec, sub = ("inf" if r[key] is None else format(r[key], ".3g")
                    for key in ("record_subject_epsilon", "subject_subject_epsilon"))
        lines.append(f"{r['federation']:<10} {r['model']:<8} {eps:>5} | {r['record_accuracy']:>10.3f} {rec:>10} | "
                     f"{r['subject_accuracy']:>11.3f} {sub:>10}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--eps", type=float, nargs="+", default=[1.0, 4.0, 10.0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-real", action="store_true", help="only the synthetic federation")
    parser.add_argument("--rounds", default="auto", help='n_rounds of every fit (default "auto": planned)')
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rounds = args.rounds if args.rounds == "auto" else int(args.rounds)
    rows = study("synthetic", synthetic, args.seeds, args.eps, rounds)
    baselines = {"synthetic": baseline(synthetic, args.seeds)}
    if not args.no_real and args.data.is_dir():
        physionet = lambda seed: real(args.data, seed)  # noqa: E731
        rows += study("physionet", physionet, args.seeds, args.eps, rounds)
        baselines["physionet"] = baseline(physionet, args.seeds)
    print("held-out accuracy and each run's certified ε for one subject (record-level: by group privacy over "
          f"the subject's trials), {args.seeds} seeds")
    print(table(rows))
    print("pyRiemann TangentSpace + LogisticRegression, pooled, no privacy: "
          + ", ".join(f"{name} {accuracy:.3f}" for name, accuracy in baselines.items()))
    print(json.dumps({"benchmark": "privacy_unit", "synthetic": {"sites": SITES, "subjects_per_site": SUBJECTS_PER_SITE,
                                                                "trials": TRIALS},
                      "seeds": args.seeds, "rows": rows, "pyriemann_ts_lr": baselines}))


if __name__ == "__main__":
    main()
