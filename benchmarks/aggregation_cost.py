"""Per-round server aggregation time of the four rules on the paper's Stiefel settings.

St(22,16) x 3 clients (BNCI2014_001), St(60,20) x 5 (Weibo2014), St(64,16) x 26
(Cho2017), float64, 2 threads. One "round" is Sub for the k submissions, their
mean and Out; the submissions are local models near θ_t as after a round of local
steps. Baseline in the same run: ProjAvg (RetAvg/ProjAvg ratio reported; the paper
measured 9-18x and ProjAvg 0.50 / 0.67 / 1.61 ms).

    python benchmarks/aggregation_cost.py
"""

import json
import time

import numpy as np
import torch

from skfedriem.federated import AGGREGATIONS
from skfedriem.manifolds import Stiefel

torch.set_num_threads(2)
SETTINGS = [(22, 16, 3), (60, 20, 5), (64, 16, 26)]


def main() -> None:
    rows = []
    for n, p, k in SETTINGS:
        St = Stiefel(n, p)
        g = torch.Generator().manual_seed(0)
        theta = St.random_point(generator=g)
        local = St.retr(theta.expand(k, n, p), 0.05 * St.random_tangent(theta.expand(k, n, p), generator=g))
        for name in AGGREGATIONS.names():
            rule = AGGREGATIONS.get(name)
            repeats = 50 if name != "kfavg" else 10
            for _ in range(3):
                rule(St, theta, local)
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                rule(St, theta, local)
                times.append(time.perf_counter() - t0)
            q1, med, q3 = np.percentile(times, [25, 50, 75]) * 1e3
            rows.append(dict(manifold=f"St({n},{p})", clients=k, rule=name, median_ms=med, iqr_ms=q3 - q1))
    print(f"{'setting':16} {'rule':8} {'median ms':>10} {'IQR ms':>8} {'x projavg':>10}")
    ratios = {}
    for r in rows:
        base = next(b for b in rows if b["manifold"] == r["manifold"] and b["rule"] == "projavg")["median_ms"]
        r["ratio_vs_projavg"] = r["median_ms"] / base
        if r["rule"] == "retavg":
            ratios[f"{r['manifold']}x{r['clients']}"] = r["ratio_vs_projavg"]
        print(f"{r['manifold'] + ' x' + str(r['clients']):16} {r['rule']:8} {r['median_ms']:10.3f} "
              f"{r['iqr_ms']:8.3f} {r['ratio_vs_projavg']:10.1f}")
    projavg_cho = next(r for r in rows if r["manifold"] == "St(64,16)" and r["rule"] == "projavg")["median_ms"]
    print(json.dumps({"benchmark": "aggregation_cost", "retavg_over_projavg": ratios,
                      "projavg_ms_st64_16_x26": projavg_cho, "goal_ms": 0.2, "rows": rows}))


if __name__ == "__main__":
    main()
