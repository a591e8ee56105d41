"""Cost of one private local step relative to a non-private step, same batch.

Model: a BiMap-style layer W ∈ St(22, 16) on 22 x 22 SPD inputs, X ↦ WᵀXW,
upper triangle, linear layer to 4 classes (the SPDNet shape of BNCI2014_001
without the eigen-layers), B = 64, float32, 2 threads. Compared in the same run:

* non-private: one backward pass of the mean loss, projection, SGD, Π;
* private (ours): torch.func vmap per-sample gradients, projection, clip,
  noise, SGD, Π;
* private, naive: the same with a Python loop of B backward passes (what
  vectorisation replaces).

    python benchmarks/private_step.py
"""

import json
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from skfedriem.manifolds import ManifoldParameter, Stiefel
from skfedriem.privacy import DenseGradients, PrivateManifoldOptimizer, clip_factors, noisy_mean, project_per_sample

torch.set_num_threads(2)
N_CH, D, K, B = 22, 16, 4, 64


class BiMapClassifier(nn.Module):
    def __init__(self, generator):
        super().__init__()
        St = Stiefel(N_CH, D)
        self.W = ManifoldParameter(St.random_point(generator=generator, dtype=torch.float32), St)
        rows, cols = torch.triu_indices(D, D)
        self.register_buffer("rows", rows)
        self.register_buffer("cols", cols)
        self.head = nn.Linear(D * (D + 1) // 2, K)

    def forward(self, X):
        Y = self.W.transpose(-1, -2) @ X @ self.W
        return self.head(Y[..., self.rows, self.cols])


def loss_fn(output, target):
    return F.cross_entropy(output, target, reduction="none")


def loop_private_gradient(model, batch, clip, noise_std, generator):
    X, y = batch
    params = dict(model.named_parameters())
    per_sample = {k: [] for k in params}
    for i in range(X.shape[0]):
        grads = torch.autograd.grad(loss_fn(model(X[i : i + 1]), y[i : i + 1]).sum(), list(params.values()))
        for k, g in zip(params, grads):
            per_sample[k].append(g)
    grads = DenseGradients(project_per_sample({k: torch.stack(v) for k, v in per_sample.items()}, params))
    sums = grads.weighted_sum(clip_factors(grads.norms(), clip))
    return noisy_mean(sums, params, denominator=X.shape[0], noise_std=noise_std, generator=generator)


def timed(fn, repeats=30, warmup=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    g = torch.Generator().manual_seed(0)
    A = torch.randn(B, N_CH, 2 * N_CH, generator=g)
    X = A @ A.transpose(-1, -2) / (2 * N_CH)
    y = torch.randint(K, (B,), generator=g)
    results = {}
    for label, clip, sigma in (("non_private", math.inf, 0.0), ("private_vmap", 1.0, 0.5)):
        model = BiMapClassifier(torch.Generator().manual_seed(1))
        opt = PrivateManifoldOptimizer(model, torch.optim.SGD(model.parameters(), lr=1e-3), loss_fn=loss_fn,
                                       clip=clip, noise_std=sigma, generator=g)
        results[label] = timed(lambda: opt.step((X, y), denominator=B))
    model = BiMapClassifier(torch.Generator().manual_seed(1))
    results["private_loop"] = timed(lambda: loop_private_gradient(model, (X, y), 1.0, 0.5, g), repeats=10)
    base = results["non_private"]
    print(f"BiMap St({N_CH},{D}) + linear, B={B}, float32, 2 threads; median of repeated steps")
    print(f"{'variant':14} {'ms/step':>9} {'x non-private':>14}")
    for k, v in results.items():
        print(f"{k:14} {1e3 * v:9.3f} {v / base:14.2f}")
    print(json.dumps({"benchmark": "private_step", "ms": {k: 1e3 * v for k, v in results.items()},
                      "private_over_non_private": results["private_vmap"] / base,
                      "loop_over_vmap": results["private_loop"] / results["private_vmap"]}))


if __name__ == "__main__":
    main()
