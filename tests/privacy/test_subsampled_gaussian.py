"""The certified ε is an upper bound: cross-checked against independent accountants."""

import json
import math

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from skfedriem.privacy import PrivacyAccountant, RunningEpsilon, calibrate_mu0, epsilon_spent, gdp_epsilon, gdp_mu

from .prv_reference import (
    ReplaceOneSubsampledGaussian,
    SymmetrisedSubsampledGaussian,
    prv_epsilon,
    prv_poisson_add_remove_epsilon,
)

DELTA = 1e-5
CASES = [  # (mu0, q, steps)
    (1 / 16.9, 0.1, 2000),
    (0.5, 0.05, 300),
    (1.0, 0.02, 500),
    (0.3, 0.5, 100),
]


@pytest.mark.parametrize("mu0, steps", [(0.5, 1), (0.2, 50), (0.05, 2000), (1.5, 10)])
def test_fixed_mode_at_q_one_is_exact_gdp(mu0, steps):
    exact = gdp_epsilon(mu0 * math.sqrt(steps), DELTA)
    ours = epsilon_spent(mu0, 1.0, steps, DELTA)
    assert exact <= ours <= exact * 1.005


@pytest.mark.parametrize("mu0, q, steps", CASES)
def test_fixed_mode_matches_independent_symmetrised_accountant(mu0, q, steps):
    low, _, up = prv_epsilon(SymmetrisedSubsampledGaussian(q, mu0), steps, DELTA)
    ours = epsilon_spent(mu0, q, steps, DELTA)
    assert ours >= low  # never below what the independent bound allows
    assert ours <= up * 1.01


@pytest.mark.parametrize("mu0, q, steps", CASES)
def test_fixed_mode_never_below_poisson_add_remove(mu0, q, steps):
    ours = epsilon_spent(mu0, q, steps, DELTA)
    _, prv_estimate, _ = prv_poisson_add_remove_epsilon(mu0, q, steps, DELTA)
    dp = pld_lib.from_gaussian_mechanism(1 / mu0, sampling_prob=q).self_compose(steps)
    assert ours >= prv_estimate
    assert ours >= dp.get_epsilon_for_delta(DELTA)


def test_fixed_mode_costs_a_few_percent_of_noise_over_add_remove():
    # docs (the method, privacy accounting): at q = 0.1, 2000 steps, eps = 1 the symmetrised tradeoff needs ~3.5 % more noise.
    mu_fixed = calibrate_mu0(1.0, DELTA, 0.1, 2000)
    mu_ar = 1.0
    lo, hi = 0.01, 1.0
    for _ in range(40):  # bisection of the add/remove accountant, independent of ours
        mu_ar = (lo + hi) / 2
        eps = pld_lib.from_gaussian_mechanism(1 / mu_ar, sampling_prob=0.1).self_compose(2000)
        lo, hi = (mu_ar, hi) if eps.get_epsilon_for_delta(DELTA) <= 1.0 else (lo, mu_ar)
    extra_noise = mu_ar / mu_fixed - 1
    assert 0.0 < extra_noise < 0.06


@pytest.mark.parametrize("mu0, q, steps", CASES)
def test_poisson_mode_matches_independent_replace_one(mu0, q, steps):
    low, est, up = prv_epsilon(ReplaceOneSubsampledGaussian(q, mu0), steps, DELTA)
    ours = epsilon_spent(mu0, q, steps, DELTA, sampling="poisson")
    assert ours >= low
    assert abs(ours - est) <= 0.01 * est


def test_discretisation_slack_below_one_percent():
    coarse = epsilon_spent(1 / 16.9, 0.1, 2000, DELTA)
    fine = epsilon_spent(1 / 16.9, 0.1, 2000, DELTA, discretization=1e-5)
    assert fine <= coarse <= 1.01 * fine


