"""Privacy cost of federated PCA (docs: the method, reference results): private minus non-private optimality gap.

Paper setting: n = 50 clients, k = 10 per round, m = 5000 records each, τ = 10
local steps of B = 500, T = 200 rounds, ε = 1, δ = 1e-5, SGD η = 0.2 (ProjAvg
unless stated). Clipping is inactive: records have norm <= 1 (make_federated_pca),
so every per-record tangent gradient has norm <= ||x||² / √2 <= 1 = C.
The baseline is the same run, same seed, without noise.
Sweeps: p ∈ {1, 2, 4, 8} at d = 40; D at fixed d_M = 144 ((d, p) = (26, 8), (40, 4));
k ∈ {1, 5, 10, 25, 50}; aggregation ∈ {projavg, rlavg, retavg}.

    python benchmarks/pca_privacy_cost.py                 # full study (long)
    python benchmarks/pca_privacy_cost.py --rounds 20 --seeds 2 --clients 10 --records 1000   # quick look

A configuration shared by several sweeps (d=40, p=4, k=10, ProjAvg) is run once.
"""

import argparse
import json
import time

import numpy as np
import torch

from skfedriem import FederatedPCA
from skfedriem.datasets import make_federated_pca
from skfedriem.metrics import pca_optimality_gap


def cost(d, p, k, aggregation, seed, args):
    X, groups = make_federated_pca(args.clients, args.records, d, n_components=p, random_state=seed)
    gaps = {}
    t0 = time.perf_counter()
    for eps in (None, args.eps):
        pca = FederatedPCA(p, eps=eps, delta=1e-5, clip=1.0, n_rounds=args.rounds, local_steps=10,
                           batch_size=min(500, args.records), clients_per_round=k, aggregation=aggregation,
                           lr=0.2, random_state=seed, solver="riemannian").fit(X, groups=groups)
        gaps[eps] = pca_optimality_gap(pca.components_, X)
    return gaps[args.eps] - gaps[None], gaps[None], (time.perf_counter() - t0) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--eps", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--figure", default="benchmarks/results/pca_privacy_cost.png")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    ks = [k for k in (1, 5, 10, 25, 50) if k <= args.clients]
    k0 = min(10, args.clients)
    sweeps = {
        "p (d=40)": [(40, p, k0, "projavg") for p in (1, 2, 4, 8)],
        "D (d_M=144)": [(26, 8, k0, "projavg"), (40, 4, k0, "projavg")],
        "k (d=40, p=4)": [(40, 4, k, "projavg") for k in ks],
        "rule (d=40, p=4)": [(40, 4, k0, r) for r in ("projavg", "rlavg", "retavg")],
    }
    rows, done = [], {}
    for sweep, configs in sweeps.items():
        for d, p, k, rule in configs:
            if (d, p, k, rule) not in done:
                done[d, p, k, rule] = [cost(d, p, k, rule, seed, args) for seed in range(args.seeds)]
            runs = done[d, p, k, rule]
            c = np.array([r[0] for r in runs])
            q1, med, q3 = np.percentile(c, [25, 50, 75])
            rows.append(dict(sweep=sweep, d=d, p=p, d_M=p * (d - p), D=d * (d + 1) // 2, k=k, rule=rule,
                             cost_median=med, cost_iqr=q3 - q1, nonprivate_gap=float(np.median([r[1] for r in runs])),
                             seconds_per_run=float(np.mean([r[2] for r in runs]))))
            r = rows[-1]
            print(f"{sweep:18} d={d:3} p={p} d_M={r['d_M']:4} D={r['D']:4} k={k:3} {rule:8} "
                  f"cost {med:.3e} (IQR {q3 - q1:.1e})  non-private gap {r['nonprivate_gap']:.1e}  "
                  f"{r['seconds_per_run']:.1f} s/run", flush=True)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from pathlib import Path

        fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
        for ax, (sweep, key) in zip(axes, [("p (d=40)", "d_M"), ("D (d_M=144)", "D"), ("k (d=40, p=4)", "k")]):
            sel = [r for r in rows if r["sweep"] == sweep]
            ax.errorbar([r[key] for r in sel], [r["cost_median"] for r in sel],
                        yerr=[r["cost_iqr"] / 2 for r in sel], marker="o")
            ax.set_xlabel(key)
            ax.set_ylabel("privacy cost (gap)")
            ax.set_title(f"vs {key}")
        fig.tight_layout()
        Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.figure, dpi=120)
        print(f"figure: {args.figure}")
    except ImportError:
        print("matplotlib not installed: no figure (pip install skfedriem[bench])")
    print(json.dumps({"benchmark": "pca_privacy_cost", "args": vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
