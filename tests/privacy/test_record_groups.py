"""A person's participation in a record-level Poisson run: the sampled-group accountant against a second
implementation, group privacy and the exact single step."""

import math

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import binom, norm

from skfedriem.privacy import PrivacyAccountant, group_epsilon
from skfedriem.privacy.chaining import chained_epsilon
from skfedriem.privacy.record_groups import _sensitivity_mixture, group_removal_pld

from .prv_reference import GroupRemoval, prv_epsilon

DELTA = 1e-5


def poisson_ledger(mu0: float, q: float, steps: int) -> PrivacyAccountant:
    ledger = PrivacyAccountant()
    ledger.step(mu0=mu0, sample_rate=q, num_steps=steps, sampling="poisson")
    return ledger


def exact_single_step_delta(mu0: float, q: float, k: int, eps: float) -> float:
    """max over both directions of the hockey-stick divergence between Σ_j P(J = j) N(j mu0/2, 1) and N(0, 1), by
    quadrature."""
    counts, probs = np.arange(k + 1), binom.pmf(np.arange(k + 1), k, q)

    def mixture(x):
        return float((probs * norm.pdf(x - counts * mu0 / 2)).sum())

    def remove(x):
        return max(0.0, mixture(x) - math.exp(eps) * norm.pdf(x))

    def add(x):
        return max(0.0, norm.pdf(x) - math.exp(eps) * mixture(x))

    top = k * mu0 / 2 + 12
    return max(integrate.quad(f, -12, top, limit=400, points=[0.0, mu0 / 2])[0] for f in (remove, add))


@pytest.mark.parametrize("mu0, q, k", [(1.0, 0.2, 5), (2.0, 0.05, 10)])
def test_one_step_is_the_exact_mixture_up_to_its_grid(mu0, q, k):
    """The certified δ(ε) of one step is never below the exact hockey-stick divergence, and close to it."""
    pld = group_removal_pld(mu0, q, k, 1)
    for eps in (0.1, 0.5, 1.0, 2.0):
        exact = exact_single_step_delta(mu0, q, k, eps)
        certified = float(pld.get_delta_for_epsilon(eps))
        assert exact * (1 - 1e-6) <= certified <= exact * 1.02 + 1e-9  # quadrature agrees to about 1e-9


@pytest.mark.parametrize("mu0, q, k, steps", [(0.5, 0.05, 4, 200), (1.0, 0.02, 8, 100)])
def test_composed_steps_lie_within_prv_accountants_bounds(mu0, q, k, steps):
    """A second implementation: the same mixture's privacy-loss variable in closed form, composed by
    prv-accountant (its lower and upper bounds, both directions)."""
    ours = group_epsilon(poisson_ledger(mu0, q, steps), k, DELTA, relation="add_or_remove")
    bounds = [prv_epsilon(GroupRemoval(q, mu0, k, direction), steps, DELTA) for direction in ("remove", "add")]
    lower, upper = max(b[0] for b in bounds), max(b[2] for b in bounds)
    assert lower - 0.01 <= ours <= upper + 0.02


@pytest.mark.parametrize("mu0, q, steps, k", [(0.2, 0.1, 200, 10), (1.0, 0.001, 100, 100)])
def test_never_above_group_privacy_of_one_added_record(mu0, q, steps, k):
    """Adding k records one at a time is k links of the one-record curve: group privacy bounds the sampled-group
    accountant from above, and is far looser where the group is rarely sampled whole."""
    ledger = poisson_ledger(mu0, q, steps)
    ours = group_epsilon(ledger, k, DELTA, relation="add_or_remove")
    by_links = chained_epsilon(group_removal_pld(mu0, q, 1, steps), k, DELTA)
    assert ours <= by_links + 1e-9
    assert ours < group_epsilon(ledger, k, DELTA)  # participation is cheaper than substitution here


def test_one_record_added_or_removed_is_the_subsampled_gaussian():
    """k = 1 is the Poisson subsampled Gaussian for adding or removing a record (prv-accountant's own class)."""
    from .prv_reference import prv_poisson_add_remove_epsilon

    mu0, q, steps = 0.8, 0.05, 300
    ours = group_epsilon(poisson_ledger(mu0, q, steps), 1, DELTA, relation="add_or_remove")
    lower, _, upper = prv_poisson_add_remove_epsilon(mu0 / 2, q, steps, DELTA)
    assert lower - 0.01 <= ours <= upper + 0.01


def test_a_negligible_tail_is_merged_upwards():
    """Counts beyond a 1e-25 tail go to k (a larger sensitivity dominates): the mixture keeps its mass and its
    largest shift."""
    sensitivities, probs = _sensitivity_mixture(0.5, 0.001, 1000)
    assert len(sensitivities) < 30 and sensitivities[-1] == 1000 * 0.25 and math.isclose(sum(probs), 1.0)
    assert _sensitivity_mixture(0.5, 0.5, 4) == ([0.0, 0.25, 0.5, 0.75, 1.0], list(binom.pmf(range(5), 4, 0.5)))


def test_a_fixed_size_ledger_has_no_participation_bound():
    ledger = PrivacyAccountant()
    ledger.step(mu0=0.5, sample_rate=0.1, num_steps=10)
    with pytest.raises(ValueError, match="add_or_remove.*fixed"):
        group_epsilon(ledger, 3, DELTA, relation="add_or_remove")
    with pytest.raises(ValueError, match="relation"):
        group_epsilon(ledger, 3, DELTA, relation="replace")


def test_two_links_of_the_sampled_group_are_above_group_privacy_for_substitution():
    """Why substitution keeps group privacy: the sampled-group accountant read as remove-then-add costs more."""
    mu0, q, steps, k = 0.2, 0.1, 200, 10
    two_links = chained_epsilon(group_removal_pld(mu0, q, k, steps), 2, DELTA)
    assert two_links > group_epsilon(poisson_ledger(mu0, q, steps), k, DELTA)
