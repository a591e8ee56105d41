"""Every private release is clipped and noised exactly as SPEC §3 says."""

import math

import numpy as np
import pytest
import torch

from skfedriem.manifolds import Stiefel
from skfedriem.privacy import (
    DenseGradients,
    clip_factors,
    noisy_mean,
    per_sample_gradients,
    private_gradient,
    project_per_sample,
    trainable_parameters,
)

from .models import StiefelNet, cross_entropy, make_data


def test_vectorised_per_sample_gradients_equal_a_loop():
    model = StiefelNet()
    X, y = make_data(12)
    grads = per_sample_gradients(model, cross_entropy, (X, y))
    for i in range(12):
        loss = cross_entropy(model(X[i : i + 1]), y[i : i + 1]).sum()
        ref = torch.autograd.grad(loss, list(model.parameters()))
        for (name, g), r in zip(grads.items(), ref):
            torch.testing.assert_close(g[i], r, msg=name)


def test_projected_gradients_are_tangent():
    model = StiefelNet()
    X, y = make_data(16)
    params = trainable_parameters(model)
    grads = project_per_sample(per_sample_gradients(model, cross_entropy, (X, y)), params)
    W = model.W.detach()
    torch.testing.assert_close(Stiefel(6, 3).proju(W, grads["W"]), grads["W"])
    # the ambient gradient had a normal component that was removed
    raw = per_sample_gradients(model, cross_entropy, (X, y))["W"]
    assert float((raw - grads["W"]).abs().max()) > 1e-3


@pytest.mark.parametrize("clip", [0.05, 0.5, 5.0])
def test_clipping_bounds_every_record_over_all_blocks(clip):
    model = StiefelNet()
    X, y = make_data(64)
    params = trainable_parameters(model)
    grads = project_per_sample(per_sample_gradients(model, cross_entropy, (X, y)), params)
    raw_norms = DenseGradients(grads).norms()
    scale = clip_factors(raw_norms, clip)
    clipped = {k: g * scale.reshape(-1, *[1] * (g.dim() - 1)) for k, g in grads.items()}
    norms = DenseGradients(clipped).norms()
    assert bool((norms <= clip * (1 + 1e-12)).all())
    over = raw_norms > clip
    torch.testing.assert_close(norms[over], torch.full_like(norms[over], clip))
    torch.testing.assert_close(norms[~over], raw_norms[~over])
    assert over.any()  # the clip is active for some records at every tested C


def test_substituting_one_record_moves_the_clipped_mean_by_at_most_2c_over_b():
    model = StiefelNet()
    params = trainable_parameters(model)
    X, y = make_data(32)
    clip, B = 0.3, 32
    worst = 0.0
    for scale in (1.0, 10.0, 1e3):
        X2, y2 = X.clone(), y.clone()
        X2[0] = -scale * X[0]
        y2[0] = (y[0] + 1) % 3
        means = []
        for data in ((X, y), (X2, y2)):
            g = DenseGradients(project_per_sample(per_sample_gradients(model, cross_entropy, data), params))
            sums = g.weighted_sum(clip_factors(g.norms(), clip))
            means.append(noisy_mean(sums, params, denominator=B, noise_std=0.0, generator=None))
        diff = math.sqrt(sum(float((means[0][k] - means[1][k]).pow(2).sum()) for k in means[0]))
        worst = max(worst, diff)
        assert diff <= 2 * clip / B + 1e-12
    assert worst > clip / B  # the bound is approached, not vacuous


def test_noise_is_tangent_with_intrinsic_energy():
    model = StiefelNet()
    params = trainable_parameters(model)
    zeros = {k: torch.zeros(p.shape, dtype=p.dtype) for k, p in params.items()}
    sigma, draws = 0.7, 3000
    gen = torch.Generator().manual_seed(5)
    St = Stiefel(6, 3)
    energy = np.empty(draws)
    for i in range(draws):
        noise = noisy_mean(zeros, params, denominator=1.0, noise_std=sigma, generator=gen)
        W_noise = noise["W"]
        assert float((W_noise - St.proju(model.W.detach(), W_noise)).norm()) < 1e-12
        energy[i] = sum(float(v.pow(2).sum()) for v in noise.values())
    d = St.dim + sum(p.numel() for k, p in params.items() if k != "W")
    # E||P xi||^2 = d sigma^2, Var = 2 d sigma^4 (chi-square with d degrees of freedom)
    se = math.sqrt(2 * d) * sigma**2 / math.sqrt(draws)
    assert abs(energy.mean() - d * sigma**2) < 4 * se
    assert abs(energy.var() - 2 * d * sigma**4) < 0.15 * 2 * d * sigma**4


def test_without_clipping_and_noise_the_per_sample_path_equals_plain_backward():
    model = StiefelNet()
    X, y = make_data(20)
    fast = private_gradient(model, cross_entropy, (X, y), clip=math.inf, noise_std=0.0, denominator=20)
    slow = private_gradient(model, cross_entropy, (X, y), clip=1e12, noise_std=0.0, denominator=20)
    for k in fast:
        torch.testing.assert_close(fast[k], slow[k])
    loss = cross_entropy(model(X), y).mean()
    ref = dict(zip(trainable_parameters(model), torch.autograd.grad(loss, list(model.parameters()))))
    torch.testing.assert_close(fast["W"], Stiefel(6, 3).proju(model.W.detach(), ref["W"]))
    torch.testing.assert_close(fast["head.weight"], ref["head.weight"])


def test_empty_poisson_batch_releases_only_noise():
    model = StiefelNet()
    X, y = make_data(5)
    out = private_gradient(model, cross_entropy, (X[:0], y[:0]), clip=1.0, noise_std=0.0, denominator=3)
    assert all(float(v.abs().max()) == 0 for v in out.values())
    gen = torch.Generator().manual_seed(0)
    out = private_gradient(model, cross_entropy, (X[:0], y[:0]), clip=1.0, noise_std=1.0, denominator=3, generator=gen)
    assert all(float(v.abs().max()) > 0 for v in out.values())
