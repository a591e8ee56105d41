"""What secure_mode costs: the OS's secure generator and four-draw Gaussians against the default PCG64.

    python benchmarks/secure_mode.py [--repeats 3]

Times, in one run and with one torch thread: a noise draw of SPDNet's and
EEGNet's parameter sizes, and whole fits of FederatedPCA and
FederatedSPDNetClassifier with ``secure_mode`` off and on, alternating, first
on an otherwise idle machine, then beside a busy process (one core spinning).
Prints a table and one JSON line of ratios secure / default.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings

import numpy as np
import torch
from _shared import busy

from skfedriem import FederatedPCA, FederatedSPDNetClassifier
from skfedriem.datasets import make_federated_pca, make_spd_classification
from skfedriem.models import EEGNet, SPDNet
from skfedriem.privacy import SecureRandomness, SeededRandomness


def _shapes(module: torch.nn.Module) -> list[tuple[int, ...]]:
    return [tuple(p.shape) for p in module.parameters()]


def draw_time(source, shapes, repeats=2000) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        for shape in shapes:
            source.standard_normal(shape, torch.float32)
    return (time.perf_counter() - started) / repeats


def fits() -> dict[str, callable]:
    X, groups = make_federated_pca(n_clients=10, n_samples_per_client=1000, n_features=20, random_state=0)
    Xs, y, g = make_spd_classification(n_clients=3, n_matrices_per_client=300, n_channels=22, n_classes=4,
                                       scale=1e-10, random_state=0)
    return {
        "FederatedPCA d=20, 10 clients, T=50, tau=5": lambda secure: FederatedPCA(
            n_components=4, eps=2.0, n_rounds=50, local_steps=5, batch_size=100, secure_mode=secure,
            solver="riemannian").fit(
            X, groups=groups),
        "SPDNet 22->16, 3 x 300 trials, T=20": lambda secure: FederatedSPDNetClassifier(
            eps=10.0, n_rounds=20, batch_size=64, secure_mode=secure).fit(Xs, y, groups=g),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    rows = []
    for load in (False, True):
        with busy(load):
            shapes_of = {"SPDNet 22->16, 4 classes": _shapes(SPDNet(22, 4, (16,))),
                         "EEGNet 64 ch x 385, 4 classes": _shapes(EEGNet(64, 385, 4))}
            for name, shapes in shapes_of.items():
                default = draw_time(SeededRandomness(np.random.SeedSequence()), shapes)
                secure = draw_time(SecureRandomness(), shapes)
                rows.append({"what": f"noise draw, {name}", "busy": load, "default_s": default, "secure_s": secure})
            for name, fit in fits().items():
                times = {False: [], True: []}
                for _ in range(args.repeats):
                    for secure in (False, True):
                        started = time.perf_counter()
                        fit(secure)
                        times[secure].append(time.perf_counter() - started)
                rows.append({"what": name, "busy": load, "default_s": float(np.median(times[False])),
                             "secure_s": float(np.median(times[True]))})
    print(f"{'what':<46} {'machine':>8} {'default':>11} {'secure':>11} {'ratio':>6}")
    for r in rows:
        r["ratio"] = r["secure_s"] / r["default_s"]
        unit, scale = ("us", 1e6) if r["what"].startswith("noise") else ("s", 1.0)
        print(f"{r['what']:<46} {'busy' if r['busy'] else 'idle':>8} {r['default_s'] * scale:>9.2f}{unit:>2} "
              f"{r['secure_s'] * scale:>9.2f}{unit:>2} {r['ratio']:>6.2f}")
    print(json.dumps({"benchmark": "secure_mode", "machine": platform.processor() or platform.machine(),
                      "rows": rows}))


if __name__ == "__main__":
    main()