@pytest.mark.parametrize("sampling", ["fixed", "poisson"])
@pytest.mark.parametrize("eps", [0.5, 5.0])
def test_calibration_round_trip(sampling, eps):
    mu0 = calibrate_mu0(eps, DELTA, 0.1, 500, sampling=sampling)
    spent = epsilon_spent(mu0, 0.1, 500, DELTA, sampling=sampling)
    assert spent <= eps
    assert spent >= eps * 0.995  # the largest such mu0, up to the bracket tolerance
    assert epsilon_spent(mu0 * 1.01, 0.1, 500, DELTA, sampling=sampling) > eps


@pytest.mark.parametrize("sampling", ["fixed", "poisson"])
def test_monotone_in_every_argument(sampling):
    base = dict(mu0=0.3, sample_rate=0.05, steps=200, delta=DELTA, sampling=sampling)
    eps0 = epsilon_spent(**base)
    assert epsilon_spent(**{**base, "mu0": 0.4}) > eps0
    assert epsilon_spent(**{**base, "sample_rate": 0.1}) > eps0
    assert epsilon_spent(**{**base, "steps": 400}) > eps0
    assert epsilon_spent(**{**base, "delta": 1e-7}) > eps0
    assert calibrate_mu0(1.0, DELTA, 0.05, 200, sampling) > calibrate_mu0(1.0, DELTA, 0.05, 400, sampling)
    assert calibrate_mu0(2.0, DELTA, 0.05, 200, sampling) > calibrate_mu0(1.0, DELTA, 0.05, 200, sampling)


@pytest.mark.parametrize(
    "call, name, value",
    [
        (lambda: calibrate_mu0(0.0, DELTA, 0.1, 10), "eps", "0.0"),
        (lambda: calibrate_mu0(-1.0, DELTA, 0.1, 10), "eps", "-1.0"),
        (lambda: calibrate_mu0(1.0, 1.0, 0.1, 10), "delta", "1.0"),
        (lambda: calibrate_mu0(1.0, 0.0, 0.1, 10), "delta", "0.0"),
        (lambda: epsilon_spent(0.1, 1.5, 10, DELTA), "sample_rate", "1.5"),
        (lambda: epsilon_spent(0.1, 0.0, 10, DELTA), "sample_rate", "0.0"),
        (lambda: epsilon_spent(0.1, 0.1, 0, DELTA), "steps", "0"),
        (lambda: epsilon_spent(-0.1, 0.1, 5, DELTA), "mu0", "-0.1"),
        (lambda: epsilon_spent(0.1, 0.1, 5, DELTA, sampling="shuffle"), "sampling", "'shuffle'"),
    ],
)
def test_bad_arguments_raise_value_error_naming_the_value(call, name, value):
    with pytest.raises(ValueError, match=rf"'{name}' parameter.*Got {value}"):
        call()


def test_gdp_summary_is_the_central_limit_formula():
    mu0, q, steps = 1 / 16.9, 0.1, 2000
    assert gdp_mu(mu0, q, steps) == pytest.approx(q * math.sqrt(steps * math.expm1(mu0**2)))
    # at leading order it only depends on C / sigma through 2 C sqrt(steps) / (m sigma)
    assert gdp_mu(mu0, q, steps) == pytest.approx(q * mu0 * math.sqrt(steps), rel=1e-3)
    # the approximation lands near the certified value here (it is not a bound)
    approx = gdp_epsilon(gdp_mu(mu0, q, steps), DELTA)
    assert approx == pytest.approx(epsilon_spent(mu0, q, steps, DELTA), rel=0.15)


def test_accountant_composes_like_epsilon_spent_and_serialises():
    acc = PrivacyAccountant()
    assert acc.get_epsilon(DELTA) == 0.0
    for _ in range(10):
        acc.step(mu0=0.3, sample_rate=0.05, num_steps=20)
    assert acc.steps == 200 and len(acc) == 1
    assert acc.get_epsilon(DELTA) == pytest.approx(epsilon_spent(0.3, 0.05, 200, DELTA), rel=1e-12)
    acc.step(mu0=0.6, sample_rate=0.05, num_steps=10)
    both = acc.get_epsilon(DELTA)
    assert both > epsilon_spent(0.3, 0.05, 200, DELTA)
    assert both > epsilon_spent(0.6, 0.05, 10, DELTA)
    restored = PrivacyAccountant()
    restored.load_state_dict(json.loads(json.dumps(acc.state_dict())))
    assert restored.get_epsilon(DELTA) == both
    with pytest.raises(ValueError, match="sampling"):
        acc.step(mu0=0.3, sample_rate=0.05, sampling="epoch")


