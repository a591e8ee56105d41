"""Reading a privacy-loss distribution fast: the library's values, without its Python loops."""

import numpy as np
import pytest

from skfedriem.privacy.accounting.ledger import _steps_pld
from skfedriem.privacy.accounting.pld_reading import deltas_for_epsilons, epsilon_for_delta

CASES = [(0.5, 0.05, 200), (2.0, 1.0, 3), (0.05, 0.01, 5000), (8.0, 0.5, 10)]


@pytest.mark.parametrize("sampling", ["fixed", "poisson"])
@pytest.mark.parametrize("mu0, q, steps", CASES)
def test_the_vectorised_epsilon_equals_dp_accountings_loop(sampling, mu0, q, steps):
    pld = _steps_pld(mu0, q, sampling, steps, 1e-3)
    for delta in (1e-9, 1e-5, 1e-2, 0.5):
        assert epsilon_for_delta(pld, delta) == pytest.approx(pld.get_epsilon_for_delta(delta), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("sampling", ["fixed", "poisson"])
@pytest.mark.parametrize("mu0, q, steps", CASES)
def test_the_vectorised_deltas_are_dp_accountings_bit_for_bit(sampling, mu0, q, steps):
    """Group privacy reads 1500 points of a curve; they are the library's own values (same sums, same order)."""
    pld = _steps_pld(mu0, q, sampling, steps, 1e-3)
    epsilons = np.concatenate([[-1.0, 0.0], np.linspace(1e-3, 60.0, 1500), [np.inf]])
    assert np.array_equal(deltas_for_epsilons(pld, epsilons), np.asarray(pld.get_delta_for_epsilon(epsilons)))
    for bad in (np.array([1.0, 0.5]), np.array([0.5, np.nan])):
        with pytest.raises(ValueError, match="ascending"):
            deltas_for_epsilons(pld, bad)
