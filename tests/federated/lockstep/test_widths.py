"""The public width of a Poisson stack, and the clients' secret batches laid out in it."""

import math

import numpy as np
import pytest
from scipy.stats import binom

from skfedriem.federated.lockstep.widths import padded_picks, poisson_width


def _expected_passes(sizes, rates, width):
    """E[max(1, ⌈max_k b_k / W⌉)] summed over the law of max_k b_k, by its probabilities directly."""
    largest = max(sizes)
    below = np.array([math.prod(binom.cdf(x, m, q) for m, q in zip(sizes, rates)) for x in range(largest + 1)])
    mass = np.diff(below, prepend=0.0)  # P(max_k b_k = x)
    return float(sum(p * max(1, math.ceil(x / width)) for x, p in enumerate(mass)))


@pytest.mark.parametrize("sizes, rates", [((30, 41, 36), (10 / 30, 10 / 41, 10 / 36)), ((45,) * 5, (16 / 45,) * 5),
                                          ((12, 200), (0.5, 6 / 200))])
def test_the_width_minimises_the_expected_records_a_step_computes(sizes, rates):
    overhead = float(np.dot(sizes, rates)) / len(sizes)
    costs = {w: (w + overhead) * _expected_passes(sizes, rates, w) for w in range(1, max(sizes) + 1)}
    chosen = poisson_width(sizes, rates)
    assert costs[chosen] <= min(costs.values()) * (1 + 1e-9)
    assert 1 <= chosen <= max(sizes)


def test_the_expected_passes_are_those_of_drawn_batches():
    """The law the width is planned for is the Poisson sampler's: simulated steps take as many passes."""
    sizes, rates, width = (45,) * 20, (16 / 45,) * 20, 22
    rng = np.random.default_rng(0)
    drawn = rng.binomial(sizes, rates, size=(20000, len(sizes))).max(axis=1)
    simulated = np.maximum(1, np.ceil(drawn / width)).mean()
    assert simulated == pytest.approx(_expected_passes(sizes, rates, width), abs=0.01)


def test_more_clients_widen_the_stack_and_every_record_sampled_takes_all():
    assert poisson_width((45,) * 10, (16 / 45,) * 10) <= poisson_width((45,) * 1000, (16 / 45,) * 1000)
    assert poisson_width((10, 7), (1.0, 1.0)) == 10
    assert poisson_width((1300,) * 1000, (64 / 1300,) * 1000) > 64  # scipy's NaN where the cdf underflows


def test_rows_hold_each_clients_records_first_then_copies_of_one_of_them():
    picks = [np.array([4, 9, 11]), np.array([], dtype=np.int64), np.arange(7)]
    rows, sizes = padded_picks(picks, 3)
    assert sizes.tolist() == [3, 0, 7]
    assert all(len(row) == 9 for row in rows)  # ⌈7 / 3⌉ passes of 3
    assert rows[0].tolist() == [4, 9, 11] + [4] * 6 and rows[1].tolist() == [0] * 9
    assert rows[2][:7].tolist() == list(range(7))
    rows, sizes = padded_picks([np.array([], dtype=np.int64)] * 2, 4)  # nobody drew: one pass, all padding
    assert [row.tolist() for row in rows] == [[0] * 4] * 2 and sizes.tolist() == [0, 0]
