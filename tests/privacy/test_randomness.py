"""The clients' secret randomness: right laws, reproducible only when seeded, secure mode unseedable.

Draws from the secure source are not seeded: every statistical check uses p > 1e-6, so a correct
source fails one in a million runs while a wrong law (another variance, a biased subset) fails always.
"""

import numpy as np
import pytest
import torch
from scipy import stats

from skfedriem.privacy import FixedSizeSampler, PoissonSampler, SecretRandomness, SecureRandomness, SeededRandomness

SOURCES = [lambda: SeededRandomness(np.random.SeedSequence(4)), SecureRandomness]


@pytest.mark.parametrize("make", SOURCES, ids=["seeded", "secure"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_standard_normal_law(make, dtype):
    z = make().standard_normal((200, 100), dtype)
    assert z.dtype == dtype and z.shape == (200, 100)
    sample = z.double().flatten().numpy()
    assert stats.kstest(sample, "norm").pvalue > 1e-6
    assert abs(sample.var() - 1) < 0.06  # 6 sd of the sample variance


@pytest.mark.parametrize("make", SOURCES, ids=["seeded", "secure"])
def test_uniforms_and_subsets(make):
    source = make()
    u = source.uniform(20000)
    assert u.min() >= 0 and u.max() < 1 and stats.kstest(u, "uniform").pvalue > 1e-6
    counts = np.zeros(30)
    for _ in range(3000):
        idx = source.subset(30, 6)
        assert len(set(idx.tolist())) == 6
        counts[idx] += 1
    assert stats.chisquare(counts).pvalue > 1e-6
    assert sorted(source.subset(5, 5).tolist()) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("sampler", [FixedSizeSampler(40, 8), PoissonSampler(40, 8)], ids=repr)
def test_secure_batches_are_uniform(sampler):
    source, counts = SecureRandomness(), np.zeros(40)
    for _ in range(4000):
        counts[sampler.sample(source)] += 1
    assert stats.chisquare(counts).pvalue > 1e-6
    assert counts.sum() == pytest.approx(4000 * 8, rel=0.03)  # 6 sd of the Poisson total


def test_seeded_is_reproducible_and_resumable_secure_is_neither():
    a, b = SeededRandomness(np.random.SeedSequence(1)), SeededRandomness(np.random.SeedSequence(1))
    assert torch.equal(a.standard_normal((5,), torch.float64), b.standard_normal((5,), torch.float64))
    resumed = SecretRandomness.from_bytes(a.to_bytes())
    assert np.array_equal(a.subset(50, 5), resumed.subset(50, 5))
    s = SecureRandomness()
    assert not torch.equal(s.standard_normal((5,), torch.float64), s.standard_normal((5,), torch.float64))
    assert isinstance(SecretRandomness.from_bytes(s.to_bytes()), SecureRandomness)


def test_secure_noise_is_a_sum_of_four_draws():
    """The floating-point defence: each coordinate is (z1 + z2 + z3 + z4) / 2, not one transform's output."""
    source = SecureRandomness()
    calls = []
    draw = source._box_muller
    source._box_muller = lambda size: calls.append(size) or draw(size)
    source.standard_normal((3, 7), torch.float64)
    assert calls == [4 * 21]
