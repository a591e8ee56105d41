"""Noise PriRFed needs relative to ours at equal (ε, δ) (docs: the method, privacy accounting; paper Fig. 4b: 5 to 6x).

σ ∝ 1/μ0 in both, so σ_PriRFed / σ_ours = μ0_ours / μ0_PriRFed. Setting:
δ = 1e-5, q = 0.1, τ = 10 local steps per round, T = 200 rounds (2000 steps).
Ours: the whole-run composition (fixed-size batches, or Poisson with the
replace-one accountant). PriRFed: per-round add/remove PLD at δ/(2T), then
advanced composition (skfedriem.baselines.prirfed).

    python benchmarks/noise_ratio.py
"""

import json
import time

from skfedriem.baselines import prirfed_calibrate_mu0
from skfedriem.privacy import calibrate_mu0

DELTA, Q, TAU, T = 1e-5, 0.1, 10, 200


def main() -> None:
    rows = []
    t0 = time.perf_counter()
    for eps in (0.5, 1.0, 2.0, 5.0, 10.0):
        prirfed = prirfed_calibrate_mu0(eps, DELTA, Q, TAU, T)
        fixed = calibrate_mu0(eps, DELTA, Q, T * TAU, "fixed")
        poisson = calibrate_mu0(eps, DELTA, Q, T * TAU, "poisson")
        rows.append({"eps": eps, "prirfed_noise_multiplier": 1 / prirfed, "ours_fixed": 1 / fixed,
                     "ours_poisson": 1 / poisson, "ratio_fixed": fixed / prirfed, "ratio_poisson": poisson / prirfed})
    print(f"σ B / (2C) at δ={DELTA:g}, q={Q}, τ={TAU}, T={T}")
    print(f"{'ε':>5} {'PriRFed':>9} {'ours fixed':>11} {'ours poisson':>13} {'ratio fixed':>12} {'ratio poisson':>14}")
    for r in rows:
        print(f"{r['eps']:5g} {r['prirfed_noise_multiplier']:9.2f} {r['ours_fixed']:11.2f} {r['ours_poisson']:13.2f} "
              f"{r['ratio_fixed']:12.2f} {r['ratio_poisson']:14.2f}")
    print(json.dumps({"benchmark": "noise_ratio", "rows": rows, "seconds": time.perf_counter() - t0}))


if __name__ == "__main__":
    main()
