"""One invariant suite run over every manifold (docs: the method, geometry), in float64."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from skfedriem.manifolds import Euclidean, Grassmann, Sphere, Stiefel

from ..extending_examples import load_example

Oblique = load_example("oblique").Oblique  # the documentation's new manifold, held to the same invariants

MANIFOLDS = [
    Euclidean(4, 3),
    Sphere(2),
    Sphere(7),
    Stiefel(5, 1),
    Stiefel(6, 3),
    Stiefel(7, 7),
    Grassmann(5, 1),
    Grassmann(7, 3),
    Oblique(2, 1),
    Oblique(5, 3),
]
ids = [repr(m) for m in MANIFOLDS]


def fro(A, M):
    return A.flatten(start_dim=A.dim() - len(M.shape)).norm(dim=-1)


def point_and_tangent(M, seed, scale=1.0, batch=()):
    g = torch.Generator().manual_seed(seed)
    X = M.random_point(*batch, generator=g)
    V = M.random_tangent(X, generator=g)
    V = V / fro(V, M).clamp_min(1e-300).reshape(*V.shape[: V.dim() - len(M.shape)], *[1] * len(M.shape))
    return X, scale * V, g


seeds = st.integers(min_value=0, max_value=2**31 - 1)


@pytest.mark.parametrize("M", MANIFOLDS, ids=ids)
@settings(max_examples=15, deadline=None)
@given(seed=seeds)
def test_proj_fixes_points_and_lands_on_manifold(M, seed):
    g = torch.Generator().manual_seed(seed)
    X = M.random_point(3, generator=g)
    assert M.check_point(X, atol=1e-10)
    torch.testing.assert_close(M.proj(X), X, atol=1e-10, rtol=0)
    Y = torch.randn(3, *M._gaussian_shape, generator=g, dtype=torch.float64)
    assert M.check_point(M.proj(Y), atol=1e-10)


@pytest.mark.parametrize("M", MANIFOLDS, ids=ids)
@settings(max_examples=15, deadline=None)
@given(seed=seeds)
def test_tangent_projection_is_orthogonal_projector(M, seed):
    g = torch.Generator().manual_seed(seed)
    X = M.random_point(generator=g)
    Z1 = torch.randn(X.shape, generator=g, dtype=X.dtype)
    Z2 = torch.randn(X.shape, generator=g, dtype=X.dtype)
    P1 = M.proju(X, Z1)
    torch.testing.assert_close(M.proju(X, P1), P1, atol=1e-10, rtol=0)  # idempotent
    # self-adjoint in the Frobenius inner product
    lhs = (M.proju(X, Z1) * Z2).sum()
    rhs = (Z1 * M.proju(X, Z2)).sum()
    assert abs(float(lhs - rhs)) < 1e-10
    # range is tangent: a curve Π(X + tV) leaves X with velocity V
    t = 1e-6
    moved = M.proj(X + t * P1)
    torch.testing.assert_close((moved - X) / t, P1, atol=1e-4 * (1 + float(P1.abs().max())), rtol=0)


@pytest.mark.parametrize("M", MANIFOLDS, ids=ids)
def test_projection_rank_equals_intrinsic_dimension(M, gen):
    X = M.random_point(generator=gen)
    D = X.numel()
    basis = torch.eye(D, dtype=X.dtype).reshape(D, *X.shape)
    images = M.proju(X.expand(D, *X.shape), basis).reshape(D, D)
    assert torch.linalg.matrix_rank(images, atol=1e-9) == M.dim


@pytest.mark.parametrize("M", MANIFOLDS, ids=ids)
@settings(max_examples=10, deadline=None)
@given(seed=seeds)
def test_retraction_matches_exponential_to_second_order(M, seed):
    errors = []
    for scale in (1e-1, 1e-2):
        X, V, _ = point_and_tangent(M, seed, scale)
        errors.append(float(fro(M.retr(X, V) - M.exp(X, V), M)))
    # second-order agreement: the error falls at least ~100x for a 10x smaller step
    # (retr = exp + O(t^3) here; anything <= 1e-12 is round-off)
    assert errors[1] <= max(errors[0] / 50, 1e-12)
    X, V, _ = point_and_tangent(M, seed, 1e-2)
    assert float(fro(M.retr(X, V) - (X + V), M)) <= 2e-4  # first order: R_X(V) = X + V + O(|V|^2)


@pytest.mark.parametrize("M", MANIFOLDS, ids=ids)
@settings(max_examples=10, deadline=None)
@given(seed=seeds, scale=st.floats(1e-3, 0.3))
def test_inverse_retraction_and_log_invert(M, seed, scale):
    X, V, _ = point_and_tangent(M, seed, scale)
    torch.testing.assert_close(M.inv_retr(X, M.retr(X, V)), V, atol=1e-9, rtol=0)
    torch.testing.assert_close(M.log(X, M.exp(X, V)), V, atol=1e-8, rtol=0)
    assert M.check_point(M.exp(X, V), atol=1e-10)


@pytest.mark.parametrize("M", MANIFOLDS, ids=ids)
def test_lift_is_projected_difference_and_batched(M, gen):
    X = M.random_point(4, generator=gen)
    Y = M.random_point(4, generator=gen)
    L = M.lift(X, Y)
    for i in range(4):
        torch.testing.assert_close(L[i], M.proju(X[i], Y[i] - X[i]))
    torch.testing.assert_close(M.proju(X, L), L)


@pytest.mark.parametrize("M", MANIFOLDS, ids=ids)
def test_float32_supported(M, gen):
    X = M.random_point(2, generator=gen, dtype=torch.float32)
    assert X.dtype == torch.float32
    assert M.check_point(X, atol=1e-5)
    V = M.random_tangent(X, generator=gen) * 0.01
    assert M.retr(X, V).dtype == torch.float32
    assert M.check_point(M.retr(X, V), atol=1e-5)


@pytest.mark.parametrize("M", MANIFOLDS, ids=ids)
def test_random_tangent_noise_has_intrinsic_dimension_energy(M, gen):
    X = M.random_point(generator=gen)
    samples = M.random_tangent(X.expand(4000, *X.shape), generator=gen)
    mean_sq = float(fro(samples, M).pow(2).mean())
    # E||P_X(xi)||^2 = d_M for xi ~ N(0, I) in the ambient space; sd of the mean ~ sqrt(2 d_M / 4000)
    assert abs(mean_sq - M.dim) < 5 * (2 * M.dim / 4000) ** 0.5 + 1e-9


@pytest.mark.parametrize("M", MANIFOLDS[1:], ids=ids[1:])
def test_check_point_explains_failures(M, gen):
    X = M.random_point(generator=gen)
    ok, reason = M.check_point(1.5 * X, explain=True)
    assert not ok and isinstance(reason, str) and reason
    ok, reason = M.check_point(torch.full_like(X, float("nan")), explain=True)
    assert not ok and "NaN" in reason
    assert not M.check_point(torch.zeros(3))
