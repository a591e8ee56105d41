"""What distributed noise costs a round: an in-process round of noise="distributed" against a local-noise round of the
same step (one step of the same batches), at K = 3, 10, 30, 100 clients, in the same run.

A distributed round adds, per client, the rows of its clipped records (flattened), their rotation, the rounding of
each record and the share; and at the server, the sum modulo 2^bits, its decoding and the step. Both arms run
SPDNet (8 channels, 2 classes) in lockstep on clients of 40 trials, B = 20, one step a round, ε = 10; the figure is
a round's wall time: the difference between fits of 2R and R rounds, over R (a distributed run reports no
timings), on an idle machine and next to a busy process (our users' machines are shared).

    python benchmarks/distributed_cost.py [--clients 3 10 30 100] [--rounds 6]
"""

import argparse
import json
import time
import warnings


from _shared import busy

from skfedriem import FederatedSPDNetClassifier
from skfedriem.datasets import make_spd_classification


def _fit_seconds(noise: str, X, y, groups, rounds: int) -> float:
    clf = FederatedSPDNetClassifier(eps=10.0, noise=noise, batch_size=20, local_steps=1, n_rounds=rounds, lr=0.1,
                                    random_state=0)
    start = time.perf_counter()
    clf.fit(X, y, groups=groups)
    return time.perf_counter() - start


def round_seconds(noise: str, X, y, groups, rounds: int) -> float:
    """A round's seconds: (a fit of 2R rounds − a fit of R) / R, what planning and the first step cost cancelled."""
    return max(_fit_seconds(noise, X, y, groups, 2 * rounds) - _fit_seconds(noise, X, y, groups, rounds), 0.0) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, nargs="+", default=[3, 10, 30, 100])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows = []
    print(f"{'K':>4} | {'local s/round':>13} {'distributed':>11} | {'ratio':>5} | {'busy ratio':>10}")
    for k in args.clients:
        X, y, groups = make_spd_classification(k, 40, 8, random_state=0)
        local = round_seconds("local", X, y, groups, args.rounds)
        distributed = round_seconds("distributed", X, y, groups, args.rounds)
        with busy():
            busy_ratio = (round_seconds("distributed", X, y, groups, args.rounds)
                          / round_seconds("local", X, y, groups, args.rounds))
        rows.append({"clients": k, "local_seconds": local, "distributed_seconds": distributed,
                     "ratio": distributed / local, "busy_ratio": busy_ratio})
        print(f"{k:>4} | {local:>13.4f} {distributed:>11.4f} | {distributed / local:>5.2f} | {busy_ratio:>10.2f}",
              flush=True)
    print(json.dumps({"benchmark": "distributed_cost", "rounds": args.rounds, "rows": rows,
                      "target": {"ratio_at_most": 1.5}}))


if __name__ == "__main__":
    main()
