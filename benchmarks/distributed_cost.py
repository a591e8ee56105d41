"""What distributed noise costs a round, for every model: an in-process round of noise="distributed" against a
local-noise round of the same step (one step of the same batches), at K = 3, 10, 30, 100 clients, in the same run.

A distributed round adds, per client, every clipped record materialised (a closed form's rows from its factors:
Riemannian PCA's and the second moment's), their rotation, the rounding of each record and the share; and at the
server, the sum modulo 2^bits, its decoding and the step. Every arm runs its model in lockstep on clients of 40
records, B = 20, one step a round, ε = 10: SPDNet (8 channels), the tangent-space classifier (8 channels), the
Riemannian FederatedPCA (d = 16, p = 3) and EEGNet (8 channels of 64 samples, F1 = 4, D = 2, F2 = 8). The figure is
the median round's wall time after the first, timed around the server's round (a distributed run reports no
timings of its own), the fastest of 3 fits of each arm taken in turn, on an idle machine and next to a busy
process (our users' machines are shared).

With ``--dropouts d`` a third arm runs distributed noise with that dropout allowance (at most K − t − 1), every
client answering: each client draws d more Skellam components and sends them apart, and the server takes them out
of the sum (``dropouts_ratio``: its round against the plain distributed one).

    python benchmarks/distributed_cost.py [--models spdnet tangent pca eegnet] [--clients 3 10 30 100] [--rounds 20] [--repeats 3] [--dropouts 2]
"""

import argparse
import json
import statistics
import time
import warnings

import numpy as np
from _shared import busy

from skfedriem import (FederatedEEGNetClassifier, FederatedPCA, FederatedSPDNetClassifier,
                       FederatedTangentSpaceClassifier)
from skfedriem.datasets import make_federated_pca, make_spd_classification
from skfedriem.federated import FederatedTrainer

STEP = dict(eps=10.0, batch_size=20, local_steps=1, random_state=0)


def _eegnet_data(k: int):
    rng = np.random.default_rng(0)
    n, t = 40 * k, np.arange(64) / 64
    y = np.arange(n) % 2
    X = rng.standard_normal((n, 8, 64))
    X[np.arange(n), y] += 3 * np.sin(2 * np.pi * 12 * t)
    return (X * 1e-5).astype(np.float32), y, np.repeat(np.arange(k), 40)


MODELS = {
    "spdnet": (lambda noise, rounds: FederatedSPDNetClassifier(noise=noise, n_rounds=rounds, lr=0.1, **STEP),
               lambda k: make_spd_classification(k, 40, 8, random_state=0)),
    "tangent": (lambda noise, rounds: FederatedTangentSpaceClassifier(noise=noise, n_rounds=rounds, lr=0.1, **STEP),
                lambda k: make_spd_classification(k, 40, 8, random_state=0)),
    "pca": (lambda noise, rounds: FederatedPCA(n_components=3, solver="riemannian", noise=noise, n_rounds=rounds,
                                               lr=0.1, **STEP),
            lambda k: (*make_federated_pca(n_clients=k, n_samples_per_client=40, n_features=16, random_state=0),)),
    "eegnet": (lambda noise, rounds: FederatedEEGNetClassifier(noise=noise, n_rounds=rounds, lr=0.01, F1=4, D=2, F2=8,
                                                               kernel_length=16, **STEP),
               _eegnet_data),
}


def round_seconds(model: str, noise: str, data, rounds: int, dropouts: int = 0) -> float:
    """The median round's seconds after the first, timed around the server's round (a distributed run reports no
    timings in its history: they would time the clients' work)."""
    rounds_seconds: dict[int, list[float]] = {}
    serve_round = FederatedTrainer._serve_round

    def timed_round(trainer, *args, **kwargs):
        start = time.perf_counter()
        try:
            return serve_round(trainer, *args, **kwargs)
        finally:
            rounds_seconds.setdefault(id(trainer), []).append(time.perf_counter() - start)

    est = MODELS[model][0](noise, rounds)
    if dropouts:
        est.set_params(dropouts=dropouts)
    FederatedTrainer._serve_round = timed_round
    try:
        if model == "pca":
            est.fit(data[0], groups=data[1])
        else:
            est.fit(data[0], data[1], groups=data[2])
    finally:
        FederatedTrainer._serve_round = serve_round
    main_run = max(rounds_seconds.values(), key=len)  # the rounds, not a reference point's one release
    return statistics.median(main_run[1:])


def arms(model: str, data, rounds: int, repeats: int, dropouts: int = 0) -> dict[str, float]:
    """Seconds a round of each arm (local, distributed, and with a dropout allowance when ``dropouts``): fits of the
    arms taken in turn, the fastest of each kept (rounds of a few milliseconds: the least disturbed fit is the one
    that measures the round)."""
    runs = {"local": ("local", 0), "distributed": ("distributed", 0)}
    if dropouts:
        runs["allowance"] = ("distributed", dropouts)
    times: dict[str, list[float]] = {arm: [] for arm in runs}
    for _ in range(repeats):
        for arm, (noise, d) in runs.items():
            times[arm].append(round_seconds(model, noise, data, rounds, d))
    return {arm: min(seconds) for arm, seconds in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--clients", type=int, nargs="+", default=[3, 10, 30, 100])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3, help="fits of each arm, in turn (the fastest kept)")
    parser.add_argument("--dropouts", type=int, default=0, help="a third arm with this dropout allowance")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows = []
    print(f"{'model':>8} {'K':>4} | {'local s/round':>13} {'distributed':>11} | {'ratio':>5} | {'busy ratio':>10}")
    for model in args.models:
        for k in args.clients:
            data = MODELS[model][1](k)
            dropouts = max(0, min(args.dropouts, k - 1 - max(1, -(-k // 10))))  # t + d < K, t = ⌈K / 10⌉
            idle = arms(model, data, args.rounds, args.repeats, dropouts)
            with busy():
                loaded = arms(model, data, args.rounds, args.repeats, dropouts)
            local, distributed = idle["local"], idle["distributed"]
            busy_ratio = loaded["distributed"] / max(loaded["local"], 1e-9)
            ratio = distributed / max(local, 1e-9)
            row = {"model": model, "clients": k, "local_seconds": local, "distributed_seconds": distributed,
                   "ratio": ratio, "busy_ratio": busy_ratio}
            if "allowance" in idle:
                row.update(dropouts=dropouts, dropouts_ratio=idle["allowance"] / max(distributed, 1e-9),
                           busy_dropouts_ratio=loaded["allowance"] / max(loaded["distributed"], 1e-9))
            rows.append(row)
            extra = f" | d={dropouts}: {row['dropouts_ratio']:.2f}" if "dropouts_ratio" in row else ""
            print(f"{model:>8} {k:>4} | {local:>13.4f} {distributed:>11.4f} | {ratio:>5.2f} | {busy_ratio:>10.2f}"
                  f"{extra}", flush=True)
    print(json.dumps({"benchmark": "distributed_cost", "rounds": args.rounds, "rows": rows,
                      "target": {"ratio_at_most": 1.5}}))


if __name__ == "__main__":
    main()
