"""Main job (core only, until the federated engine lands): private PCA on Grassmann.

Learns the top-2 principal subspace of synthetic data as a projector on
Gr(10, 2) with private local steps (SPEC §3: per-sample tangent gradients,
clipping, tangent noise, SGD, projection), calibrated to (ε, δ) = (1, 1e-5),
and prints the optimality gap and the ε the accountant certifies. One client
only: the federated rounds (SPEC §4) come with the engine.
"""

import numpy as np
import torch
from torch import nn

from skfedriem.manifolds import Grassmann, ManifoldParameter
from skfedriem.privacy import FixedSizeSampler, PrivacyAccountant, PrivateManifoldOptimizer, calibrate_mu0

EPS, DELTA, CLIP, BATCH, STEPS, N_RECORDS, N_FEATURES, P = 1.0, 1e-5, 1.0, 200, 300, 5000, 10, 2


class Projector(nn.Module):
    def __init__(self, generator):
        super().__init__()
        Gr = Grassmann(N_FEATURES, P)
        self.P = ManifoldParameter(Gr.random_point(generator=generator), Gr)

    def forward(self, x):  # per-record loss -xᵀPx
        return -((x @ self.P) * x).sum(-1)


def main() -> None:
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    scales = np.linspace(1.0, 0.2, N_FEATURES)
    X = torch.from_numpy(rng.standard_normal((N_RECORDS, N_FEATURES)) * scales)
    X = X / X.norm(dim=1, keepdim=True).clamp_min(1.0)  # ||x|| <= 1, so per-record gradients have norm <= 1
    sampler = FixedSizeSampler(N_RECORDS, BATCH)
    mu0 = calibrate_mu0(EPS, DELTA, sampler.sample_rate, STEPS)
    sigma = 2 * CLIP / (BATCH * mu0)
    model = Projector(gen)
    opt = PrivateManifoldOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.5), loss_fn=lambda out: out,
                                   clip=CLIP, noise_std=sigma, generator=gen)
    accountant = PrivacyAccountant()
    for _ in range(STEPS):
        idx = sampler.sample(rng)
        opt.step((X[idx],), denominator=sampler.denominator)
        accountant.step(mu0=mu0, sample_rate=sampler.sample_rate)
    second_moment = X.T @ X / N_RECORDS
    top = torch.linalg.eigvalsh(second_moment)[-P:].sum()
    gap = float(top - torch.trace(model.P.detach() @ second_moment))
    print(f"private PCA on Gr({N_FEATURES},{P}): optimality gap {gap:.2e} (relative {gap / float(top):.2%})")
    print(f"privacy spent: eps = {accountant.get_epsilon(DELTA):.3f} at delta = {DELTA:g} "
          f"(noise std {sigma:.4f}, {STEPS} steps, q = {sampler.sample_rate:.3f})")


if __name__ == "__main__":
    main()
