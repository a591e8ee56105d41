"""The concrete pair of federations that bounds a subject's cost from below."""

import pytest

from skfedriem.audit import subject_pair_epsilon
from skfedriem.privacy import PrivacyAccountant

DELTA = 1e-5


@pytest.mark.parametrize("mu0, q, steps", [(0.5, 0.2, 10), (2.0, 0.02, 50)])
def test_one_record_per_subject_is_the_record_level_poisson_accountant(mu0, q, steps):
    """k = 1: the pair is the record's own worst case, so the tight record-level Poisson ledger meets it (within the
    rounding down of the pair's binned, optimistic distribution)."""
    ledger = PrivacyAccountant()
    ledger.step(mu0=mu0, sample_rate=q, num_steps=steps, sampling="poisson")
    pair = subject_pair_epsilon(mu0, q, steps, 1, DELTA)
    assert pair <= ledger.get_epsilon(DELTA) <= 1.03 * pair


def test_more_records_per_subject_cost_more_and_fixed_batches_need_the_clients_size():
    values = [subject_pair_epsilon(0.5, 0.2, 10, k, DELTA) for k in (1, 2, 5)]
    assert values[0] < values[1] < values[2]
    fixed = subject_pair_epsilon(0.5, 0.2, 10, 2, DELTA, sampling="fixed", n_records=100)
    assert fixed > values[0]
    with pytest.raises(ValueError, match="n_records"):
        subject_pair_epsilon(0.5, 0.2, 10, 2, DELTA, sampling="fixed")
    with pytest.raises(ValueError, match="'sampling'"):
        subject_pair_epsilon(0.5, 0.2, 10, 2, DELTA, sampling="shuffle")


@pytest.mark.parametrize("mu0, q, steps, k", [(1.0, 0.02, 1, 1), (2.0, 0.2, 1, 2), (0.5, 0.02, 50, 5)])
def test_with_fixed_batches_one_side_of_the_pair_is_a_single_gaussian_and_meets_the_charge(mu0, q, steps, k):
    """Every other record at −C makes a fixed-size batch's release one Gaussian on one side: the pair then reaches
    the charge, which ± records alone (both sides mixtures) left 1.3–13× above it; never above it."""
    ledger = PrivacyAccountant()
    ledger.step(mu0=mu0, sample_rate=q, num_steps=steps, sampling="fixed", group_size=k)
    charged = ledger.get_epsilon(DELTA)
    pair = subject_pair_epsilon(mu0, q, steps, k, DELTA, sampling="fixed", n_records=1000)
    assert pair <= charged <= 1.15 * pair
