"""The public width of a stack of clients that sample by Poisson, and their secret batches laid out in it.

Under Poisson sampling client k's batch size b_k ~ Binomial(m_k, q_k) is
secret. Were a stack as wide as the largest b_k, client k's release could
depend on the other clients' secrets through rounding in batched kernels at
that width. So the width W is computed from public quantities only (each
client's m_k and q_k, :func:`poisson_width`), every client's batch is padded
to W with weight-0 copies of one of its own records, and a client whose batch
is larger takes further passes of the same width, in which the others' rows
are all padding and left out of their sums (:func:`padded_picks`). Client
k's release then depends on its own records, its own draws and W, nothing
else. A step takes max_k ⌈b_k / W⌉ passes: only the wall clock of the
simulation sees it, as a lone client's time grows with its own b_k.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import binom

__all__ = ["padded_picks", "poisson_width"]


@functools.lru_cache(maxsize=64)
def poisson_width(sizes: tuple[int, ...], rates: tuple[float, ...]) -> int:
    """W minimising the expected records a step computes, (W + b̄) · E[passes], b̄ a pass's fixed cost.

    A step of K clients takes max(1, ⌈max_k b_k / W⌉) passes of width W, with
    b_k ~ Binomial(m_k, q_k) independent; so E[passes] = 1 + Σ_{p ≥ 1}
    P(max_k b_k > pW), and P(max_k b_k ≤ x) = Π_k F_k(x). A pass's fixed cost
    (Python, kernel launches, the optimiser's bookkeeping) is counted as b̄,
    the mean expected batch Σ m_k q_k / K, records' worth: a narrow stack
    then takes a second pass about as rarely as it pays for it. Only public
    quantities enter: W is the same whatever the clients draw.

    Parameters
    ----------
    sizes : tuple of int
        Each client's m_k (at least 1).
    rates : tuple of float
        Each client's sampling rate q_k in (0, 1].

    Returns
    -------
    int
        W, between 1 and max_k m_k.

    Examples
    --------
    >>> poisson_width((45,) * 100, (16 / 45,) * 100)
    27
    >>> poisson_width((10,), (1.0,))  # every record at every step
    10
    """
    largest = max(sizes)
    x = np.arange(largest + 1)
    log_below = np.zeros(largest + 1)  # log P(max_k b_k <= x)
    pairs, counts = np.unique(np.array([sizes, rates]).T, axis=0, return_counts=True)
    for (m, q), count in zip(pairs, counts):
        log_cdf = binom.logcdf(x, int(m), q)
        log_below += count * np.where(np.isnan(log_cdf), -np.inf, log_cdf)  # scipy's NaN where the cdf underflows
    above = -np.expm1(log_below)  # P(max_k b_k > x)
    overhead = float(np.dot(sizes, rates)) / len(sizes)
    costs = [(width + overhead) * (1.0 + above[width:largest:width].sum()) for width in range(1, largest + 1)]
    return int(np.argmin(costs)) + 1


def padded_picks(picks: Sequence[np.ndarray], width: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Each client's drawn indices padded to the step's passes of ``width``, and its number of real ones.

    Client k's row holds its b_k drawn indices, then copies of its first
    drawn index (of index 0 for an empty batch), up to P·W with P =
    max(1, ⌈max_k b_k / W⌉): pass p is the columns [pW, (p + 1)W).

    Parameters
    ----------
    picks : sequence of numpy.ndarray of int
        Each client's drawn indices.
    width : int
        W, from :func:`poisson_width`.

    Returns
    -------
    rows : list of numpy.ndarray of int
        Each of length P·W.
    sizes : numpy.ndarray of int
        b_k.

    Examples
    --------
    >>> rows, sizes = padded_picks([np.array([3, 5]), np.array([], dtype=int), np.array([0, 1, 2, 4, 6])], 3)
    >>> [row.tolist() for row in rows], sizes.tolist()
    ([[3, 5, 3, 3, 3, 3], [0, 0, 0, 0, 0, 0], [0, 1, 2, 4, 6, 0]], [2, 0, 5])
    """
    sizes = np.array([len(p) for p in picks], dtype=np.int64)
    total = width * max(1, math.ceil(int(sizes.max(initial=0)) / width))
    rows = [np.concatenate([p, np.full(total - len(p), p[0] if len(p) else 0, dtype=np.int64)]).astype(np.int64)
            for p in picks]
    return rows, sizes
