"""Distributed noise's encoding (privacy/mechanisms/discrete.py): grid, rounding bound, shares, modulus, decoding."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from skfedriem.exceptions import InvalidInstructionsError
from skfedriem.privacy.mechanisms.discrete import (DistributedEncoding, _conditional_round, decode_sum, encode_records,
                                        padded_dimension, plan_encoding, rotate, rounding_bound, sum_releases,
                                        unrotate)
from skfedriem.privacy.mechanisms.randomness import SecureRandomness, SeededRandomness


def _source(seed=0):
    return SeededRandomness(np.random.SeedSequence(seed))


def test_padded_dimension_is_the_next_power_of_two():
    assert [padded_dimension(d) for d in (1, 2, 3, 45, 64, 65)] == [1, 2, 4, 64, 64, 128]


def test_rotation_is_orthogonal_and_inverted():
    x = torch.randn(5, 64, dtype=torch.float64)
    y = rotate(x, 11)
    torch.testing.assert_close(y.norm(dim=1), x.norm(dim=1))
    torch.testing.assert_close(unrotate(y, 11), x)
    assert not torch.allclose(rotate(x, 12), y)  # the seed is the rotation


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.floats(0.5, 64.0), st.integers(0, 3), st.integers(0, 2 ** 32 - 1))
def test_no_rounded_record_exceeds_its_bound(dimension, scaled_clip, kind, seed):
    """Records at the clip, spread or concentrated on one coordinate, or half-integers (the rounding's worst case)."""
    n = padded_dimension(dimension)
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((8, n))
    if kind == 1:
        rows = np.zeros((8, n))
        rows[:, 0] = 1.0
    elif kind == 2:
        rows = np.full((8, n), 0.5) + rng.integers(-3, 3, (8, n))
    rows = torch.from_numpy(rows / np.linalg.norm(rows, axis=1, keepdims=True) * scaled_clip)
    bound = rounding_bound(scaled_clip, n)
    rounded = torch.from_numpy(_conditional_round(rows.unsqueeze(0).numpy(), bound, [_source(seed)])[0])
    assert rounded.dtype == torch.int64
    assert (rounded.double().norm(dim=1) <= bound).all()
    assert ((rounded.double() - rows).abs() < 1).all()  # a floor or a ceiling, never further


def test_rounding_is_unbiased_where_the_bound_rarely_binds():
    """Randomized rounding is unbiased; conditioning on the bound biases it only where the bound binds (a record
    at the grid's scale), which the planned grid (s C = 16 √n) keeps rare."""
    rows = torch.randn(4000, 64, dtype=torch.float64)
    rows = rows / rows.norm(dim=1, keepdim=True) * 16 * 8  # at the clip, on the planned grid (n = 64)
    rounded = torch.from_numpy(_conditional_round(rows.unsqueeze(0).numpy(), rounding_bound(128.0, 64), [_source(1)])[0]).double()
    assert abs(float((rounded - rows).mean())) < 0.005
    assert float((rounded.norm(dim=1) / rows.norm(dim=1)).mean()) < 1.001


def test_a_record_that_never_passes_is_sent_as_zero():
    rows = torch.full((3, 4), 0.5, dtype=torch.float64)  # every rounding has norm >= 1 > 0.5
    assert (_conditional_round(rows.unsqueeze(0).numpy(), 0.5, [_source()]) == 0).all()


def _encoding(share=1e-12, bits=30, dimension=45, clients=4, colluders=1, seed=3):
    return DistributedEncoding(dimension, 64.0, bits, share, clients, colluders, seed)


def test_encode_sum_decode_round_trips():
    encoding = _encoding()
    rng = np.random.default_rng(0)
    clients = [torch.from_numpy(rng.standard_normal((10, 45)) / 10) for _ in range(4)]
    releases = [encode_records(rows, encoding, 1.0, _source(k)) for k, rows in enumerate(clients)]
    assert all(r.dtype == np.int64 and r.min() >= 0 and r.max() < 2 ** 30 for r in releases)
    decoded, wrapped = decode_sum(sum_releases(releases, encoding), encoding)
    truth = sum(rows.sum(0) for rows in clients)
    assert not wrapped
    # each of the 40 records rounded by at most 1 per coordinate, on a grid of 1 / 64
    assert float((decoded - truth).norm()) <= 40 * math.sqrt(64) / 64
    assert float((decoded - truth).norm()) < 0.2 * float(truth.norm())


def test_a_wrapped_sum_is_detected():
    """4 clients × 20 aligned records of norm 1 on a grid of 1/64: ±4 · 20 · 64 / √64 = ±640 a coordinate, past
    2^10 / 2 = 512, so it wraps to ∓384, beyond the band 2^10 / 4 = 256: detected."""
    encoding = _encoding(bits=10)
    rows = torch.zeros(20, 45, dtype=torch.float64)
    rows[:, 0] = 1.0
    releases = [encode_records(rows, encoding, 1.0, _source(k)) for k in range(4)]
    total = sum_releases(releases, encoding)
    assert (np.abs(np.mod(total + 512, 1024) - 512) == 384).all()  # every coordinate wrapped
    _, wrapped = decode_sum(total, encoding)
    assert wrapped
    _, wrapped = decode_sum(sum_releases(releases, _encoding(bits=20)), _encoding(bits=20))
    assert not wrapped


def test_the_honest_shares_sum_to_the_noise_the_budget_needs():
    """χ² of the K − t honest releases' sum (no records) against Sk(V/2, V/2), V the plan's central variance: it
    fails when the shares are sized by K (too little noise), the mutation the audit names."""
    clients, colluders, variance = 10, 3, 24.0
    encoding = plan_encoding(4000, 1.0, 100, clients, colluders, lambda l2, l1: variance)
    assert math.isclose(encoding.central_variance, variance)
    broken = DistributedEncoding(encoding.dimension, encoding.scale, encoding.bits, variance / (2 * clients),
                                 clients, colluders)
    zeros = torch.zeros(1, 4000, dtype=torch.float64)

    def p_value(enc):
        honest = [encode_records(zeros, enc, 1.0, _source(k)) for k in range(clients - colluders)]
        m = enc.modulus
        return _chi_square(np.mod(sum_releases(honest, enc) + m // 2, m) - m // 2, variance)

    assert p_value(encoding) > 1e-3
    assert p_value(broken) < 1e-6


def test_secure_randomness_draws_shares():
    share = SecureRandomness().poisson(50.0, 20000) - SecureRandomness().poisson(50.0, 20000)
    assert share.dtype == np.int64
    assert abs(share.var() - 100.0) < 5.0


def test_the_encoding_refuses_what_it_cannot_run():
    with pytest.raises(InvalidInstructionsError, match="colluders"):
        DistributedEncoding(10, 1.0, 20, 1.0, 3, 3)
    with pytest.raises(InvalidInstructionsError, match="share"):
        DistributedEncoding(10, 1.0, 20, 0.0, 3, 1)
    with pytest.raises(InvalidInstructionsError, match="bits"):
        DistributedEncoding(10, 1.0, 60, 1.0, 3, 1)
    with pytest.raises(InvalidInstructionsError, match="integer"):
        DistributedEncoding(10, 1.0, 20.5, 1.0, 3, 1)


def test_the_modulus_holds_the_planned_round():
    """A round of aligned records at the clip and the planned noise stays within the detection band."""
    encoding = plan_encoding(45, 1.0, 4 * 30, 4, 1, lambda l2, l1: 4 * l2 ** 2).with_seed(5)
    rows = torch.zeros(30, 45, dtype=torch.float64)
    rows[:, :] = 1 / math.sqrt(45)
    releases = [encode_records(rows, encoding, 1.0, _source(k)) for k in range(4)]
    decoded, wrapped = decode_sum(sum_releases(releases, encoding), encoding)
    assert not wrapped
    assert float((decoded - 120 * rows[0]).norm()) < 0.5 * 120


def test_clients_encoded_together_release_what_each_releases_alone():
    from skfedriem.privacy.mechanisms.discrete import encode_clients

    encoding = plan_encoding(45, 1.0, 120, 4, 1, lambda l2, l1: 4 * l2 ** 2).with_seed(2)
    rows = torch.randn(4, 30, 45, dtype=torch.float64) / 7
    together = encode_clients(rows, encoding, 1.0, [_source(k) for k in range(4)])
    for k in range(4):
        np.testing.assert_array_equal(together[k], encode_records(rows[k], encoding, 1.0, _source(k)))


def _variance_z(centred: np.ndarray, variance: float) -> float:
    """(sample variance − V) in standard errors of a Skellam's: Var(X²) = 2V² + V (its excess kurtosis is 1 / V)."""
    spread = math.sqrt((2 * variance ** 2 + variance) / centred.size)
    return (np.mean(centred.astype(np.float64) ** 2) - variance) / spread


def _chi_square(centred: np.ndarray, variance: float) -> float:
    """The p-value of χ² of ``centred`` against Sk(V/2, V/2) (tails pooled)."""
    values, counts = np.unique(centred, return_counts=True)
    support = np.arange(-25, 26)
    expected = stats.skellam.pmf(support, variance / 2, variance / 2) * centred.size
    observed = np.array([counts[values == v].sum() for v in support])
    tails = centred.size - observed.sum(), centred.size - expected.sum()
    return stats.chisquare(np.append(observed, tails[0]), np.append(expected, tails[1])).pvalue


@pytest.mark.parametrize("dropped", [0, 1, 2, 3])
def test_with_a_dropout_allowance_the_honest_survivors_carry_exactly_the_noise(dropped):
    """K = 7, t = 1, d = 2: each client adds λ_2 and keeps its excess apart; with ``dropped`` clients silent (up to
    t + d = 3), the excess above the round's level min(dropped, d) taken out of the answering clients' sum, any
    K − t − level of them (the honest ones, the others colluding) carry Sk(V/2, V/2). It fails when nothing is
    taken out (too much noise) and when the server takes out down to level 0 whatever dropped (too little)."""
    from skfedriem.privacy.mechanisms.discrete import remove_excess

    clients, colluders, dropouts, variance = 7, 1, 2, 24.0
    encoding = plan_encoding(4000, 1.0, 100, clients, colluders, lambda l2, l1: variance, dropouts=dropouts)
    zeros = torch.zeros(1, 4000, dtype=torch.float64)
    answering = [encode_records(zeros, encoding, 1.0, _source(k)) for k in range(clients - dropped)]
    assert all(r.shape == (1 + dropouts, encoding.length) for r in answering)
    level = encoding.level(dropped)
    honest = answering[:clients - colluders - level]  # the rest of the answers are the colluders'
    m = encoding.modulus

    def noise(declared):
        total = sum_releases([r[0] for r in honest], encoding)
        return np.mod(remove_excess(total, [r[1:] for r in honest], encoding, declared) + m // 2, m) - m // 2

    assert _chi_square(noise(dropped), variance) > 1e-3 and abs(_variance_z(noise(dropped), variance)) < 4
    if level < dropouts:  # the excess left in: more noise than the budget needs
        assert _variance_z(noise(clients), variance) > 6
    if level > 0:  # taken out down to level 0 when some dropped: too little
        assert _variance_z(noise(0), variance) < -6


def test_the_deviating_variance_is_the_worst_case_over_the_dropped():
    """min over j ≤ t + d declared dropped, t colluders among the rest, of the honest shares' noise (at least one
    share) equals deviating_variance, for K, t, d on a grid; at d = 0 it is 2λ max(K − 2t, 1)."""
    for clients in range(2, 12):
        for colluders in range(clients):
            for dropouts in range(clients - colluders):
                encoding = DistributedEncoding(8, 1.0, 20, 3.0, clients, colluders, dropouts=dropouts)
                worst = min(2 * encoding.level_share(encoding.level(j)) * max(clients - j - colluders, 1)
                            for j in range(colluders + dropouts + 1))
                assert encoding.deviating_variance == pytest.approx(worst)
                if dropouts == 0:
                    assert encoding.deviating_variance == pytest.approx(6.0 * max(clients - 2 * colluders, 1))


def test_an_announced_round_starts_at_its_level():
    """Where the sites left out are announced before the release (a deployed round's lists), a client draws
    Sk(λ_a, λ_a), a = min(announced, d), at once and keeps apart only the components above a: with nothing more
    missing, the K − t − a honest shares carry Sk(V/2, V/2); with a = d nothing is kept apart."""
    from skfedriem.privacy.mechanisms.discrete import remove_excess

    encoding = plan_encoding(4000, 1.0, 100, 7, 1, lambda l2, l1: 24.0, dropouts=2)
    zeros = torch.zeros(1, 4000, dtype=torch.float64)
    m = encoding.modulus
    for announced, honest in ((0, 6), (1, 5), (2, 4), (3, 4)):
        sized = dataclasses.replace(encoding, announced=announced)
        releases = [encode_records(zeros, sized, 1.0, _source(k)) for k in range(honest)]
        kept = 2 - min(announced, 2)
        assert releases[0].shape == ((1 + kept, sized.length) if kept else (sized.length,))
        if kept:
            total = remove_excess(sum_releases([r[0] for r in releases], sized), [r[1:] for r in releases], sized,
                                  announced)
        else:
            total = sum_releases(releases, sized)
        assert abs(_variance_z(np.mod(total + m // 2, m) - m // 2, 24.0)) < 4


def test_an_encoding_refuses_an_allowance_that_leaves_no_honest_share():
    with pytest.raises(InvalidInstructionsError, match="dropouts < clients - colluders"):
        DistributedEncoding(8, 1.0, 20, 3.0, 5, 2, dropouts=3)


def test_the_kept_components_never_fall_below_their_levels_share_in_exact_arithmetic():
    """What a client keeps at level L, Sk(λ_a) and the components a + 1 … L, has rate at least λ (K − t) / (K − t − L)
    in exact arithmetic (floats' roundings never shave the noise), for K, t, d, a on a grid."""
    from fractions import Fraction

    for clients in range(2, 12):
        for colluders in range(clients):
            for dropouts in range(clients - colluders):
                for announced in (None, *range(dropouts + 1)):
                    encoding = DistributedEncoding(8, 1.0, 20, 3.1, clients, colluders, dropouts=dropouts,
                                                   announced=announced)
                    a, honest = encoding.base_level, clients - colluders
                    kept = Fraction(encoding.round_share)
                    for level, rate in enumerate(encoding.excess_rates, start=a + 1):
                        kept += Fraction(rate)
                        assert kept >= Fraction(3.1) * honest / (honest - level)