def test_running_epsilon_composes_each_round_onto_the_last():
    ledger = PrivacyAccountant()
    ledger.step(mu0=0.3, sample_rate=0.2, num_steps=7, sampling="poisson")  # an earlier run's steps
    running = RunningEpsilon(ledger, 1e-5, discretization=1e-3)
    for _ in range(12):
        ledger.step(mu0=0.5, sample_rate=0.05, num_steps=21)
        spent, recomputed = running(), ledger.get_epsilon(1e-5, discretization=1e-3)
        # the same bound up to dp-accounting's 1e-15 tail truncations, charged to the infinite loss
        assert spent == pytest.approx(recomputed, rel=1e-7)
    assert running() == spent  # nothing new: nothing composed


def test_running_epsilon_refuses_a_ledger_that_shrank():
    ledger = PrivacyAccountant()
    ledger.step(mu0=0.5, sample_rate=0.05, num_steps=21)
    running = RunningEpsilon(ledger, 1e-5)
    running()
    ledger.load_state_dict({"history": []})
    with pytest.raises(ValueError, match="lost steps"):
        running()


def test_running_epsilon_in_rounds_does_not_depend_on_how_the_ledger_was_filled():
    one_by_one, at_once = PrivacyAccountant(), PrivacyAccountant()
    running = RunningEpsilon(one_by_one, 1e-5, discretization=1e-3, chunk=21)
    for _ in range(3):
        one_by_one.step(mu0=0.5, sample_rate=0.05, num_steps=21)
        spent = running()
    at_once.step(mu0=0.5, sample_rate=0.05, num_steps=63)  # a resumed run finds three rounds in its ledger
    assert RunningEpsilon(at_once, 1e-5, discretization=1e-3, chunk=21)() == spent
    assert RunningEpsilon(at_once, 1e-5, discretization=1e-3)() != spent  # one 63-step block rounds differently


@pytest.mark.parametrize("eps, q, steps, sampling", [(0.1, 1.0, 1, "fixed"), (1.0, 1.0, 200, "fixed"),
                                                     (10.0, 0.1, 200, "fixed"), (1.0, 0.1, 200, "poisson")])
def test_the_smallest_delta_accepted_is_one_the_calibration_reaches(eps, q, steps, sampling):
    """At δ = 1e-15 (the old floor) each of these raised: a NaN, a zero sensitivity or a 13 TiB grid."""
    from skfedriem.privacy import MIN_DELTA, calibrate_mu0, epsilon_spent

    mu0 = calibrate_mu0(eps, MIN_DELTA, q, steps, sampling)
    assert 0 < epsilon_spent(mu0, q, steps, MIN_DELTA, sampling) <= eps * (1 + 1e-3)


def _calibration_cases():
    """20 targets over [0.1, 100] for a one-round fit (q = 0.64, 2 steps) with fixed-size batches; 6 with Poisson;
    2 for a BNCI-size run (4200 steps)."""
    import numpy as np

    fixed = [("fixed", float(eps), 0.64, 2) for eps in np.geomspace(0.1, 100, 20)]
    poisson = [("poisson", float(eps), 0.25, 12) for eps in np.geomspace(0.1, 40, 6)]
    long_runs = [("fixed", eps, 64 / 1300, 4200) for eps in (10.0, 30.0)]  # a BNCI-size run, its grid doubled at 30
    return fixed + poisson + long_runs


@pytest.mark.parametrize("sampling, eps, q, steps", _calibration_cases(),
                         ids=lambda v: f"{v:.3g}" if isinstance(v, float) else str(v))
