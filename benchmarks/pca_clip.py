"""FederatedPCA's overlap with the pooled subspace at a clip matched to the data and at one far above it.

The README's example: 4 clients x 500 records of 8 features
(``make_federated_pca(random_state=0)``: ‖x‖² ≤ 1, median 0.12), 2 components,
(ε, δ) = (1, 1e-5), each solver at ``clip=0.1`` and ``clip=1``, over several
noise draws (``random_state`` = 0 .. draws − 1). The overlap is
``subspace_overlap`` with the top-2 eigenvectors of all the records together
(1: the same subspace).

    python benchmarks/pca_clip.py [--draws 8]
"""

import argparse
import json
import time

import numpy as np

from skfedriem import FederatedPCA
from skfedriem.datasets import make_federated_pca
from skfedriem.metrics import subspace_overlap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=8, help="noise draws per cell (default: 8)")
    args = parser.parse_args()
    X, groups = make_federated_pca(n_clients=4, n_samples_per_client=500, n_features=8, random_state=0)
    pooled = np.linalg.eigh(X.T @ X)[1][:, -2:].T
    norms = np.sum(X**2, axis=1)
    rows, t0 = [], time.perf_counter()
    for solver in ("covariance", "riemannian"):
        for clip in (0.1, 1.0):
            overlaps = [subspace_overlap(FederatedPCA(n_components=2, eps=1.0, delta=1e-5, clip=clip, solver=solver,
                                                      random_state=seed).fit(X, groups=groups).components_, pooled)
                        for seed in range(args.draws)]
            rows.append({"solver": solver, "clip": clip, "min": min(overlaps), "median": float(np.median(overlaps)),
                         "max": max(overlaps)})
    print(f"overlap with the pooled top-2 subspace, eps = 1, {args.draws} noise draws "
          f"(records: max |x|^2 {norms.max():.2f}, median {np.median(norms):.2f})")
    print(f"{'solver':>11} {'clip':>5} {'min':>6} {'median':>7} {'max':>6}")
    for r in rows:
        print(f"{r['solver']:>11} {r['clip']:5g} {r['min']:6.3f} {r['median']:7.3f} {r['max']:6.3f}")
    print(json.dumps({"benchmark": "pca_clip", "draws": args.draws, "rows": rows,
                      "seconds": time.perf_counter() - t0}))


if __name__ == "__main__":
    main()
