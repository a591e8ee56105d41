"""Per-round cost of running FederatedPCA on Flower's simulation engine instead of in-process.

Same estimator, same seed, backend="local" (baseline, same run) then
backend="flower". Reports the median server-side round time (θ_t out, local
steps, submissions back, aggregation) from ``history_["round_seconds"]``, the
whole fit time, and the start-up cost (fit time minus the rounds: Ray start,
virtual SuperNodes, the ``query`` exchange, shutdown).

    python benchmarks/flower_overhead.py [--clients 5] [--rounds 20]
"""

import argparse
import json
import time

import numpy as np
import torch

from skfedriem import FederatedPCA
from skfedriem.datasets import make_federated_pca


def measure(backend: str, X, groups, args) -> dict:
    est = FederatedPCA(n_components=2, eps=2.0, n_rounds=args.rounds, local_steps=args.local_steps,
                       batch_size=args.batch_size, random_state=0, client_timings=True, backend=backend)
    started = time.perf_counter()
    est.fit(X, groups=groups)
    total = time.perf_counter() - started
    rounds = np.array([h["round_seconds"] for h in est.history_])
    return {"backend": backend, "fit_s": total, "median_round_ms": 1e3 * float(np.median(rounds)),
            "first_round_ms": 1e3 * float(rounds[0]), "startup_s": total - float(rounds.sum()),
            "components": est.components_}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--local-steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    X, groups = make_federated_pca(n_clients=args.clients, n_samples_per_client=args.records,
                                   n_features=args.features, random_state=0)
    local = measure("local", X, groups, args)
    flower = measure("flower", X, groups, args)
    same = bool(np.allclose(local.pop("components"), flower.pop("components"), atol=1e-10))
    print(f"FederatedPCA: {args.clients} clients x {args.records} records, d={args.features}, p=2, "
          f"T={args.rounds}, tau={args.local_steps}, B={args.batch_size}, eps=2")
    print(f"{'backend':8} {'fit (s)':>8} {'median round (ms)':>18} {'first round (ms)':>17} {'start-up (s)':>13}")
    for row in (local, flower):
        print(f"{row['backend']:8} {row['fit_s']:8.2f} {row['median_round_ms']:18.1f} {row['first_round_ms']:17.1f} "
              f"{row['startup_s']:13.2f}")
    ratio = flower["median_round_ms"] / local["median_round_ms"]
    overhead = flower["median_round_ms"] - local["median_round_ms"]
    print(f"per-round ratio flower/local: {ratio:.2f}x (+{overhead:.1f} ms per round); same model: {same}")
    print(json.dumps({"benchmark": "flower_overhead", "local": local, "flower": flower,
                      "round_ratio": ratio, "round_overhead_ms": overhead, "same_model": same}))


if __name__ == "__main__":
    main()
