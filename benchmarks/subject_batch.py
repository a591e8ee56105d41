"""How many subjects a subject-level step should sample: the planner's ``batch_size`` for ``privacy_unit="subject"``.

Subject-level fits at each fraction of the smallest client's units per step
(B = 1/4, 1/2 and all of its n subjects; with ``records_per_subject=k``, of its
k n trials), every other setting at its default, on:

* synthetic federations of 4 sites × n subjects × 30 trials (n = 10 and n = 3,
  the paper's federations' 2-3 subjects a site; 8 channels, 2 classes, each
  subject its own distortion; a fifth of each subject's trials held out);
* the real PhysionetMI subjects 1-5 as one client of 5 subjects (a stratified
  third of each subject's trials held out), when ``--data`` holds the files.

It prints the held-out accuracy of each (mean over seeds), the noise std of a
step's mean over C, and what ``batch_size="auto"`` planned.

    python benchmarks/subject_batch.py [--seeds 2] [--eps 4 10] [--ks 2 8] [--no-real]
"""

import argparse
import json
import math
import warnings
from pathlib import Path

import numpy as np

from privacy_unit import DEFAULT_DATA, MODELS, real
from skfedriem.datasets import make_spd_classification

FRACTIONS = (0.25, 0.5, 1.0)


def synthetic(subjects_per_site: int):
    def federation(seed: int):
        X, y, subject = make_spd_classification(4 * subjects_per_site, 30, 8, n_classes=2, heterogeneity=0.5,
                                                class_sep=0.5, random_state=seed)
        rng, test = np.random.default_rng(seed), np.zeros(len(y), dtype=bool)
        for s in np.unique(subject):
            idx = np.flatnonzero(subject == s)
            test[rng.choice(idx, len(idx) // 5, replace=False)] = True
        return X, y, subject // subjects_per_site, subject, test
    return federation


def one_client(data: Path):
    def federation(seed: int):
        X, y, _, subject, test = real(data, seed)
        return X, y, np.zeros_like(subject), subject, test
    return federation


def fit(cls, eps, k, batch_size, federation, seed, rounds):
    X, y, site, subject, test = federation(seed)
    clf = cls(eps=eps, privacy_unit="subject", records_per_subject=k, batch_size=batch_size, n_rounds=rounds,
              random_state=seed)
    clf.fit(X[~test], y[~test], groups=site[~test], subjects=subject[~test])
    return clf.score(X[test], y[test]), clf.noise_std_ / clf.clip, clf.batch_size_


def study(name, federation, n_subjects, seeds, epsilons, ks, rounds):
    rows = []
    for model, cls in MODELS.items():
        for eps in epsilons:
            for k in [None, *ks]:
                units = n_subjects * (k or 1)
                for batch in [*sorted({max(1, math.ceil(f * units)) for f in FRACTIONS}), "auto"]:
                    runs = [fit(cls, eps, k, batch, federation, seed, rounds) for seed in range(seeds)]
                    rows.append({"federation": name, "model": model, "eps": eps, "records_per_subject": k,
                                 "batch_size": batch, "planned": int(runs[0][2]), "units": units,
                                 "accuracy": float(np.mean([r[0] for r in runs])),
                                 "noise": float(np.mean([r[1] for r in runs]))})
    return rows


def table(rows) -> str:
    lines = [f"{'federation':<14} {'model':<8} {'eps':>4} {'k':>4} {'B':>9} {'of':>4} {'accuracy':>9} {'σ/C':>6}"]
    for r in rows:
        batch = f"auto={r['planned']}" if r["batch_size"] == "auto" else str(r["batch_size"])
        lines.append(f"{r['federation']:<14} {r['model']:<8} {r['eps']:>4g} {r['records_per_subject'] or '-':>4} "
                     f"{batch:>9} {r['units']:>4} {r['accuracy']:>9.3f} {r['noise']:>6.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--eps", type=float, nargs="+", default=[4.0, 10.0])
    parser.add_argument("--ks", type=int, nargs="*", default=[2, 8])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-real", action="store_true", help="only the synthetic federations")
    parser.add_argument("--sites-of", type=int, nargs="+", default=[10, 3], help="subjects a synthetic site holds")
    parser.add_argument("--rounds", default="auto", help='n_rounds of every fit (default "auto": planned)')
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rounds = args.rounds if args.rounds == "auto" else int(args.rounds)
    rows = []
    for n in args.sites_of:
        rows += study(f"synthetic 4x{n}", synthetic(n), n, args.seeds, args.eps, args.ks, rounds)
    if not args.no_real and args.data.is_dir():
        rows += study("physionet 1x5", one_client(args.data), 5, args.seeds, args.eps, args.ks, rounds)
    print(f"held-out accuracy of subject-level fits by batch size (B units of the smallest client's n or k n), "
          f"{args.seeds} seeds")
    print(table(rows))
    print(json.dumps({"benchmark": "subject_batch", "seeds": args.seeds, "rows": rows}))


if __name__ == "__main__":
    main()
