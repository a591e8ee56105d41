"""Per-round cost of running FederatedPCA on Flower instead of in-process: simulation and a secured deployment.

Same estimator, same seed, backend="local" (baseline, same run), then
backend="flower" (Flower's simulation engine), then a real deployment on this
host (``python -m skfedriem.flower.loopback``: SuperLink and one SuperNode per
client as processes, TLS everywhere, registered SuperNode keys, each site's
ledger on). Reports the median server-side round time (θ_t out, local steps,
submissions back, aggregation) from ``history_["round_seconds"]``, the whole
fit time, and the start-up cost (fit time minus the rounds).

    python benchmarks/flower_overhead.py [--clients 5] [--rounds 20] [--deployment-rounds 5]
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from skfedriem import FederatedPCA
from skfedriem.datasets import make_federated_pca


def measure(backend: str, X, groups, args) -> dict:
    est = FederatedPCA(n_components=2, eps=2.0, n_rounds=args.rounds, local_steps=args.local_steps,
                       batch_size=args.batch_size, random_state=0, client_timings=True, backend=backend,
                       solver="riemannian")
    started = time.perf_counter()
    est.fit(X, groups=groups)
    total = time.perf_counter() - started
    rounds = np.array([h["round_seconds"] for h in est.history_])
    return {"backend": backend, "fit_s": total, "median_round_ms": 1e3 * float(np.median(rounds)),
            "first_round_ms": 1e3 * float(rounds[0]), "startup_s": total - float(rounds.sum()),
            "components": est.components_}


def measure_deployment(args) -> dict:
    from skfedriem.flower.loopback import main as loopback

    with tempfile.TemporaryDirectory(prefix="skfedriem-overhead-") as folder:
        started = time.perf_counter()
        loopback(["--estimator", "pca", "--sites", str(args.clients), "--records", str(args.records),
                  "--features", str(args.features), "--rounds", str(args.deployment_rounds), "--eps", "2.0",
                  "--site-max-epsilon", "50", "--set", f"local-steps={args.local_steps}",
                  "--set", f"batch-size={args.batch_size}", "--set", "client-timings=true", "--out", folder])
        total = time.perf_counter() - started
        history = json.loads((Path(folder) / "server" / "result.json").read_text())["history"]
    rounds = np.array([h["round_seconds"] for h in history])
    return {"backend": "deployed", "fit_s": total, "median_round_ms": 1e3 * float(np.median(rounds)),
            "first_round_ms": 1e3 * float(rounds[0]), "startup_s": total - float(rounds.sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--local-steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--deployment-rounds", type=int, default=5, help="0 skips the deployment")
    args = parser.parse_args()
    torch.set_num_threads(1)
    X, groups = make_federated_pca(n_clients=args.clients, n_samples_per_client=args.records,
                                   n_features=args.features, random_state=0)
    local = measure("local", X, groups, args)
    flower = measure("flower", X, groups, args)
    same = bool(np.allclose(local.pop("components"), flower.pop("components"), atol=1e-10))
    rows = [local, flower]
    if args.deployment_rounds:
        rows.append(measure_deployment(args))
    print(f"FederatedPCA: {args.clients} clients x {args.records} records, d={args.features}, p=2, "
          f"T={args.rounds} (deployed: {args.deployment_rounds}), tau={args.local_steps}, B={args.batch_size}, eps=2")
    print(f"{'backend':8} {'fit (s)':>8} {'median round (ms)':>18} {'first round (ms)':>17} {'start-up (s)':>13}")
    for row in rows:
        print(f"{row['backend']:8} {row['fit_s']:8.2f} {row['median_round_ms']:18.1f} {row['first_round_ms']:17.1f} "
              f"{row['startup_s']:13.2f}")
    ratio = flower["median_round_ms"] / local["median_round_ms"]
    overhead = flower["median_round_ms"] - local["median_round_ms"]
    print(f"per-round ratio flower/local: {ratio:.2f}x (+{overhead:.1f} ms per round); same model: {same}")
    summary = {"benchmark": "flower_overhead", "local": local, "flower": flower, "round_ratio": ratio,
               "round_overhead_ms": overhead, "same_model": same}
    if args.deployment_rounds:
        deployed = rows[2]
        summary.update(deployed=deployed, deployed_round_ratio=deployed["median_round_ms"] / local["median_round_ms"])
        print(f"per-round ratio deployed/local: {summary['deployed_round_ratio']:.1f}x "
              f"(+{deployed['median_round_ms'] - local['median_round_ms']:.0f} ms per round)")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