def test_a_calibration_at_any_epsilon_is_never_below_an_independent_accountant(sampling, eps, q, steps):
    """At every target the calibrated μ0 certifies at most ε, and prv-accountant (its closed-form privacy-loss
    variables, its own error bounds) finds at least as much loss at that μ0 as the target minus 1 %: the certificate
    is never below the truth and costs at most 1 % of ε."""
    mu0 = calibrate_mu0(eps, 1e-5, q, steps, sampling)
    certified = epsilon_spent(mu0, q, steps, 1e-5, sampling)
    reference = SymmetrisedSubsampledGaussian(q, mu0) if sampling == "fixed" else ReplaceOneSubsampledGaussian(q, mu0)
    lower, _, upper = prv_epsilon(reference, steps, 1e-5)
    assert lower - 1e-9 <= certified <= eps
    assert upper >= 0.99 * eps


@pytest.mark.parametrize("mu0", [0.05, 0.3, 1.0, 3.0, 10.0, 25.0])
@pytest.mark.parametrize("q", [0.001, 0.05, 0.3, 0.9, 1.0])
def test_the_closed_form_delta_is_dp_accountings_for_both_directions(mu0, q):
    """The fixed mode's δ(ε) in closed form agrees with dp-accounting's REMOVE and ADD curves (their maximum) to
    1e-9 relative wherever it is above 1e-200, and is 0 where theirs is."""
    import numpy as np
    from dp_accounting.pld import privacy_loss_mechanism as plm

    from skfedriem.privacy.accounting.subsampled_gaussian import subsampled_gaussian_delta

    eps = np.concatenate([np.linspace(0, 5, 51), np.linspace(5, max(6, mu0 * mu0), 40)])
    library = np.maximum(*(np.asarray(plm.GaussianPrivacyLoss(1.0, sensitivity=mu0, sampling_prob=q,
                                                               adjacency_type=adjacency).get_delta_for_epsilon(eps))
                           for adjacency in (plm.AdjacencyType.REMOVE, plm.AdjacencyType.ADD)))
    ours = subsampled_gaussian_delta(mu0, q, eps)
    live = library > 1e-200
    assert np.allclose(ours[live], library[live], rtol=1e-9, atol=0)
    assert (ours[~live] < 1e-190).all()


def test_steps_of_very_different_mu0_share_one_grid_in_every_composition():
    """A wide step (μ0 = 8: its grid is coarser) and ordinary ones compose, in the ledger, in the per-round history
    (the wide one arriving second, which widens the grid and recomposes) and in group privacy; each reading is an
    upper bound of the steps' own, and the history's last value is the ledger's on the same grid."""
    from skfedriem.privacy.accounting.group import group_epsilon
    from skfedriem.privacy.accounting.subsampled_gaussian import DISCRETIZATION, grid_interval

    assert grid_interval([(8.0, 0.64, 1)]) > grid_interval([(0.3, 0.1, 15)]) == DISCRETIZATION
    ledger = PrivacyAccountant()
    running = RunningEpsilon(ledger, DELTA, discretization=10 * DISCRETIZATION, chunk=5)
    ledger.step(mu0=0.3, sample_rate=0.1, num_steps=10)
    first = running()
    ledger.step(mu0=8.0, sample_rate=0.64, num_steps=1)
    ledger.step(mu0=0.3, sample_rate=0.1, num_steps=5)
    last = running()
    wide_alone = epsilon_spent(8.0, 0.64, 1, DELTA)
    both = ledger.get_epsilon(DELTA)
    assert first < last and wide_alone <= both
    assert math.isclose(last, ledger.get_epsilon(DELTA, discretization=10 * DISCRETIZATION), rel_tol=1e-9)
    assert group_epsilon(ledger, 2, DELTA) > both


@pytest.mark.parametrize("delta, q, steps", [(1e-2, 1e-3, 1), (0.5, 0.1, 5), (1e-5, 1e-6, 5)])
def test_a_delta_above_the_chance_a_record_is_sampled_is_refused(delta, q, steps):
    """Every μ0 certifies ε = 0 at such a δ: the search for the largest one doubled μ0 until it ran out of memory."""
    with pytest.raises(ValueError, match="chance that a record is sampled"):
        calibrate_mu0(1.0, delta, q, steps)
