import numpy as np
import pytest
from scipy import stats

from skfedriem.privacy import FixedSizeSampler, PoissonSampler, make_sampler


def test_fixed_batches_have_exactly_b_distinct_records(rng):
    s = FixedSizeSampler(50, 7)
    for _ in range(100):
        idx = s.sample(rng)
        assert len(idx) == 7 and len(set(idx.tolist())) == 7
        assert idx.min() >= 0 and idx.max() < 50
    assert s.sample_rate == pytest.approx(7 / 50) and s.denominator == 7


@pytest.mark.parametrize("sampler", [FixedSizeSampler(40, 8), PoissonSampler(40, 8)], ids=repr)
def test_inclusion_is_uniform(sampler, rng):
    steps = 5000
    counts = np.zeros(40)
    for _ in range(steps):
        counts[sampler.sample(rng)] += 1
    expected = steps * 8 / 40
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert stats.chi2.sf(chi2, df=39) > 1e-3


@pytest.mark.parametrize("sampler", [FixedSizeSampler(30, 6), PoissonSampler(30, 6)], ids=repr)
def test_batches_are_independent_across_steps(sampler, rng):
    """Fresh sampling at every step: P(i in step t and in step t+1) = q², unlike an epoch shuffle."""
    steps, q = 6000, 6 / 30
    both = np.zeros((2, 2))  # contingency of record 0's membership in consecutive steps
    previous = 0 in sampler.sample(rng)
    for _ in range(steps):
        current = 0 in sampler.sample(rng)
        both[int(previous), int(current)] += 1
        previous = current
    _, p_value, _, _ = stats.chi2_contingency(both)
    assert p_value > 1e-3
    assert both[1, 1] / steps == pytest.approx(q * q, abs=0.015)


def test_epoch_shuffle_would_fail_the_independence_check(rng):
    """The check above has power: batches of one shuffled pass are dependent."""
    perm_batches = []
    for _ in range(1000):
        perm = rng.permutation(30)
        perm_batches += [perm[i : i + 6] for i in range(0, 30, 6)]
    both = np.zeros((2, 2))
    for a, b in zip(perm_batches[:-1], perm_batches[1:]):
        both[int(0 in a), int(0 in b)] += 1
    assert stats.chi2_contingency(both)[1] < 1e-3


def test_poisson_batch_size_is_binomial(rng):
    s = PoissonSampler(100, 10)
    sizes = np.array([len(s.sample(rng)) for _ in range(4000)])
    assert sizes.mean() == pytest.approx(10, abs=0.2)
    assert sizes.var() == pytest.approx(100 * 0.1 * 0.9, rel=0.1)
    assert s.denominator == 10  # the expected size, not the realised one


def test_samplers_leave_global_rng_alone(rng):
    state = np.random.get_state()[1].copy()
    FixedSizeSampler(10, 3).sample(rng)
    PoissonSampler(10, 3).sample(rng)
    assert (np.random.get_state()[1] == state).all()


def test_bad_sampler_arguments():
    with pytest.raises(ValueError, match="'sampling'.*Got 'epoch'"):
        make_sampler("epoch", 10, 2)
    with pytest.raises(ValueError, match="'batch_size'.*Got 11"):
        make_sampler("fixed", 10, 11)
