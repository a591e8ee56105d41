"""Rényi-DP accounting of subsampled Skellam steps (privacy/accounting/skellam.py), against independent accountants."""

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_sample_wor_gaussian
from scipy import stats
from scipy.special import logsumexp

from skfedriem.privacy import PrivacyAccountant
from skfedriem.privacy.accounting.skellam import (ORDERS, renyi_epsilon, calibrate_skellam_variance, discrete_epsilon,
                                                  gaussian_rdp, skellam_rdp, subsampled_rdp)


@pytest.mark.parametrize("sigma", [0.7, 1.5, 4.0])
@pytest.mark.parametrize("q", [0.01, 0.2, 1.0])
def test_the_subsampling_bound_is_dp_accountings_theorem_for_a_gaussian_or_looser(sigma, q):
    """dp-accounting's sampling-without-replacement RDP (Wang et al. Theorem 27, tightened for the Gaussian) is a
    lower bound of the generic Theorem 9 written here, and equal to it at order 2 (where no tightening applies)."""
    ours = subsampled_rdp(gaussian_rdp(1 / sigma), q)
    theirs = _compute_rdp_sample_wor_gaussian(q, sigma, ORDERS)
    assert (ours >= theirs - 1e-12).all()
    assert math.isclose(ours[0], theirs[0], rel_tol=1e-9)


def test_skellam_rdp_bounds_the_exact_one_dimensional_renyi_divergence():
    for variance in (2.0, 10.0, 100.0):
        lam = variance / 2
        support = np.arange(-400, 401)
        for shift in (1, 3):
            log_p = stats.skellam.logpmf(support, lam, lam)
            log_q = stats.skellam.logpmf(support - shift, lam, lam)
            keep = np.isfinite(log_p) & np.isfinite(log_q)
            for alpha in (2, 3, 8):
                exact = logsumexp(alpha * log_p[keep] + (1 - alpha) * log_q[keep]) / (alpha - 1)
                bound = skellam_rdp(variance, shift, shift, np.array([float(alpha)]))[0]
                assert exact <= bound + 1e-12


def test_a_skellam_ledger_is_never_below_the_gaussians_pld_at_the_same_variance():
    """ε_central of Skellam steps ≥ the PLD of Gaussian steps of the same variance and sensitivity."""
    for variance, l2, rate, steps in ((4.0e6, 2000.0, 0.1, 300), (1.0e5, 400.0, 1.0, 50), (9.0e4, 300.0, 0.02, 2000)):
        l1 = l2 * math.sqrt(1024)
        skellam = PrivacyAccountant()
        skellam.step(mu0=l2 / math.sqrt(variance), sample_rate=rate, num_steps=steps, skellam=(variance, l2, l1))
        gaussian = PrivacyAccountant()
        gaussian.step(mu0=l2 / math.sqrt(variance), sample_rate=rate, num_steps=steps)
        assert skellam.get_epsilon(1e-5) >= gaussian.get_epsilon(1e-5)


def test_at_one_dimension_the_ledger_is_never_below_the_exact_pld_of_the_two_discrete_distributions():
    """One coordinate, one record substituted at a fixed-size rate q: the output pair is (1 − q) Sk + q Sk(·−a) and
    (1 − q) Sk + q Sk(·+a) (the rest of the batch fixed), sensitivity Δ2 = Δ1 = 2a; dp-accounting's PLD of those
    two distributions, composed over the steps, is the exact ε, which the ledger must not undercut."""
    lam, a, rate, steps, delta = 40.0, 3, 0.3, 20, 1e-5
    support = np.arange(-300, 301)
    base = stats.skellam.logpmf(support, lam, lam)
    upper = np.logaddexp(math.log1p(-rate) + base, math.log(rate) + stats.skellam.logpmf(support - a, lam, lam))
    lower = np.logaddexp(math.log1p(-rate) + base, math.log(rate) + stats.skellam.logpmf(support + a, lam, lam))
    log_upper = {int(x): float(p) for x, p in zip(support, upper) if np.isfinite(p)}
    log_lower = {int(x): float(p) for x, p in zip(support, lower) if np.isfinite(p)}
    exact = pld_lib.from_two_probability_mass_functions(log_probability_mass_function_lower=log_lower,
                                                        log_probability_mass_function_upper=log_upper)
    exact = exact.self_compose(steps)
    ledger = PrivacyAccountant()
    ledger.step(mu0=2 * a / math.sqrt(2 * lam), sample_rate=rate, num_steps=steps,
                skellam=(2 * lam, 2.0 * a, 2.0 * a))
    assert ledger.get_epsilon(delta) >= exact.get_epsilon_for_delta(delta)


