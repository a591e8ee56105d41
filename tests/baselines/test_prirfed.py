import math

import pytest
import torch

from skfedriem.baselines import (
    advanced_composition,
    intrinsic_tangent_noise,
    prirfed_calibrate_mu0,
    prirfed_epsilon,
)
from skfedriem.baselines.prirfed import _round_epsilon
from skfedriem.manifolds import Euclidean, Grassmann, Sphere, Stiefel
from skfedriem.privacy import calibrate_mu0

from ..privacy.prv_reference import prv_poisson_add_remove_epsilon


def test_advanced_composition_formula():
    eps_r, T, d = 0.01, 100, 1e-6
    expected = math.sqrt(2 * T * math.log(1 / d)) * eps_r + T * eps_r * (math.exp(eps_r) - 1)
    assert advanced_composition(eps_r, T, d) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("mu0, q, tau", [(0.1, 0.1, 10), (0.5, 0.02, 20)])
def test_round_epsilon_agrees_with_prv_accountant(mu0, q, tau):
    delta_round = 1e-5 / 400
    ours = _round_epsilon(mu0, q, tau, delta_round, 1e-4)
    low, _, up = prv_poisson_add_remove_epsilon(mu0, q, tau, delta_round)
    assert low - 1e-3 <= ours <= up + 1e-3


def test_epsilon_composes_rounds_with_delta_split():
    mu0, q, tau, T, delta = 0.05, 0.1, 10, 200, 1e-5
    eps_r = _round_epsilon(mu0, q, tau, delta / (2 * T), 1e-4)
    assert prirfed_epsilon(mu0, delta, q, tau, T) == pytest.approx(advanced_composition(eps_r, T, delta / 2))
    halfway = prirfed_epsilon(mu0, delta, q, tau, 100, total_rounds=T)
    assert halfway == pytest.approx(advanced_composition(eps_r, 100, delta / 2))
    assert halfway < prirfed_epsilon(mu0, delta, q, tau, T)


@pytest.mark.parametrize("eps", [1.0, 5.0])
def test_calibration_certifies_and_is_tight(eps):
    mu0 = prirfed_calibrate_mu0(eps, 1e-5, 0.1, 10, 200)
    assert eps * (1 - 1e-4) <= prirfed_epsilon(mu0, 1e-5, 0.1, 10, 200) <= eps


def test_noise_ratio_is_the_papers_five_to_six():
    # paper Fig. 4b: PriRFed needs about 5-6x our noise at equal (eps, delta)
    ratio = calibrate_mu0(1.0, 1e-5, 0.1, 2000, "fixed") / prirfed_calibrate_mu0(1.0, 1e-5, 0.1, 10, 200)
    assert 5.0 <= ratio <= 6.0


def test_bad_parameters():
    with pytest.raises(ValueError, match="'eps'"):
        prirfed_calibrate_mu0(0.0, 1e-5, 0.1, 10, 200)
    with pytest.raises(ValueError, match="'delta'"):
        prirfed_epsilon(0.1, 1.0, 0.1, 10, 200)


def projector_matrix(manifold, X):
    """P_X as an (N, N) matrix on flattened ambient vectors."""
    N = X.numel()
    basis = torch.eye(N, dtype=X.dtype).reshape(N, *X.shape)
    return torch.stack([manifold.proju(X, e).reshape(-1) for e in basis], dim=1)


@pytest.mark.parametrize("manifold", [Stiefel(4, 2), Sphere(4), Euclidean(3)], ids=repr)
def test_intrinsic_noise_has_the_law_of_projected_gaussian_noise(manifold, gen):
    X = manifold.random_point(generator=gen, dtype=torch.float64)
    samples = torch.stack([intrinsic_tangent_noise(manifold, X, 0.5, generator=gen).reshape(-1)
                           for _ in range(20000)])
    P = projector_matrix(manifold, X)
    # tangent, centred, covariance σ² P_X (the covariance of P_X(Z), Z ~ N(0, σ² I))
    torch.testing.assert_close(samples @ P.T, samples, atol=1e-12, rtol=0)
    cov = samples.T @ samples / len(samples)
    assert (cov - 0.25 * P).abs().max() < 0.02
    assert samples.mean(0).abs().max() < 0.02


def test_intrinsic_noise_rejects_other_manifolds(gen):
    G = Grassmann(4, 2)
    with pytest.raises(TypeError, match="Stiefel, Sphere and Euclidean"):
        intrinsic_tangent_noise(G, G.random_point(generator=gen, dtype=torch.float64), 1.0)
