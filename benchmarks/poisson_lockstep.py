"""Clients that sample by Poisson, in lockstep and one by one: seconds per round and peak memory, in one run.

A private SPDNet run (22 channels -> 16, 4 classes, ε = 10, B = 16 expected of each
client's 45 trials, one local epoch: 3 steps a round) on 100 and 1000 synthetic clients,
each configuration in a fresh process: Poisson sampling in lockstep (each step padded to
the clients' public width, ``skfedriem.federated.lockstep.widths``), Poisson one by one
(the only Poisson path before), and fixed-size batches in lockstep (the reference the
Poisson stack is padded against). The median seconds per round over the rounds after the
first (which builds and checks the stack), the peak memory of the run (the proportional
set size of its process, sampled every 0.2 s), and the ratios within the run; idle, and
the 100-client rows again next to a process spinning one core.

    python benchmarks/poisson_lockstep.py                    # about 15 minutes on 2 cores
    python benchmarks/poisson_lockstep.py --clients 100 --rounds 3 --busy-clients
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np
from _shared import PeakMemory, busy

PATHS = {"poisson lockstep": ("poisson", True), "poisson one by one": ("poisson", False),
         "fixed lockstep": ("fixed", True)}


def fit(n_clients: int, sampling: str, lockstep: bool, rounds: int) -> dict:
    """One run in this process: its rounds' seconds, peak memory and the Poisson stack's width."""
    import torch

    from skfedriem import FederatedSPDNetClassifier
    from skfedriem.datasets import make_spd_classification
    from skfedriem.federated.lockstep.widths import poisson_width

    torch.set_num_threads(1)
    X, y, groups = make_spd_classification(n_clients, 45, 22, n_classes=4, class_sep=0.5, scale=1e-10,
                                           random_state=0)
    clf = FederatedSPDNetClassifier(eps=10.0, dims=(16,), n_rounds=rounds, local_epochs=1, batch_size=16,
                                    sampling=sampling, random_state=0, lockstep=lockstep, client_timings=True)
    with PeakMemory() as memory:
        started = time.perf_counter()
        clf.fit(X, y, groups=groups)
        seconds = time.perf_counter() - started
    rounds_s = [h["round_seconds"] for h in clf.history_]
    sizes = tuple(int(n) for n in np.bincount(groups))
    return {"seconds": seconds, "median_round_s": float(np.median(rounds_s[1:] if len(rounds_s) > 1 else rounds_s)),
            "steps_per_round": clf.plan_.steps_per_round, "peak_pss_mb": memory.pss_kb / 1024,
            "epsilon": clf.epsilon_, "width": poisson_width(sizes, tuple(16 / m for m in sizes))}


def in_fresh_process(n_clients: int, path: str, rounds: int) -> dict:
    sampling, lockstep = PATHS[path]
    out = subprocess.run([sys.executable, __file__, "--child", str(n_clients), sampling, str(int(lockstep)),
                          str(rounds)], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--busy-clients", type=int, default=100, help="the rows repeated next to a busy core")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        n_clients, sampling, lockstep, rounds = args.child
        print(json.dumps(fit(int(n_clients), sampling, bool(int(lockstep)), int(rounds))))
        return
    rows = {}
    for machine in ("idle", "busy"):
        for n_clients in args.clients if machine == "idle" else [args.busy_clients]:
            with busy(machine == "busy"):
                rows[f"{n_clients} clients, {machine}"] = {path: in_fresh_process(n_clients, path, args.rounds)
                                                           for path in PATHS}
    print(f"SPDNet 22 -> 16, 45 trials a client, B = 16 expected, {args.rounds} rounds of "
          f"{next(iter(rows.values()))['poisson lockstep']['steps_per_round']} steps")
    print(f"{'clients':18} {'path':20} {'s/round':>8} {'peak MB':>8} {'width':>6} {'/ one by one':>13} "
          f"{'/ fixed lockstep':>17}")
    result = {"benchmark": "poisson_lockstep", "rounds": args.rounds, "rows": rows, "ratios": {}}
    for name, row in rows.items():
        alone, fixed = row["poisson one by one"]["median_round_s"], row["fixed lockstep"]["median_round_s"]
        for path, r in row.items():
            width = r["width"] if path == "poisson lockstep" else ""
            print(f"{name:18} {path:20} {r['median_round_s']:8.3f} {r['peak_pss_mb']:8.0f} {width:>6} "
                  f"{r['median_round_s'] / alone:13.2f} {r['median_round_s'] / fixed:17.2f}")
        result["ratios"][name] = {"poisson_lockstep_over_one_by_one": row["poisson lockstep"]["median_round_s"] / alone,
                                  "poisson_over_fixed_lockstep": row["poisson lockstep"]["median_round_s"] / fixed,
                                  "memory_lockstep_over_one_by_one": row["poisson lockstep"]["peak_pss_mb"]
                                  / row["poisson one by one"]["peak_pss_mb"]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
