"""Group privacy of a record-level run: never below the exact group bound, never above the generic lemma."""

import math

import numpy as np
import pytest

from skfedriem.privacy import PrivacyAccountant
from skfedriem.privacy.accounting.group import group_epsilon
from skfedriem.privacy.accounting.subsampled_gaussian import gdp_epsilon

DELTA = 1e-5


def gaussian(mu: float) -> PrivacyAccountant:
    """One unsampled step: exactly a μ-GDP release, whose groups of k are exactly (k μ)-GDP."""
    ledger = PrivacyAccountant()
    ledger.step(mu0=mu, sample_rate=1.0, num_steps=1)
    return ledger


def subsampled(mu0: float = 0.2, q: float = 0.1, steps: int = 200) -> PrivacyAccountant:
    ledger = PrivacyAccountant()
    ledger.step(mu0=mu0, sample_rate=q, num_steps=steps)
    return ledger


@pytest.mark.parametrize("mu, k", [(0.1, 2), (0.1, 10), (0.5, 2), (0.5, 4), (1.0, 3)])
def test_a_gaussian_release_is_protected_at_k_mu_for_groups_of_k(mu, k):
    exact = gdp_epsilon(k * mu, DELTA)
    ours = group_epsilon(gaussian(mu), k, DELTA)
    assert exact <= ours <= exact + 0.05  # the grid's cells cost ln(1.03) at most


@pytest.mark.parametrize("k", [2, 3])
def test_never_above_the_generic_group_lemma(k):
    """(ε, δ)-DP gives (k ε, k e^{(k−1) ε} δ) for groups of k (Vadhan, 2017): the best such ε over the run's whole
    curve bounds ours from above."""
    ledger = subsampled()
    lemma = math.inf
    for record_delta in np.logspace(-12, math.log10(DELTA / k), 60):
        eps = ledger.get_epsilon(float(record_delta))
        if k * math.exp((k - 1) * eps) * record_delta <= DELTA:
            lemma = min(lemma, k * eps)
    assert group_epsilon(ledger, k, DELTA) <= lemma


def test_one_record_is_the_ledgers_own_guarantee_and_groups_only_cost_more():
    ledger = subsampled()
    values = [group_epsilon(ledger, k, DELTA) for k in (1, 2, 3, 5)]
    assert values[0] == ledger.get_epsilon(DELTA)
    assert all(a < b for a, b in zip(values, values[1:]))


def test_a_subject_of_hundreds_of_trials_is_not_protected_by_a_record_level_run():
    """At a record-level ε of about 1, a group of 288 trials (a BNCI session) is certified nothing."""
    ledger = subsampled()
    assert ledger.get_epsilon(DELTA) < 2 and group_epsilon(ledger, 288, DELTA) == math.inf


def test_a_run_without_noise_protects_no_group():
    ledger = PrivacyAccountant()
    ledger.step(mu0=math.inf, sample_rate=0.1, num_steps=3)
    assert group_epsilon(ledger, 2, DELTA) == math.inf
    with pytest.raises(ValueError, match="group_size"):
        group_epsilon(subsampled(), 0, DELTA)


def test_a_ledger_beyond_the_accountants_range_certifies_no_group_rather_than_a_small_one():
    """ε of about 420 for one record: its lines reach past e^700; the group gets inf, never a finite value below
    the exact 50-GDP one (it returned 1.0 when the overflow's NaN reached the search)."""
    ledger = gaussian(25.0)
    assert group_epsilon(ledger, 2, DELTA) == math.inf and group_epsilon(ledger, 3, DELTA) == math.inf


def test_every_entry_of_the_ledger_is_composed():
    """0.3- and 0.4-GDP releases compose to 0.5-GDP: groups of 3 are 1.5-GDP."""
    ledger = gaussian(0.3)
    ledger.step(mu0=0.4, sample_rate=1.0, num_steps=1)
    exact = gdp_epsilon(1.5, DELTA)
    assert exact <= group_epsilon(ledger, 3, DELTA) <= exact + 0.05


# ---- ledgers whose steps sample records of subjects (records_per_subject): every ε is for a group of k


@pytest.mark.parametrize("mu, k, steps", [(0.1, 3, 1), (0.2, 2, 10), (0.05, 8, 40)])
def test_a_ledger_of_groups_of_k_is_protected_at_k_mu_sqrt_steps_and_no_better(mu, k, steps):
    """Unsampled steps compose to a (μ √T)-GDP release; a unit owning k of the records is then exactly
    (k μ √T)-GDP: the ledger's ε is never below that, and within the chain's grid cells of it."""
    ledger = PrivacyAccountant()
    ledger.step(mu0=mu, sample_rate=1.0, num_steps=steps, group_size=k)
    exact = gdp_epsilon(k * mu * math.sqrt(steps), DELTA)
    assert exact <= ledger.get_epsilon(DELTA) <= exact + 0.05


