"""Group privacy of a record-level run: never below the exact group bound, never above the generic lemma."""

import math

import numpy as np
import pytest

from skfedriem.privacy import PrivacyAccountant
from skfedriem.privacy.group import group_epsilon
from skfedriem.privacy.subsampled_gaussian import gdp_epsilon

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
