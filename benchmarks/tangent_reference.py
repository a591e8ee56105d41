"""Where the tangent-space classifier takes its tangent space: the clients' released mean against the identity.

FederatedTangentSpaceClassifier with ``reference="mean"`` (the clients'
log-Euclidean mean, released before the rounds at REFERENCE_SHARE of ε) and
``reference=None`` (the identity), without privacy and at ε = 1, 4, 10, on a
synthetic federation of small clients (the planning grid's ``small-clients``:
20 clients × 50 trials, 40 to train, 8 channels, 2 classes, a subject effect).
Accuracy on each client's held-out trials, mean over seeds. The real-EEG rows
are ``benchmarks/physionet_real.py``'s.

    python benchmarks/tangent_reference.py [--seeds 2]
"""

import argparse
import json
import time
import warnings

import numpy as np

from skfedriem import FederatedTangentSpaceClassifier
from skfedriem.datasets import make_spd_classification

FEDERATION = dict(n_clients=20, n_matrices_per_client=50, n_channels=8, n_classes=2, heterogeneity=0.5)
TEST_SHARE = 0.2


def split(groups, seed):
    rng = np.random.default_rng(seed)
    test = np.zeros(len(groups), dtype=bool)
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        test[rng.choice(idx, int(TEST_SHARE * len(idx)), replace=False)] = True
    return test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--eps", type=float, nargs="+", default=[1.0, 4.0, 10.0])
    parser.add_argument("--rounds", default="auto", help='n_rounds of every fit (default "auto": planned)')
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows = []
    for eps in [None, *args.eps]:
        row = {"eps": eps}
        for label, reference in (("mean", "mean"), ("identity", None)):
            scores, started = [], time.perf_counter()
            for seed in range(args.seeds):
                X, y, groups = make_spd_classification(**FEDERATION, class_sep=0.3, scale=1e-10, random_state=seed)
                test = split(groups, seed)
                rounds = args.rounds if args.rounds == "auto" else int(args.rounds)
                clf = FederatedTangentSpaceClassifier(eps=eps, reference=reference, n_rounds=rounds, random_state=seed)
                scores.append(clf.fit(X[~test], y[~test], groups=groups[~test]).score(X[test], y[test]))
            row[label] = float(np.mean(scores))
            row[f"{label}_seconds"] = (time.perf_counter() - started) / args.seeds
        rows.append(row)
    print(f"small clients (20 x 40 training trials, 8 channels), {args.seeds} seeds: held-out accuracy")
    print(f"{'eps':>6} {'mean':>8} {'identity':>9}")
    for row in rows:
        print(f"{'none' if row['eps'] is None else format(row['eps'], 'g'):>6} {row['mean']:>8.3f} "
              f"{row['identity']:>9.3f}")
    print(json.dumps({"benchmark": "tangent_reference", "federation": FEDERATION, "seeds": args.seeds,
                      "rows": rows}))


if __name__ == "__main__":
    main()
