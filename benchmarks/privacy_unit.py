"""What protecting a person costs: subject-level (``privacy_unit="subject"``) against record-level fits at equal ε.

Synthetic: 4 sites × 10 subjects × 30 trials (8 channels, 2 classes; each
subject its own distortion, ``make_spd_classification``'s subject effect), a
fifth of each subject's trials held out. Real (when ``--data`` holds the
PhysioNet files): the 5 PhysionetMI subjects' left/right imagery, one client
each (the paper's cross-subject federation: subject-level is then
client-level privacy), a stratified third of each subject's trials held out.

For each model (FederatedTangentSpaceClassifier, FederatedSPDNetClassifier,
default settings) and ε, three kinds of fit: record-level; subject-level
sampling subjects whole (``privacy_unit="subject"``); and subject-level from k
trials of each subject a round, sampled as records and charged by group
privacy (``records_per_subject=k``, one arm per k of ``--ks``). For each:
held-out accuracy, what the run guarantees one subject (the subject-level fits'
ε; the record-level fit's :meth:`epsilon_for_group` for the most trials one
subject contributed, inf: nothing certified), and the noise std of a step's
mean in units of C (σ, the fit's ``noise_std_`` over its clip).

    python benchmarks/privacy_unit.py [--seeds 2] [--eps 1 4 10] [--ks 2 8] [--no-real]
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


def arms(ks) -> list[tuple[str, dict]]:
    """(name, the fit's privacy settings) of each kind of fit."""
    return [("record", {"privacy_unit": "record"}), ("subject", {"privacy_unit": "subject"}),
            *((f"k={k}", {"privacy_unit": "subject", "records_per_subject": k}) for k in ks)]


def score(cls, eps, settings, rounds, X, y, site, subject, test, seed):
    """(held-out accuracy, the subject's certified ε, noise std of a step's mean over C) of one fit."""
    clf = cls(eps=eps, n_rounds=rounds, random_state=seed, **settings)
    by_subject = settings["privacy_unit"] == "subject"
    clf.fit(X[~test], y[~test], groups=site[~test], subjects=subject[~test] if by_subject else None)
    most = max(int(np.sum(subject[~test] == s)) for s in np.unique(subject))
    guarantee = clf.epsilon_ if by_subject else clf.epsilon_for_group(most)
    noise = clf.noise_std_ / clf.clip if eps is not None and isinstance(clf.clip, float) else 0.0
    return clf.score(X[test], y[test]), guarantee, noise


def baseline(federation, seeds) -> float:
    """pyRiemann's TangentSpace + LogisticRegression on the pooled training trials (no federation, no privacy)."""
    scores = []
    for seed in range(seeds):
        X, y, _, _, test = federation(seed)
        pipe = make_pipeline(TangentSpace(), LogisticRegression(max_iter=1000)).fit(X[~test], y[~test])
        scores.append(pipe.score(X[test], y[test]))
    return float(np.mean(scores))


def study(name, federation, seeds, epsilons, rounds, ks):
    rows = []
    for model, cls in MODELS.items():
        for eps in [None, *epsilons]:
            row = {"federation": name, "model": model, "eps": eps}
            for arm, settings in arms(ks):
                accuracies, guarantees, noises, started = [], [], [], time.perf_counter()
                for seed in range(seeds):
                    accuracy, guarantee, noise = score(cls, eps, settings, rounds, *federation(seed), seed)
                    accuracies.append(accuracy)
                    guarantees.append(guarantee)
                    noises.append(noise)
                row[f"{arm}_accuracy"] = float(np.mean(accuracies))
                worst = float(max(guarantees))
                row[f"{arm}_subject_epsilon"] = None if math.isinf(worst) else worst  # None: nothing certified
                row[f"{arm}_noise"] = float(np.mean(noises))
                row[f"{arm}_seconds"] = (time.perf_counter() - started) / seeds
            rows.append(row)
    return rows


def table(rows, ks) -> str:
    names = [name for name, _ in arms(ks)]
    head = f"{'federation':<10} {'model':<8} {'eps':>5}"
    lines = [head + "".join(f" | {name + ' acc':>10} {'subj ε':>6} {'σ/C':>5}" for name in names)]
    for r in rows:
        line = f"{r['federation']:<10} {r['model']:<8} {'none' if r['eps'] is None else format(r['eps'], 'g'):>5}"
        for name in names:
            guarantee = r[f"{name}_subject_epsilon"]
            line += (f" | {r[f'{name}_accuracy']:>10.3f} {'inf' if guarantee is None else format(guarantee, '.3g'):>6}"
                     f" {r[f'{name}_noise']:>5.2f}")
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--eps", type=float, nargs="+", default=[1.0, 4.0, 10.0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-real", action="store_true", help="only the synthetic federation")
    parser.add_argument("--rounds", default="auto", help='n_rounds of every fit (default "auto": planned)')
    parser.add_argument("--ks", type=int, nargs="*", default=[2, 8],
                        help="records_per_subject of the subject-level fits that sample trials (one arm each)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rounds = args.rounds if args.rounds == "auto" else int(args.rounds)
    rows = study("synthetic", synthetic, args.seeds, args.eps, rounds, args.ks)
    baselines = {"synthetic": baseline(synthetic, args.seeds)}
    if not args.no_real and args.data.is_dir():
        physionet = lambda seed: real(args.data, seed)  # noqa: E731
        rows += study("physionet", physionet, args.seeds, args.eps, rounds, args.ks)
        baselines["physionet"] = baseline(physionet, args.seeds)
    print("held-out accuracy, each run's certified ε for one subject (record-level: by group privacy over the "
          f"subject's trials) and the noise std of a step's mean over C, {args.seeds} seeds")
    print(table(rows, args.ks))
    print("pyRiemann TangentSpace + LogisticRegression, pooled, no privacy: "
          + ", ".join(f"{name} {accuracy:.3f}" for name, accuracy in baselines.items()))
    print(json.dumps({"benchmark": "privacy_unit", "synthetic": {"sites": SITES, "subjects_per_site": SUBJECTS_PER_SITE,
                                                                "trials": TRIALS},
                      "seeds": args.seeds, "ks": args.ks, "rows": rows, "pyriemann_ts_lr": baselines}))


if __name__ == "__main__":
    main()