def test_a_ledger_charges_the_largest_group_of_its_steps_over_all_of_them():
    """Steps of groups 1 and 4 certify what the same steps all of group 4 do (a subject owns at most 4 records of
    any step), which is the group privacy of the record-level composition."""
    mixed, largest, records = PrivacyAccountant(), PrivacyAccountant(), PrivacyAccountant()
    for group in (1, 4):
        mixed.step(mu0=0.2, sample_rate=0.1, num_steps=100 * group, group_size=group)
        largest.step(mu0=0.2, sample_rate=0.1, num_steps=100 * group, group_size=4)
        records.step(mu0=0.2, sample_rate=0.1, num_steps=100 * group)
    assert mixed.group_size == 4
    assert mixed.get_epsilon(DELTA) == largest.get_epsilon(DELTA) == group_epsilon(records, 4, DELTA)
    assert mixed.get_epsilon(DELTA) > records.get_epsilon(DELTA)


def test_a_ledgers_groups_survive_its_state_and_an_old_state_is_of_records():
    ledger = PrivacyAccountant()
    ledger.step(mu0=0.3, sample_rate=0.5, num_steps=5, group_size=3)
    assert PrivacyAccountant.from_state_dict(ledger.state_dict()).history == ledger.history
    old = {"history": [{"mu0": 0.3, "sample_rate": 0.5, "sampling": "fixed", "steps": 5}]}
    assert PrivacyAccountant.from_state_dict(old).group_size == 1


@pytest.mark.parametrize("eps, q, steps, k, sampling", [(4.0, 0.1, 300, 4, "fixed"), (1.0, 0.05, 400, 8, "poisson"),
                                                        (10.0, 1.0, 20, 2, "fixed")])
def test_the_group_calibration_certifies_its_target_for_the_group(eps, q, steps, k, sampling):
    from skfedriem.privacy.accounting.group import calibrate_group_mu0

    mu0 = calibrate_group_mu0(eps, DELTA, q, steps, k, sampling)
    ledger = PrivacyAccountant()
    ledger.step(mu0=mu0, sample_rate=q, num_steps=steps, sampling=sampling, group_size=k)
    assert eps * (1 - 2e-3) <= ledger.get_epsilon(DELTA) <= eps
    one_more = PrivacyAccountant()
    one_more.step(mu0=mu0 * 1.01, sample_rate=q, num_steps=steps, sampling=sampling, group_size=k)
    assert one_more.get_epsilon(DELTA) > eps  # the largest μ0, to 1 %


@pytest.mark.parametrize("mu0, q, steps, k", [(2.0, 0.2, 10, 20), (0.5, 0.2, 10, 5), (1.0, 0.5, 5, 3)])
def test_a_group_is_never_certified_below_a_concrete_pair_of_its_datasets(mu0, q, steps, k):
    """Subject A's k sampled records all at +C, B's at −C (Poisson: J ~ Binomial(k, q) of them in a step): the
    ledger's ε for groups of k is at least that pair's. Far along the composed curve the FFT's rounding made δ
    negative, and a line at δ = 0 there certified (2.0, 0.2, 10, 20) at 62 against the pair's 227."""
    from skfedriem.audit import subject_pair_epsilon

    ledger = PrivacyAccountant()
    ledger.step(mu0=mu0, sample_rate=q, num_steps=steps, sampling="poisson", group_size=k)
    assert ledger.get_epsilon(DELTA) >= subject_pair_epsilon(mu0, q, steps, k, DELTA)


def test_a_groups_epsilon_never_falls_as_the_noise_falls():
    values = []
    for mu0 in np.linspace(0.3, 2.0, 10):
        ledger = PrivacyAccountant()
        ledger.step(mu0=float(mu0), sample_rate=0.02, num_steps=400, sampling="poisson", group_size=10)
        values.append(ledger.get_epsilon(DELTA))
    assert all(a <= b for a, b in zip(values, values[1:])) and math.isfinite(values[0])


def test_a_group_of_subjects_of_k_records_each_is_a_group_of_their_records():
    """A ledger charged for groups of 3 (3 records a subject): two subjects are six records."""
    grouped, records = PrivacyAccountant(), PrivacyAccountant()
    grouped.step(mu0=0.2, sample_rate=0.1, num_steps=50, group_size=3)
    records.step(mu0=0.2, sample_rate=0.1, num_steps=50)
    assert group_epsilon(grouped, 1, DELTA) == grouped.get_epsilon(DELTA) == group_epsilon(records, 3, DELTA)
    assert group_epsilon(grouped, 2, DELTA) == group_epsilon(records, 6, DELTA)
    assert group_epsilon(records, 2, 1e-12) > group_epsilon(records, 2, 1e-5)  # the smallest δ is accepted
