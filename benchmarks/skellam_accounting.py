"""How much of a certified ε distributed noise really spends, by sampling rate: Rényi DP alone against the accountant.

For each (q, steps, ε) the Skellam variance is calibrated twice at δ = 1e-5 and a record's sensitivity
Δ2 = Δ1 = 2a: by Rényi DP alone (the subsampling bound of Wang, Balle & Kasiviswanathan) and by the
accountant the ledgers use (the smaller of that and the steps' dominating privacy-loss distributions,
skfedriem.privacy.accounting.skellam_pld). The real ε of each variance is read from the exact
privacy-loss distributions of the discrete mechanism at one coordinate, composed by dp-accounting
(skellam_pld.one_coordinate_pld): a Poisson-sampled sum's worst case (the record's slot empty, +a or −a)
and a fixed-size batch's (the batch without the record holds another, so one record moves it by 2a); the
larger of the two is a lower bound on the real mechanism's worst case, and the certified ε an upper
bound. The noise std ratio is the accountant's std over Rényi DP's.

    python benchmarks/skellam_accounting.py [--settings 0.1:300:4 0.02:300:4 ...] [--shift 40]
"""

from __future__ import annotations

import argparse
import json
import math
import time

from skfedriem.privacy.accounting.skellam import calibrate_skellam_variance, renyi_epsilon
from skfedriem.privacy.accounting.skellam_pld import one_coordinate_pld

DELTA = 1e-5
SETTINGS = ("1:300:4", "0.5:100:10", "0.1:300:1", "0.1:300:4", "0.1:300:10", "0.02:300:4", "0.02:2000:4")


def renyi_variance(eps: float, rate: float, steps: int, l2: float) -> float:
    """The smallest variance (to 0.1 %) Rényi DP alone certifies (ε, δ) with."""
    low, high = l2 ** 2 * 1e-6, l2 ** 2 * 1e12
    while high / low > 1.001:
        middle = math.sqrt(low * high)
        fits = renyi_epsilon([(("skellam", middle, l2, l2, rate), steps)], DELTA) <= eps
        low, high = (low, middle) if fits else (middle, high)
    return high


def real_epsilon(variance: float, shift: int, rate: float, steps: int) -> float:
    """The larger ε of the two one-coordinate worst cases (module docstring) at ``variance``."""
    return max(float(one_coordinate_pld(variance / 2, shift, rate, one_sided=one_sided).self_compose(steps)
                     .get_epsilon_for_delta(DELTA)) for one_sided in (False, True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), help="q:steps:eps")
    parser.add_argument("--shift", type=int, default=40, help="a: the record's integer radius (Δ2 = 2a)")
    args = parser.parse_args()
    started = time.perf_counter()
    l2 = 2.0 * args.shift
    rows = []
    for setting in args.settings:
        rate, steps, eps = float(setting.split(":")[0]), int(setting.split(":")[1]), float(setting.split(":")[2])
        by_renyi = renyi_variance(eps, rate, steps, l2)
        ours = calibrate_skellam_variance(eps, DELTA, rate, steps, lambda: (l2, l2))
        rows.append({"q": rate, "steps": steps, "eps": eps, "variance_renyi": by_renyi, "variance": ours,
                     "real_eps_renyi": real_epsilon(by_renyi, args.shift, rate, steps),
                     "real_eps": real_epsilon(ours, args.shift, rate, steps),
                     "std_ratio": math.sqrt(ours / by_renyi)})
    print(f"δ = {DELTA:g}, Δ2 = Δ1 = {l2:g}; real ε: the exact one-coordinate mechanism's worst cases at each variance")
    print(f"{'q':>5} {'steps':>6} {'ε':>5} {'real ε, Rényi DP alone':>23} {'real ε, accountant':>19} {'std ratio':>10}")
    for r in rows:
        print(f"{r['q']:5g} {r['steps']:6d} {r['eps']:5g} {r['real_eps_renyi']:23.3f} {r['real_eps']:19.3f} "
              f"{r['std_ratio']:10.3f}")
    print(json.dumps({"benchmark": "skellam_accounting", "delta": DELTA, "shift": args.shift, "rows": rows,
                      "seconds": time.perf_counter() - started}))


if __name__ == "__main__":
    main()
