"""Every private release is clipped and noised exactly as the method says, wherever θ is."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import norm

from skfedriem.manifolds import Grassmann, Stiefel
from skfedriem.models import PCAProjector
from skfedriem.privacy import DenseGradients, LoneClient, SeededRandomness, per_sample_gradients, private_gradient
from skfedriem.privacy.per_record.gradients import project_per_sample
from skfedriem.privacy.mechanisms.mechanism import clip_factors, noisy_release
from skfedriem.privacy.per_record.per_sample import trainable_parameters

from .models import StiefelNet, cross_entropy, make_data


def seeded(seed=0):
    return SeededRandomness(np.random.SeedSequence(seed))


def lone_release(module, sums, *, denominator, noise_std, randomness):
    """The step's release P_θ(Σ / B + ξ) of one client on ``module`` (sums and release without a client axis)."""
    released = noisy_release(LoneClient(module), {name: total.unsqueeze(0) for name, total in sums.items()},
                             denominator=denominator, noise_std=noise_std, randomness=[randomness])
    return {name: g[0] for name, g in released.items()}


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
            means.append(lone_release(model, sums, denominator=B, noise_std=0.0, randomness=None))
        diff = math.sqrt(sum(float((means[0][k] - means[1][k]).pow(2).sum()) for k in means[0]))
        worst = max(worst, diff)
        assert diff <= 2 * clip / B + 1e-12
    assert worst > clip / B  # the bound is approached, not vacuous


def test_noise_is_tangent_with_intrinsic_energy():
    model = StiefelNet()
    params = trainable_parameters(model)
    zeros = {k: torch.zeros(p.shape, dtype=p.dtype) for k, p in params.items()}
    sigma, draws = 0.7, 3000
    randomness = seeded(5)
    St = Stiefel(6, 3)
    energy = np.empty(draws)
    for i in range(draws):
        noise = lone_release(model, zeros, denominator=1.0, noise_std=sigma, randomness=randomness)
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
    out = private_gradient(model, cross_entropy, (X[:0], y[:0]), clip=1.0, noise_std=1.0, denominator=3,
                           randomness=seeded())
    assert all(float(v.abs().max()) > 0 for v in out.values())


def test_on_the_manifold_noise_before_projection_is_the_papers_step():
    """P_θ(ḡ + ξ) = ḡ + P_θ(ξ) at θ on the manifold, draw for draw: utility is unchanged."""
    model = StiefelNet()
    params = trainable_parameters(model)
    X, y = make_data(16)
    g = DenseGradients(project_per_sample(per_sample_gradients(model, cross_entropy, (X, y)), params))
    sums = g.weighted_sum(clip_factors(g.norms(), 0.5))
    ours = lone_release(model, sums, denominator=16, noise_std=0.8, randomness=seeded(3))
    xi = seeded(3)
    for name, p in params.items():  # the same draws, in the same order
        noise = 0.8 * xi.standard_normal(tuple(p.shape), p.dtype)
        paper = sums[name] / 16 + p.manifold.proju(p.detach(), noise) if name == "W" else sums[name] / 16 + noise
        torch.testing.assert_close(ours[name], paper)


def _tangent_projected_noise(module, sums, *, denominator, noise_std, randomness):
    """The old release ḡ + P_θ(ξ): private on the manifold only (kept to show the test below catches it)."""
    params = trainable_parameters(module)
    out = {}
    for name, total in sums.items():
        p = params[name].detach()
        noise = noise_std * randomness.standard_normal(tuple(p.shape), p.dtype)
        out[name] = total / denominator + params[name].manifold.proju(p, noise)
    return out


def _off_manifold_attack_power(release, draws=3000):
    """A server sends θ off St(20, 1) (‖θ‖² = 0.99) and tells the canary (D) from a zero record (D').

    The canary's tangent gradient at that θ points along θ itself, where P_θ
    keeps only 1 % of any vector: with the noise projected after it is
    added, signal and noise shrink together; with the noise projected alone,
    the clipped signal stands out. Returns (power at 5 % false positives, the
    bound for the μ0 the ledger charges).
    """
    module = PCAProjector(20, 1, "stiefel")
    with torch.no_grad():
        module.weight.zero_()
        module.weight[0, 0] = math.sqrt(0.99)
    params = trainable_parameters(module)
    clip, batch, mu0 = 1.0, 4, 0.5
    sigma = 2 * clip / (batch * mu0)
    canary = torch.zeros(batch, 20, dtype=torch.float64)
    canary[0, 0] = 100.0  # gradient norm 0.0199 · 100² ≫ C: clipped to C, along θ
    randomness = seeded(11)
    scores = []
    for records in (canary, torch.zeros_like(canary)):
        g = module.per_sample_tangent_gradients(records)
        sums = g.weighted_sum(clip_factors(g.norms(), clip))
        scores.append(np.array([-float(release(module, sums, denominator=batch, noise_std=sigma,
                                               randomness=randomness)["weight"][0, 0]) for _ in range(draws)]))
    threshold = np.quantile(scores[1], 0.95)
    return float((scores[0] > threshold).mean()), float(norm.cdf(mu0 - norm.ppf(0.95)))


