"""FederatedPCA's solvers against each other and against pooled central data, across ε and dimension.

* ``paper``: the paper's private projected SGD at the paper's settings, T = 200, τ = 5,
  B = 100, η = 0.2, C = 1 (``--rounds``, ``--local-steps``, ``--batch-size``);
* ``planned``: the same solver with the schedule :func:`skfedriem.decomposition.planning.plan_pca`
  chooses from public quantities (full batches, τ = 1, η T ∝ the signal-to-noise);
* ``covariance``: each client releases its clipped second moment once with Gaussian noise
  (Analyze Gauss per client) and the server takes the top eigenvectors of their mean;
* ``central``: the same one-shot release on all records pooled at one site (what a
  trusted curator could do; not federated), the reference.

Every run is (ε, δ = 1e-5)-DP at record level, certified by the same accountant; the gap is
the PCA optimality gap on all the records (0 = the top-k subspace). The iterative arms run
on the Stiefel manifold (``--manifold``): the same objective as the Grassmann projector at
O(d k²) per step instead of O(d³), which is what makes d = 1024 affordable. Data:
scikit-learn's digits (1797 × 64, rows scaled to norm 1, 3 clients) and synthetic
federations (``make_federated_pca``, rows of norm <= 1) sweeping d at k = 5 and k = 20, 3 and
10 clients. The baseline of every row is in the same run: the ratio of the better iterative
arm to the covariance release.

    python benchmarks/pca_solvers.py                      # 2 seeds, d <= 256, 3 clients (~10 min)
    python benchmarks/pca_solvers.py --seeds 5 --dims 16 64 256 1024 --clients 3 10   # the full study
    python benchmarks/pca_solvers.py --dims 64 --components 5 --sweep-epsilons 1 4 10 --planner-grid
                                                         # the grid behind the planner's constants
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

from skfedriem import FederatedPCA
from skfedriem.datasets import make_federated_pca
from skfedriem.metrics import pca_optimality_gap
from skfedriem.decomposition.planning import plan_pca

SOLVERS = ("paper", "planned", "covariance", "central")


def digits() -> np.ndarray:
    from sklearn.datasets import load_digits

    X = load_digits().data.astype(np.float64)
    return X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)


def gap(solver: str, X: np.ndarray, groups: np.ndarray, k: int, eps: float, seed: int, args) -> float:
    settings = {"paper": dict(solver="riemannian", n_rounds=args.rounds, local_steps=args.local_steps,
                              batch_size=args.batch_size, lr=0.2, manifold=args.manifold),
                "planned": dict(solver="riemannian", manifold=args.manifold)}.get(solver, dict(solver="covariance"))
    pca = FederatedPCA(k, eps=eps, delta=1e-5, clip=1.0, random_state=seed, **settings)
    pca.fit(X, groups=np.zeros(len(X), dtype=int) if solver == "central" else groups)
    return float(pca_optimality_gap(pca.components_, X))


def study(name: str, X: np.ndarray, groups: np.ndarray, k: int, epsilons, args) -> list[dict]:
    rows = []
    for eps in epsilons:
        t0 = time.perf_counter()
        gaps = {s: [gap(s, X, groups, k, eps, seed, args) for seed in range(args.seeds)] for s in SOLVERS}
        med = {s: float(np.median(g)) for s, g in gaps.items()}
        rows.append({"data": name, "d": X.shape[1], "k": k, "clients": len(np.unique(groups)),
                     "records_per_client": int(len(X) // len(np.unique(groups))), "eps": eps,
                     **{f"gap_{s}": med[s] for s in SOLVERS},
                     **{f"iqr_{s}": float(np.subtract(*np.percentile(g, [75, 25]))) for s, g in gaps.items()},
                     "riemannian_over_covariance": min(med["paper"], med["planned"]) / med["covariance"],
                     "planned_over_paper": med["planned"] / med["paper"],
                     "seconds": time.perf_counter() - t0})
        r = rows[-1]
        print(f"{name:10} d={r['d']:5} k={k:3} n={r['clients']:3} eps={eps:5g}  paper {med['paper']:.4f}  "
              f"planned {med['planned']:.4f}  covariance {med['covariance']:.4f}  central {med['central']:.4f}  "
              f"ratio {r['riemannian_over_covariance']:6.2f}  [{r['seconds']:.0f} s]", flush=True)
    return rows


def crossovers(rows: list[dict]) -> list[dict]:
    """Per (k, clients, ε) of the synthetic sweep: the smallest d where an iterative arm wins."""
    out = []
    synthetic = [r for r in rows if r["data"] == "synthetic"]
    for key in sorted({(r["k"], r["clients"], r["eps"]) for r in synthetic}):
        sweep = sorted((r for r in synthetic if (r["k"], r["clients"], r["eps"]) == key), key=lambda r: r["d"])
        wins = [r["d"] for r in sweep if r["riemannian_over_covariance"] < 1]
        out.append({"k": key[0], "clients": key[1], "eps": key[2], "dims": [r["d"] for r in sweep],
                    "crossover_d": wins[0] if wins else None})
    return out


def figure(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    real = [r for r in rows if r["data"] == "digits"]
    for solver, marker in zip(SOLVERS, "osv^"):
        left.plot([r["eps"] for r in real], [r[f"gap_{solver}"] for r in real], marker=marker, label=solver)
    left.set(xscale="log", yscale="log", xlabel="ε", ylabel="optimality gap", title="digits, 3 clients, k = 5")
    left.legend()
    synthetic = [r for r in rows if r["data"] == "synthetic"]
    for key in sorted({(r["k"], r["clients"], r["eps"]) for r in synthetic}):
        sweep = sorted((r for r in synthetic if (r["k"], r["clients"], r["eps"]) == key), key=lambda r: r["d"])
        right.plot([r["d"] for r in sweep], [r["riemannian_over_covariance"] for r in sweep], marker="o",
                   label=f"k={key[0]}, {key[1]} clients, ε={key[2]:g}")
    right.axhline(1.0, color="grey", lw=0.8)
    right.set(xscale="log", yscale="log", xlabel="d", ylabel="best iterative gap / covariance gap",
              title="synthetic: below 1 the iterative solver wins")
    right.legend(fontsize=7)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"figure: {path}")


def planner_grid(name: str, X: np.ndarray, groups: np.ndarray, k: int, epsilons, args) -> list[dict]:
    """The grid the planner's constants come from: full batches, τ = 1, every (T, η), against the plan."""
    rows = []
    for eps in epsilons:
        def median_gap(**schedule) -> float:
            fits = [FederatedPCA(k, eps=eps, delta=1e-5, random_state=seed, solver="riemannian",
                                 manifold=args.manifold, **schedule).fit(X, groups=groups) for seed in range(args.seeds)]
            return float(np.median([pca_optimality_gap(fit.components_, X) for fit in fits]))

        grid = {(T, lr): median_gap(n_rounds=T, lr=lr, local_steps=1)
                for T in args.grid_rounds for lr in args.grid_lrs}
        (T, lr), best = min(grid.items(), key=lambda item: item[1])
        plan = plan_pca(eps=eps, delta=1e-5, client_sizes=np.bincount(groups).tolist(), n_features=X.shape[1],
                        n_components=k, manifold=args.manifold, solver="riemannian")
        rows.append({"data": name, "d": X.shape[1], "k": k, "eps": eps, "best_rounds": T, "best_lr": lr,
                     "best_horizon": T * lr, "best_gap": best, "planned_rounds": plan.n_rounds,
                     "planned_horizon": plan.horizon, "planned_gap": median_gap(),
                     "grid": {f"{T},{lr}": g for (T, lr), g in grid.items()}})
        r = rows[-1]
        print(f"grid {name:10} d={r['d']:4} eps={eps:5g}  best T={T} eta={lr} (H={T * lr:g}) gap {best:.4f}  "
              f"planned T={plan.n_rounds} (H={plan.horizon:.1f}) gap {r['planned_gap']:.4f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0, 10.0])
    parser.add_argument("--sweep-epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--dims", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--components", type=int, nargs="+", default=[5, 20])
    parser.add_argument("--clients", type=int, nargs="+", default=[3])
    parser.add_argument("--records", type=int, default=600, help="records per synthetic client")
    parser.add_argument("--rounds", type=int, default=200, help="T of the paper's settings")
    parser.add_argument("--local-steps", type=int, default=5, help="τ of the paper's settings")
    parser.add_argument("--batch-size", type=int, default=100, help="B of the paper's settings")
    parser.add_argument("--manifold", default="stiefel", choices=["stiefel", "grassmann"])
    parser.add_argument("--planner-grid", action="store_true",
                        help="also run the (T, η) grid behind the planner's constants (digits and d = 64)")
    parser.add_argument("--grid-rounds", type=int, nargs="+", default=[25, 50, 100, 200, 400])
    parser.add_argument("--grid-lrs", type=float, nargs="+", default=[0.5, 1.0, 2.0, 5.0])
    parser.add_argument("--figure", default="benchmarks/results/pca_solvers.png")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # seeded runs warn that their noise is replayable: this is a study

    X = digits()
    groups = np.random.default_rng(0).permutation(np.arange(len(X)) % 3)
    rows = study("digits", X, groups, 5, args.epsilons, args)
    for k in args.components:
        for n in args.clients:
            for d in args.dims:
                if k >= d:
                    continue
                Xs, gs = make_federated_pca(n, args.records, d, n_components=k, random_state=0)
                rows += study("synthetic", Xs, gs, k, args.sweep_epsilons, args)
    cross = crossovers(rows)
    for c in cross:
        where = f"d = {c['crossover_d']}" if c["crossover_d"] else f"none in d ∈ {c['dims']}"
        print(f"crossover k={c['k']} clients={c['clients']} eps={c['eps']:g}: the iterative solver wins from {where}")
    try:
        figure(rows, args.figure)
    except ImportError:
        print("matplotlib not installed: no figure (pip install skfedriem[bench])")
    grid = []
    if args.planner_grid:
        grid = planner_grid("digits", X, groups, 5, args.sweep_epsilons, args)
        Xs, gs = make_federated_pca(3, args.records, 64, n_components=5, random_state=0)
        grid += planner_grid("synthetic", Xs, gs, 5, args.sweep_epsilons, args)
    print(json.dumps({"benchmark": "pca_solvers", "args": vars(args), "rows": rows, "crossovers": cross,
                      "planner_grid": grid}))


if __name__ == "__main__":
    main()