def test_calibration_meets_its_target_and_no_less_noise_would():
    for eps, rate, steps in ((1.0, 0.05, 400), (10.0, 1.0, 200), (4.0, 0.3, 50)):
        variance = calibrate_skellam_variance(eps, 1e-5, rate, steps, lambda: (500.0, 500.0 * 32))
        spent = discrete_epsilon([(("skellam", variance, 500.0, 16000.0, rate), steps)], 1e-5)
        assert spent <= eps
        assert discrete_epsilon([(("skellam", variance / 1.01, 500.0, 16000.0, rate), steps)], 1e-5) > eps


def test_a_discrete_ledger_round_trips_and_refuses_groups():
    ledger = PrivacyAccountant()
    ledger.step(mu0=0.5, sample_rate=0.1, num_steps=10, skellam=(1.0e6, 500.0, 4000.0))
    again = PrivacyAccountant.from_state_dict(ledger.state_dict())
    assert again.get_epsilon(1e-5) == ledger.get_epsilon(1e-5)
    assert again.discrete
    with pytest.raises(ValueError, match="group_size"):
        ledger.step(mu0=0.5, sample_rate=0.1, num_steps=1, group_size=2, skellam=(1.0e6, 500.0, 4000.0))


def _gaussian_pld_epsilon(mu0, q, steps, delta):
    """dp-accounting's PLD of ``steps`` Poisson-subsampled Gaussian steps of sensitivity 1 and std 1 / μ0."""
    pld = pld_lib.from_gaussian_mechanism(1 / mu0, sampling_prob=q, value_discretization_interval=1e-4)
    return pld.self_compose(steps).get_epsilon_for_delta(delta)


@pytest.mark.parametrize("group", [1, 3])
def test_a_mixed_ledger_composes_its_gaussian_steps_by_their_pld_and_its_skellam_steps_by_renyi_dp(group):
    """A ledger of Gaussian and Skellam steps (a budget of a local-noise and a distributed fit) certifies the
    smaller of: every step by Rényi DP; the Gaussian steps' PLD at δ_G plus the Skellam steps' RDP at δ − δ_G. Both
    halves recomputed here independently (dp-accounting's PLD; the Skellam RDP alone)."""
    delta, skellam = 1e-5, (1.0e6, 200.0, 1600.0)
    ledger = PrivacyAccountant()
    ledger.step(mu0=0.05, sample_rate=0.01, num_steps=3000, sampling="poisson", group_size=group)
    ledger.step(mu0=0.2, sample_rate=1.0, num_steps=1, skellam=skellam)
    certified = ledger.get_epsilon(delta)
    discrete = discrete_epsilon([(("skellam", *skellam, 1.0), 1)], (1 - 0.5) * delta)
    if group == 1:
        split = _gaussian_pld_epsilon(0.05, 0.01, 3000, 0.5 * delta) + discrete
        every_step_by_rdp = renyi_epsilon([(("gaussian", 0.05, 0.01), 3000), (("skellam", *skellam, 1.0), 1)], delta)
        assert split < every_step_by_rdp  # the case this is for: many subsampled Gaussian steps
        assert certified <= split * (1 + 1e-2) and certified < every_step_by_rdp
        assert certified >= discrete_epsilon([(("skellam", *skellam, 1.0), 1)], delta)  # never below a part alone
    else:  # a group of records only by the Gaussian steps' PLD (Rényi DP composes no group here)
        alone = PrivacyAccountant()
        alone.step(mu0=0.05, sample_rate=0.01, num_steps=3000, sampling="poisson", group_size=group)
        assert math.isfinite(certified) and certified > alone.get_epsilon(delta)


def test_a_running_epsilon_of_a_discrete_ledger_reads_at_its_own_grid():
    from skfedriem.privacy import RunningEpsilon

    ledger = PrivacyAccountant()
    ledger.step(mu0=0.05, sample_rate=0.01, num_steps=300, sampling="poisson")
    ledger.step(mu0=0.2, sample_rate=1.0, num_steps=1, skellam=(1.0e6, 200.0, 1600.0))
    running = RunningEpsilon(ledger, 1e-5, discretization=1e-3)
    assert running() == ledger.get_epsilon(1e-5, discretization=1e-3)


def test_a_group_beside_a_negligible_skellam_step_keeps_nearly_its_own_epsilon():
    """A δ share near 1 for the Gaussian steps' chain: one negligible Skellam step does not make a group's ε inf.

    At δ = 2e-9 the chain of 4 certifies ~15.9 and at δ / 2 nothing (its curve's rounding floor, ~2.5e-14 a link,
    grows to ~1e-9 over 4 links), so an even split of δ would give inf."""
    delta = 2e-9
    alone = PrivacyAccountant()
    alone.step(mu0=0.3, sample_rate=0.1, num_steps=200, group_size=4, unit="subject")
    mixed = PrivacyAccountant.from_state_dict(alone.state_dict())
    mixed.step(mu0=1e-4, sample_rate=1.0, unit="subject", skellam=(1e10, 10.0, 10.0))
    assert alone.get_epsilon(delta) < mixed.get_epsilon(delta) < alone.get_epsilon(delta) + 0.5
