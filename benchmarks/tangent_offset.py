"""How far the trials' tangent vectors at the identity sit from it: the norm of their mean against their spread.

Each trace-normalised covariance's tangent vector at the identity (pyRiemann's ``tangent_space``, the layout the
tangent-space classifier uses); the norm of the vectors' mean against the root-mean-square distance of the vectors
to that mean. On real EEG the mean dominates (an ill-conditioned logistic regression at the identity, the reason
``FederatedTangentSpaceClassifier`` releases the clients' mean); the synthetic federations of
``make_spd_classification`` are centred at the identity. Data: the 24 real PhysioNet subjects' training and
held-out trials (``--data``, 9 motor channels and all 64) and the synthetic federations of
``benchmarks/classifier_planning.py``.

    python benchmarks/tangent_offset.py [--cache DIR]
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
from pyriemann.geometry.tangentspace import tangent_space

from classifier_planning import split as synthetic_split
from real_planning import DEFAULT_DATA, SYNTHETIC, subjects_of


def offset(X: np.ndarray) -> dict:
    """The norm of the tangent vectors' mean at the identity, and their spread around it."""
    n = X.shape[1]
    normalised = X / (np.trace(X, axis1=1, axis2=2)[:, None, None] / n)
    vectors = tangent_space(normalised, np.eye(n))
    mean = vectors.mean(axis=0)
    return {"n_channels": n, "n_trials": len(X), "mean_norm": float(np.linalg.norm(mean)),
            "spread": float(np.sqrt(np.mean(np.sum((vectors - mean) ** 2, axis=1)))),
            "mean_norm_per_sqrt_channel": float(np.linalg.norm(mean) / np.sqrt(n))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cache", type=Path, default=None, help="keep the real covariances here between runs")
    parser.add_argument("--no-real", action="store_true", help="the synthetic federations only")
    args = parser.parse_args()
    started, rows = time.perf_counter(), {}
    for name in SYNTHETIC:
        rows[name] = offset(synthetic_split(name, 0)[0][0])
    if not args.no_real and args.data.is_dir():
        for channels in ("motor", "all"):
            rows[f"real {channels}"] = offset(subjects_of(args.data, channels, args.cache)[0])
    print(f"{'federation':<14} {'C':>3} {'trials':>6} {'|mean|':>7} {'spread':>7} {'|mean|/sqrt(C)':>15}")
    for name, r in rows.items():
        print(f"{name:<14} {r['n_channels']:>3} {r['n_trials']:>6} {r['mean_norm']:>7.2f} {r['spread']:>7.2f} "
              f"{r['mean_norm_per_sqrt_channel']:>15.2f}")
    print(json.dumps({"benchmark": "tangent_offset", "rows": rows, "seconds": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