def test_a_server_sending_theta_off_the_manifold_does_not_beat_the_noise():
    power, bound = _off_manifold_attack_power(lone_release)
    assert bound == pytest.approx(0.126, abs=1e-3)  # μ0 = 0.5-GDP allows power 0.126 at 5 % false positives
    assert power <= bound + 3 * math.sqrt(bound * (1 - bound) / 3000) + 0.02


def test_the_off_manifold_test_catches_the_old_step():
    power, bound = _off_manifold_attack_power(_tangent_projected_noise)
    assert power > 0.9 > bound


def test_a_record_with_a_non_finite_gradient_contributes_zero():
    """One overflowing record cannot make a release NaN: it counts as a zero gradient, B unchanged."""
    module = PCAProjector(5, 2, "grassmann", generator=torch.Generator().manual_seed(0))
    X = torch.randn(8, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    bad, zero = X.clone(), X.clone()
    bad[3] = 1e200  # x xᵀ overflows float64
    zero[3] = 0.0
    for noise_std in (0.0, 0.3):
        released = [private_gradient(module, lambda out: out, (data,), clip=1.0, noise_std=noise_std, denominator=8,
                                     randomness=seeded(2)) for data in (bad, zero)]
        assert torch.isfinite(released[0]["weight"]).all()
        torch.testing.assert_close(released[0]["weight"], released[1]["weight"])
    model = StiefelNet()
    Xs, ys = make_data(6)
    nan, zero = Xs.clone(), Xs.clone()
    nan[2] = float("nan")  # the vmap / dense path
    out = private_gradient(model, cross_entropy, (nan, ys), clip=1.0, noise_std=0.0, denominator=6)
    assert all(torch.isfinite(v).all() for v in out.values())
    kept = private_gradient(model, cross_entropy, (Xs[[0, 1, 3, 4, 5]], ys[[0, 1, 3, 4, 5]]), clip=1.0,
                            noise_std=0.0, denominator=6)
    for name in out:
        torch.testing.assert_close(out[name], kept[name])


@pytest.mark.parametrize("kind, manifold", [("grassmann", Grassmann(6, 2)), ("stiefel", Stiefel(6, 2))])
def test_closed_form_pca_norms_are_exact_off_the_manifold(kind, manifold):
    """The clip must see the released vector's true norm even at a θ the server bent off the manifold."""
    module = PCAProjector(6, 2, kind, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        bent = module.weight + 0.3 * torch.randn(module.weight.shape, generator=torch.Generator().manual_seed(1),
                                                 dtype=torch.float64)
        module.weight.copy_((bent + bent.T) / 2 if kind == "grassmann" else bent)
    X = torch.randn(10, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    closed = module.per_sample_tangent_gradients(X)
    W = module.weight.detach()
    dense = manifold.proju(W, per_sample_gradients(module, lambda out: out, (X,))["weight"])
    torch.testing.assert_close(closed.norms(), dense.flatten(1).norm(dim=1))
    weights = torch.rand(10, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    torch.testing.assert_close(closed.weighted_sum(weights)["weight"], torch.tensordot(weights, dense, dims=1))


@pytest.mark.parametrize("dtype, scale", [(torch.float32, 1e-24), (torch.float64, 1e-169)])
def test_gradients_whose_squares_underflow_are_still_clipped(dtype, scale):
    """Review finding: ‖g‖ computed as 0 for entries below √(smallest normal) let a server switch clipping off."""
    from skfedriem.privacy.per_record.gradients import DenseGradients, record_norms
    from skfedriem.privacy.mechanisms.mechanism import clip_factors

    rows = torch.full((2, 3), scale / math.sqrt(3), dtype=dtype)
    assert torch.linalg.vector_norm(rows, dim=1).max() == 0  # what torch computes
    assert torch.allclose(record_norms(rows).to(dtype), torch.full((2,), scale, dtype=dtype), rtol=1e-5, atol=0)
    grads = DenseGradients({"w": rows})
    clipped = grads.weighted_sum(clip_factors(grads.norms(), 1e-4 * scale))["w"]
    assert float(record_norms(clipped.reshape(1, -1))[0]) <= 2 * 1e-4 * scale * (1 + 1e-5)


def test_a_clip_or_noise_below_the_models_dtype_is_refused():
    from skfedriem.exceptions import InvalidInstructionsError
    from skfedriem.federated.instructions import RoundInstructions, step_plan

    module = torch.nn.Linear(4, 2)  # float32: √(smallest normal) = 1.1e-19
    base = dict(lr=0.1, local_steps=1, batch_size=1, sampling="fixed", aggregation="rlavg")
    with pytest.raises(InvalidInstructionsError, match="'clip'"):
        step_plan(RoundInstructions(**base, clip=1e-30, noise_std=2e-30), 20, module)
    with pytest.raises(InvalidInstructionsError, match="'noise_std'"):
        step_plan(RoundInstructions(**base, clip=1.0, noise_std=5e-324), 20, module)
    assert step_plan(RoundInstructions(**base, clip=1e-30, noise_std=2e-30), 20, module.double()).private


def test_gradients_whose_squares_overflow_get_their_finite_norm():
    from skfedriem.privacy.per_record.gradients import record_norms
    from skfedriem.privacy.mechanisms.mechanism import clip_factors

    rows = torch.full((2, 4), 1e20, dtype=torch.float32)
    assert torch.isinf(torch.linalg.vector_norm(rows, dim=1)).all()  # what torch computes
    norms = record_norms(rows)
    assert torch.allclose(norms.float(), torch.full((2,), 2e20), rtol=1e-6)
    assert torch.allclose(clip_factors(norms, 1.0).float(), torch.full((2,), 0.5e-20), rtol=1e-6)  # clipped, not dropped


def test_record_norms_of_blocks_are_those_of_the_rows_and_each_row_is_its_own():
    """Blocks are the rows cut in pieces; a row recomputed (underflow, NaN) leaves the others' bits alone."""
    from skfedriem.privacy.per_record.gradients import record_norms

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 7, generator=g), torch.randn(5, 3, generator=g)
    torch.testing.assert_close(record_norms([a, b]), record_norms(torch.cat([a, b], 1)), rtol=1e-6, atol=0)
    alone = record_norms([a, b])
    a2, b2 = a.clone(), b.clone()
    a2[1], b2[1] = 1e-30, 1e-30  # underflows: recomputed scaled
    a2[3, 0] = float("nan")
    mixed = record_norms([a2, b2])
    assert torch.equal(mixed[[0, 2, 4]], alone[[0, 2, 4]])
    assert torch.isclose(mixed[1].float(), torch.tensor(1e-30 * 10 ** 0.5), rtol=1e-5, atol=0) and torch.isnan(mixed[3])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_clip_factor_that_would_be_subnormal_drops_the_record(dtype):
    """Review finding: C / ‖g‖ just above half the smallest subnormal rounds up to it, which scaled g to 1.96 C."""
    from skfedriem.privacy.per_record.gradients import DenseGradients, record_norms
    from skfedriem.privacy.mechanisms.mechanism import clip_factors

    info = torch.finfo(dtype)
    clip = math.sqrt(info.tiny)  # the smallest clip a step accepts
    smallest_subnormal = torch.tensor(0.0, dtype=dtype).nextafter(torch.tensor(1.0, dtype=dtype))
    grads = DenseGradients({"w": torch.tensor([[clip / (0.51 * float(smallest_subnormal))]], dtype=dtype)})
    assert torch.isfinite(grads.grads["w"]).all()
    factors = clip_factors(grads.norms(), clip)
    clipped = grads.weighted_sum(factors)["w"]
    assert float(record_norms(clipped.reshape(1, -1))[0]) <= clip * (1 + 1e-6)
    assert float(clipped.abs().max()) == 0.0  # dropped: its factor, or its weight in the block's dtype, is 0


def test_blocks_of_two_dtypes_are_normed_in_the_wider_and_weighted_without_subnormals():
    """Review finding: float32 squares underflowed unseen next to a float64 block, and a float64 clip factor cast
    to a float32 block became a few-bit subnormal."""
    from skfedriem.privacy.per_record.gradients import DenseGradients, record_norms
    from skfedriem.privacy.mechanisms.mechanism import clip_factors

    wide = torch.full((1, 10), 1e-140, dtype=torch.float64)
    narrow = torch.full((1, 1000), 2.5e-23, dtype=torch.float32)
    true = math.sqrt(10 * 1e-280 + 1000 * float(torch.tensor(2.5e-23, dtype=torch.float32)) ** 2)
    assert math.isclose(float(record_norms([wide, narrow])[0]), true, rel_tol=1e-6)
    grads = DenseGradients({"a": torch.ones(1, 2, dtype=torch.float64), "b": torch.full((1, 2), 1e30)})
    factors = clip_factors(grads.norms(), 2 ** 0.5 * 1e-10)  # 1e-40: normal in float64, a subnormal in float32
    assert 0 < float(factors[0].float()) < torch.finfo(torch.float32).tiny
    sums = grads.weighted_sum(factors)
    assert float(sums["b"].abs().max()) == 0.0 and float(sums["a"].abs().max()) > 0
