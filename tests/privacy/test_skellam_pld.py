"""Subsampled Skellam steps certified by privacy-loss distributions (privacy/accounting/skellam_pld.py), against the
exact privacy-loss distribution of the real discrete mechanism in one dimension."""

import math

import numpy as np
import pytest

from skfedriem._utils.compat import dense_pmfs
from skfedriem.privacy import PrivacyAccountant
from skfedriem.privacy.accounting.skellam import (ORDERS, PROFILE_ORDERS, calibrate_skellam_variance, discrete_epsilon,
                                                  renyi_epsilon, skellam_rdp, step_pld)
from skfedriem.privacy.accounting.skellam_pld import one_coordinate_pld, subsampled_step_pld


def _step_curve(lam: float, l2: float, rate: float):
    kind = ("skellam", 2 * lam, l2, l2, rate)
    return step_pld(kind)


@pytest.mark.parametrize("lam, a, rate", [(8.0, 1, 0.05), (40.0, 3, 0.3), (500.0, 5, 0.1), (2.0e4, 40, 0.02)])
def test_a_steps_distribution_is_never_below_the_exact_discrete_mechanism_at_any_epsilon(lam, a, rate):
    """δ(ε) of the dominating step ≥ the real mechanism's on a grid of ε (at these four settings ≥ 1.5x wherever the
    truth is above 1e-12, the price of reading a profile from Rényi DP), and a step charged at 0.6 of its sensitivity
    falls below it somewhere (at 0.7 it does not): the comparison can fail."""
    exact = one_coordinate_pld(lam, a, rate)
    grid = list(np.linspace(0.0, 6.0, 61))
    ours = _step_curve(lam, 2.0 * a, rate)
    truth = np.array(exact.get_delta_for_epsilon(grid))
    assert (np.array(ours.get_delta_for_epsilon(grid)) >= truth * (1 - 1e-9) - 1e-15).all()
    short = _step_curve(lam, 0.6 * 2 * a, rate)
    assert (np.array(short.get_delta_for_epsilon(grid)) < truth).any()


@pytest.mark.parametrize("lam, a, rate, steps", [(40.0, 3, 0.3, 20), (300.0, 3, 0.1, 300), (60.0, 2, 0.02, 1000)])
def test_a_composition_is_never_below_the_exact_composed_mechanism(lam, a, rate, steps):
    """The ledger's ε (the smaller of Rényi DP and the composed distributions) ≥ the exact ε of the real discrete
    mechanism composed by dp-accounting, in both one-coordinate worst cases."""
    delta = 1e-5
    exact = _real_epsilon(2 * lam, a, rate, steps, delta)
    ledger = PrivacyAccountant()
    ledger.step(mu0=2 * a / math.sqrt(2 * lam), sample_rate=rate, num_steps=steps,
                skellam=(2 * lam, 2.0 * a, 2.0 * a))
    assert ledger.get_epsilon(delta) >= exact


def _real_epsilon(variance: float, a: int, rate: float, steps: int, delta: float) -> float:
    """The larger ε of the two one-coordinate worst cases (a Poisson-sampled sum's, a fixed-size batch's)."""
    return max(one_coordinate_pld(variance / 2, a, rate, one_sided=one_sided).self_compose(steps)
               .get_epsilon_for_delta(delta) for one_sided in (False, True))


def test_at_q_01_the_calibrated_variance_leaves_most_of_epsilon_to_the_real_mechanism():
    """q = 0.1, 300 steps, ε = 4, δ = 1e-5: the variance calibrated certifies 4 (recomputed), and the real discrete
    mechanism spends at least 2.62 of it (one coordinate, a fixed-size batch's worst case; a Poisson sum's 2.45),
    where the variance Rényi DP alone calibrates (22x larger) left it under 0.5."""
    a, rate, steps, delta = 40, 0.1, 300, 1e-5
    variance = calibrate_skellam_variance(4.0, delta, rate, steps, lambda: (2.0 * a, 2.0 * a))
    assert discrete_epsilon([(("skellam", variance, 2.0 * a, 2.0 * a, rate), steps)], delta) <= 4.0
    assert 2.5 <= _real_epsilon(variance, a, rate, steps, delta) <= 4.0
    by_renyi_alone = calibrate_rdp_only(4.0, delta, rate, steps, 2.0 * a)
    assert by_renyi_alone > 10 * variance
    assert _real_epsilon(by_renyi_alone, a, rate, steps, delta) < 0.5


def calibrate_rdp_only(eps, delta, rate, steps, l2):
    low, high = 1e-6, 1e12
    while high / low > 1.001:
        middle = math.sqrt(low * high)
        fits = renyi_epsilon([(("skellam", middle, l2, l2, rate), steps)], delta) <= eps
        low, high = (low, middle) if fits else (middle, high)
    return high


def test_at_full_batches_renyi_dp_stays_the_bound():
    """At q = 1 nothing is amplified: the distributions (one conversion a step) are looser and Rényi DP is kept."""
    kind = ("skellam", 4.0e8, 1000.0, 8000.0, 1.0)
    assert discrete_epsilon([(kind, 300)], 1e-5) == renyi_epsilon([(kind, 300)], 1e-5)
    assert step_pld(kind).self_compose(300).get_epsilon_for_delta(1e-5) > discrete_epsilon([(kind, 300)], 1e-5)


def test_a_step_distribution_is_a_distribution():
    """The convex minorant keeps every mass of the connect-the-dots distribution non-negative, summing to 1."""
    rdp = skellam_rdp(4.0e8, 1000.0, 8000.0, PROFILE_ORDERS)
    for rate in (0.01, 0.3, 1.0):
        (pmf,) = dense_pmfs(subsampled_step_pld(tuple(rdp), tuple(PROFILE_ORDERS), rate, 1e-3))
        assert pmf.probs.min() >= 0.0
        assert math.isclose(pmf.probs.sum() + pmf.infinity_mass, 1.0, rel_tol=1e-6)
    assert len(ORDERS) < len(PROFILE_ORDERS)


def test_a_step_that_certifies_nothing_on_the_grid_leaves_the_other_bound():
    """A weak full-batch step (its curve still at 1 at loss 60: all its mass at infinite loss) beside subsampled
    Skellam steps made dp-accounting raise (the review's finding); the distributions' bound is then inf and the
    ledger keeps Rényi DP's or the Gaussian's, never below the weak step's own ε."""
    mixed = PrivacyAccountant()
    mixed.step(mu0=8.0, sample_rate=1.0, num_steps=1)
    alone = PrivacyAccountant.from_state_dict(mixed.state_dict())
    mixed.step(mu0=0.1, sample_rate=0.1, num_steps=10, skellam=(4e4, 20.0, 20.0))
    assert alone.get_epsilon(1e-5) <= mixed.get_epsilon(1e-5) < math.inf
    weak = ("skellam", 0.1, 2.0, 2.0, 1.0)
    steps = [(weak, 1), (("skellam", 4e4, 2.0, 2.0, 0.1), 10)]
    assert discrete_epsilon(steps, 1e-5) == renyi_epsilon(steps, 1e-5) >= discrete_epsilon([(weak, 1)], 1e-5)
