"""Empirical privacy audit of FederatedPCA runs: lower bounds on ε beside the certified ε.

    python benchmarks/privacy_audit.py [--runs 2000] [--runs-subsampled 1000] [--jobs 2]

Honest runs at ε ∈ {1, 4, 10}, both sampling modes, full batches (q = 1,
where the audit is tight) and subsampled (q = 0.2), plus secure mode; then
the broken mechanisms an audit must catch (noise off, half the noise the
accountant charges, the old step against a server off the manifold). Every
fit draws fresh OS entropy (random_state=None). Prints a table and one JSON
line; the baseline of each row is the certified ε of the same runs.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from concurrent.futures import ProcessPoolExecutor

import torch

from skfedriem.audit import audit_federated_pca, audit_off_manifold_server
from skfedriem.audit.mutations import noise_projected_alone, noise_scaled


def _task(task: dict) -> dict:
    torch.set_num_threads(1)
    kind, label = task.pop("kind"), task.pop("label")
    if kind == "pca":
        factor = task.pop("noise_factor", None)
        if factor is None:
            result = audit_federated_pca(**task)
        else:
            with noise_scaled(factor):
                result = audit_federated_pca(**task)
    else:
        if task.pop("old_step"):
            with noise_projected_alone():
                result = audit_off_manifold_server(**task)
        else:
            result = audit_off_manifold_server(**task)
    return {"label": label, **result.to_dict()}


def tasks(runs: int, runs_subsampled: int) -> list[dict]:
    out = []
    for sampling in ("fixed", "poisson"):
        for eps in (1.0, 4.0, 10.0):
            out.append(dict(kind="pca", label=f"honest {sampling} q=1", eps=eps, sampling=sampling, n_runs=runs))
            out.append(dict(kind="pca", label=f"honest {sampling} q=0.2", eps=eps, sampling=sampling,
                            n_records=10, batch_size=2, n_rounds=50, n_runs=runs_subsampled))
    out.append(dict(kind="pca", label="honest fixed q=1, secure_mode", eps=4.0, secure_mode=True, n_runs=runs))
    for eps in (1.0, 4.0, 10.0):
        out.append(dict(kind="pca", label="BROKEN: no noise", eps=eps, noise_factor=0.0, n_runs=runs))
        out.append(dict(kind="pca", label="BROKEN: noise x0.5", eps=eps, noise_factor=0.5, n_runs=runs))
    out.append(dict(kind="server", label="off-manifold server, current step", old_step=False, n_runs=runs))
    out.append(dict(kind="server", label="BROKEN: off-manifold server, old step", old_step=True, n_runs=runs))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="runs per side at q = 1")
    parser.add_argument("--runs-subsampled", type=int, default=1000, help="runs per side at q = 0.2")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (one torch thread each)")
    args = parser.parse_args()
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(_task, tasks(args.runs, args.runs_subsampled)))
    print(f"{'runs':<40} {'q':>4} {'eps cert':>9} {'lower bd':>9} {'any-mech':>9} {'n/side':>7} "
          f"{'FPR':>6} {'FNR':>6} {'s':>6}  verdict")
    for r in rows:
        verdict = "VIOLATED" if r["violated"] else "ok"
        print(f"{r['label']:<40} {r['sample_rate']:>4.2g} {r['epsilon_certified']:>9.3f} "
              f"{r['epsilon_lower_bound']:>9.3f} {r['epsilon_lower_bound_any']:>9.3f} {r['n_runs']:>7d} "
              f"{r['false_positive_rate']:>6.3f} {r['false_negative_rate']:>6.3f} {r['seconds']:>6.0f}  {verdict}")
    honest = [r for r in rows if not r["label"].startswith("BROKEN")]
    broken = [r for r in rows if r["label"].startswith("BROKEN")]
    summary = {
        "benchmark": "privacy_audit", "machine": platform.processor() or platform.machine(),
        "seconds": time.perf_counter() - started,
        "honest_all_below_certified": all(not r["violated"] for r in honest),
        "broken_all_caught": all(r["violated"] for r in broken),
        "tightness_q1": {f"{r['sampling']} eps={r['epsilon_certified']:.3g}":
                         r["epsilon_lower_bound"] / r["epsilon_certified"]
                         for r in honest if r["sample_rate"] == 1.0 and "secure" not in r["label"]
                         and r["label"].startswith("honest")},
        "rows": rows,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
