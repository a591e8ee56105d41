"""The audit's statistics: Clopper–Pearson, the certified family at q = 1 is Gaussian DP, bounds that can fail."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from skfedriem.audit import audit_scores, clopper_pearson_upper, family_tradeoff, mu0_lower_bound
from skfedriem.privacy import gdp_epsilon


def test_clopper_pearson_upper_bounds():
    assert clopper_pearson_upper(0, 100, 0.95) == pytest.approx(1 - 0.05 ** (1 / 100))
    assert clopper_pearson_upper(100, 100, 0.95) == 1.0
    assert 0.5 < clopper_pearson_upper(50, 100, 0.95) < 0.6


@pytest.mark.parametrize("mu0, steps", [(0.5, 1), (0.3, 10)])
def test_full_batch_family_is_gaussian_dp(mu0, steps):
    mu = mu0 * math.sqrt(steps)
    for alpha in (0.01, 0.1, 0.3):
        exact = norm.cdf(norm.ppf(1 - alpha) - mu)
        assert exact - 1e-4 <= family_tradeoff(alpha, mu0, 1.0, steps, "fixed") <= exact  # never above: cautious
    # a test with both errors at 0.2 refutes exactly the GDP parameters below 2 Φ⁻¹(0.8)
    assert mu0_lower_bound(0.2, 0.2, 1.0, steps, "fixed") * math.sqrt(steps) == pytest.approx(2 * norm.ppf(0.8),
                                                                                           rel=1e-3)
    assert mu0_lower_bound(0.5, 0.5, 1.0, steps, "fixed") == 0.0  # a coin flip shows nothing


def test_scores_of_a_gaussian_mechanism_give_bounds_below_its_epsilon_and_above_a_weaker_claim():
    rng = np.random.default_rng(0)
    mu = 2.0  # the scores of a 2-GDP mechanism: N(±mu/2, 1)
    d, d_prime = rng.normal(mu / 2, 1, 4000), rng.normal(-mu / 2, 1, 4000)
    honest = audit_scores(d, d_prime, mu0=mu, sample_rate=1.0, steps=1, sampling="fixed", delta=1e-5,
                          epsilon_certified=gdp_epsilon(mu, 1e-5), threshold=0.0)
    assert not honest.violated and 0.8 * mu < honest.mu0_lower_bound < mu
    assert honest.epsilon_lower_bound_any < honest.epsilon_lower_bound < honest.epsilon_certified
    claimed = audit_scores(d, d_prime, mu0=1.0, sample_rate=1.0, steps=1, sampling="fixed", delta=1e-5,
                           epsilon_certified=gdp_epsilon(1.0, 1e-5), threshold=0.0)
    assert claimed.violated  # a claim of 1-GDP for a 2-GDP mechanism is caught
    assert honest.verdict_bound is None and honest.to_dict()["verdict_bound"] is None
    # which bound the verdict rests on: the family's alone here (the distribution-free bound, 1.5, stays below the
    # claimed 4.4: 4000 runs cannot refute it for every mechanism)
    assert claimed.epsilon_lower_bound_any < claimed.epsilon_certified < claimed.epsilon_lower_bound
    assert claimed.verdict_bound == "certified family"
    nothing = audit_scores(d, d_prime, mu0=0.05, sample_rate=1.0, steps=1, sampling="fixed", delta=1e-5,
                           epsilon_certified=0.01, threshold=0.0)  # a claim no mechanism this loud could meet
    assert nothing.epsilon_lower_bound_any > 0.01 and nothing.verdict_bound == "distribution-free"
    split = audit_scores(d, d_prime, mu0=mu, sample_rate=1.0, steps=1, sampling="fixed", delta=1e-5,
                         epsilon_certified=gdp_epsilon(mu, 1e-5))
    assert split.n_runs == 2000 and abs(split.threshold) < 0.2  # chosen on one half, counted on the other
