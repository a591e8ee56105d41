"""How tight a run's charge per subject is when each subject gives k records a round (``records_per_subject``).

For every (μ0, q, steps, k, sampling) of a grid: the ledger's certified ε for
groups of k (group privacy over its composition, what a fit is charged) and the
largest ε of concrete pairs of federations (subject A's k records at +C against
B's at −C, or against nothing; with fixed-size batches also every other record
at −C: :func:`skfedriem.audit.subject_pair_epsilon`, a lower bound on any valid
certificate), at δ = 1e-5. A ratio below 1 would be a privacy overstatement;
close to 1, the charge is tight. Fixed-size batches draw B = q m of m = 1000
records.

    python benchmarks/group_charge.py [--mu0 0.5 1 2] [--rates 0.02 0.2] [--steps 1 50 400] [--ks 1 2 5 10]
"""

import argparse
import itertools
import json
import math
import time

from skfedriem.audit import subject_pair_epsilon
from skfedriem.privacy import PrivacyAccountant

DELTA, RECORDS = 1e-5, 1000


def row(mu0: float, q: float, steps: int, k: int, sampling: str) -> dict:
    started = time.perf_counter()
    ledger = PrivacyAccountant()
    ledger.step(mu0=mu0, sample_rate=q, num_steps=steps, sampling=sampling, group_size=k)
    charged = ledger.get_epsilon(DELTA)
    pair = subject_pair_epsilon(mu0, q, steps, k, DELTA, sampling=sampling, n_records=RECORDS)
    return {"mu0": mu0, "q": q, "steps": steps, "k": k, "sampling": sampling, "charged": charged, "pair": pair,
            "ratio": charged / pair if math.isfinite(charged) and pair > 0 else None,
            "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mu0", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    parser.add_argument("--rates", type=float, nargs="+", default=[0.02, 0.2])
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 50, 400])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 5, 10])
    args = parser.parse_args()
    rows = [row(*setting) for setting in itertools.product(args.mu0, args.rates, args.steps, args.ks,
                                                           ("poisson", "fixed"))]
    print(f"{'mu0':>5} {'q':>5} {'steps':>5} {'k':>3} {'sampling':>8} {'charged':>9} {'pair':>9} {'ratio':>6}")
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
        print(f"{r['mu0']:>5g} {r['q']:>5g} {r['steps']:>5} {r['k']:>3} {r['sampling']:>8} {r['charged']:>9.4g} "
              f"{r['pair']:>9.4g} {ratio:>6}")
    finite = [r for r in rows if r["ratio"] is not None]
    summary = {sampling: {"settings": sum(r["sampling"] == sampling for r in rows),
                          "certified": sum(r["sampling"] == sampling for r in finite),
                          "min_ratio": min((r["ratio"] for r in finite if r["sampling"] == sampling), default=None),
                          "max_ratio": max((r["ratio"] for r in finite if r["sampling"] == sampling), default=None)}
               for sampling in ("poisson", "fixed")}
    for sampling, s in summary.items():
        print(f"{sampling}: {s['certified']} of {s['settings']} settings certified; charged / pair in "
              f"[{s['min_ratio']}, {s['max_ratio']}] (below 1 would overstate privacy)")
    print(json.dumps({"benchmark": "group_charge", "delta": DELTA, "records": RECORDS, "rows": rows,
                      "summary": summary}))


if __name__ == "__main__":
    main()
