"""Guarantees for datasets several neighbour steps apart, from a mechanism's composed privacy curve.

If a mechanism is f-DP for neighbouring datasets, two datasets joined by a
chain of k neighbour steps are g_k-distinguishable at most, with

    g_k = 1 − (1 − f)^{∘k}

(Dong, Roth & Su 2022, Gaussian differential privacy, Theorem 2.14; a
chain's links may use different neighbour relations as long as f bounds
each). :func:`chained_epsilon` computes g_k pointwise from a privacy-loss
distribution's certified curve and reads its ε at δ. Every approximation is
on the safe side: f is bounded from below by finitely many of its (ε, δ)
supporting lines, each line taking the larger δ of the curve's two
directions, 1 − f is iterated exactly at each point, and the conversion
back to (ε, δ) takes each grid cell's worst corner. The generic
(kε, k e^{(k−1)ε} δ) lemma over the same curve is also computed, and the
smaller of the two returned. Written here because dp-accounting composes
privacy-loss distributions but has no functional (group) composition.
"""

from __future__ import annotations

import math

import numpy as np

from ..._utils.compat import dense_pmfs
from .pld_reading import deltas_for_epsilons, epsilon_for_delta
from .subsampled_gaussian import MIN_DELTA

__all__ = ["chained_epsilon"]

#: Supporting lines of the run's tradeoff function, and points where 1 − f is iterated.
_N_LINES, _N_POINTS = 1500, 2500
#: The smallest type I error the group's tradeoff curve is followed from (the grid's first cell starts at 0).
_SMALLEST_ALPHA = 1e-30
#: The largest ε of a supporting line: e^ε must stay finite in double precision.
_LARGEST_LINE = 700.0


def chained_epsilon(composed, links: int, delta: float) -> float:
    """Certified ε at ``delta`` for two datasets ``links`` neighbour steps apart, of a mechanism whose neighbours'
    privacy-loss distribution is ``composed``.

    Parameters
    ----------
    composed : dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution
        The mechanism's (composed) privacy-loss distribution for one link.
    links : int
        k >= 1.
    delta : float

    Returns
    -------
    float
        An upper bound; inf where the curve (followed down to its rounding error, δ ≈ 1e-14) certifies nothing at
        ``delta``.
    """
    chained = _tradeoff_group_epsilon(composed, links, delta)
    # the lemma's ε is k ε(δ') at some δ' < δ, at least k ε(δ): where that is above the chain, it cannot be smaller
    if math.isfinite(chained) and links * float(composed.get_epsilon_for_delta(delta)) >= chained:
        return chained
    return min(chained, _lemma_group_epsilon(composed, links, delta))


def _tradeoff_group_epsilon(composed, group_size: int, delta: float) -> float:
    """ε at δ of 1 − (1 − f)^{∘k} (module docstring), inf where the grid certifies nothing."""
    lines = _supporting_lines(composed)
    if lines is None:
        return math.inf
    envelope = _LowerBound(*lines)
    alphas = np.concatenate([[0.0], np.logspace(math.log10(_SMALLEST_ALPHA), 0.0, _N_POINTS)])
    reached = alphas
    for _ in range(group_size):
        reached = envelope.one_minus_f(reached)
        # 1 − g only grows with k: once its first cell alone exceeds δ (or a value is not a number), no ε holds
        if not (reached[1] <= delta and np.isfinite(reached).all()):
            return math.inf
    return _epsilon_at(alphas, reached, delta)


def _lemma_group_epsilon(composed, group_size: int, delta: float) -> float:
    """The generic lemma's ε: the least k ε(δ') over the run's curve with k e^{(k−1) ε(δ')} δ' ≤ δ (Dwork & Roth,
    2014, Theorem 2.2). Also an upper bound, and the tighter one where the tradeoff grid runs out.

    The search over 40 δ' reads the curve fast (:func:`~skfedriem.privacy.accounting.pld_reading.epsilon_for_delta`); the
    value returned is the library's own ε at the best δ', which must meet the lemma's condition itself."""
    _, error = _curve_error(composed)
    record_deltas = np.logspace(math.log10(MIN_DELTA), math.log10(delta / group_size), 40)
    record_deltas = record_deltas[record_deltas > 2 * error]
    # each ε is read at δ' less the curve's error, so it is certified at δ' itself
    fast = np.array([epsilon_for_delta(composed, float(d) - error) for d in record_deltas])
    for i in np.argsort(group_size * fast, kind="stable"):
        if not _meets_lemma(fast[i], group_size, record_deltas[i], delta):
            continue
        eps = float(composed.get_epsilon_for_delta(float(record_deltas[i]) - error))
        if _meets_lemma(eps, group_size, record_deltas[i], delta):
            return group_size * eps
    return math.inf


def _meets_lemma(eps: float, group_size: int, record_delta: float, delta: float) -> bool:
    """Whether (ε, δ') gives groups of k the lemma's (k ε, k e^{(k−1) ε} δ') within ``delta``."""
    return bool(math.isfinite(eps) and (group_size - 1) * eps < 700
                and group_size * math.exp((group_size - 1) * eps) * record_delta <= delta)


def _supporting_lines(composed) -> tuple[np.ndarray, np.ndarray] | None:
    """(ε_j, δ(ε_j)) on a grid of the composed privacy curve (each a valid guarantee of the run), up to where δ
    reaches the mass the PLD truncated (about 2e-22, charged to every δ) and below e^700 (beyond, e^ε overflows);
    None when the curve is nowhere finite there.

    Each δ_j is the curve's value plus its numerical error (:func:`_curve_error`), at least the distribution's
    infinite mass (no guarantee of the run has a smaller δ), and the larger of its own and every later one's (δ
    cannot grow with ε): the composition's FFT leaves tiny negative masses whose δ, read at face value far along
    the curve, fell below zero, and a line at δ = 0 there let a group of k records be certified far below what a
    concrete pair of its datasets shows."""
    top = next((e for d in (1e-20, 1e-16, 1e-12) if math.isfinite(e := float(composed.get_epsilon_for_delta(d)))),
               None)
    if top is None:
        return None
    top = min(max(top, 1.0), _LARGEST_LINE)
    eps = np.linspace(0.0, top, _N_LINES)
    if 2 * top <= _LARGEST_LINE:
        eps = np.concatenate([eps, [2 * top]])
    infinite, error = _curve_error(composed)
    deltas = deltas_for_epsilons(composed, eps)  # the library's values, without its Python loop
    deltas = np.maximum(np.where(np.isfinite(deltas), deltas, 1.0) + error, infinite)
    deltas = np.maximum.accumulate(deltas[::-1])[::-1]  # non-increasing in ε
    return eps, np.minimum(deltas, 1.0)  # a δ of 1 is a line that bounds nothing


def _curve_error(composed) -> tuple[float, float]:
    """(the distribution's infinite mass, a bound on its δ's numerical error): the larger over its directions of
    the infinite mass, and twice the total of the negative masses the FFT composition left (each a rounding error,
    as large as the positive ones it leaves unseen), both also bounding the lemma's δ' from below."""
    pmfs = dense_pmfs(composed)
    return (max(pmf.infinity_mass for pmf in pmfs),
            2.0 * max(float(-np.minimum(pmf.probs, 0.0).sum()) for pmf in pmfs))


class _LowerBound:
    """f bounded below by the lines 1 − δ_j − e^{ε_j} α and e^{−ε_j}(1 − δ_j − α) of every (ε_j, δ_j) guarantee
    and by 0, as the upper envelope of those lines.

    The envelope (its lines by slope, and where each takes over) is built
    once; evaluating it at P points then costs O(P log L) rather than the
    O(P L) of taking the maximum over every line at every point, which was
    most of a group's ε (k passes). At each point the maximum of the
    envelope's line there and its two neighbours is taken, so a crossing that
    rounding misplaces never lowers the bound: the value is the maximum over
    every line (to 1e-16, the rounding of the lines' own arithmetic, far below
    the worst-corner rounding of :func:`_epsilon_at`).
    """

    def __init__(self, line_eps: np.ndarray, line_delta: np.ndarray) -> None:
        slopes = np.concatenate([-np.exp(line_eps), -np.exp(-line_eps), [0.0]])
        intercepts = np.concatenate([1.0 - line_delta, np.exp(-line_eps) * (1.0 - line_delta), [0.0]])
        order = np.lexsort((intercepts, slopes))  # by slope, then intercept: the last of equal slopes is kept
        slopes, intercepts = slopes[order], intercepts[order]
        keep = np.append(slopes[1:] != slopes[:-1], True)
        hull: list[int] = []
        for j in np.flatnonzero(keep):  # increasing slopes: the upper envelope, left to right
            while len(hull) >= 2 and self._hidden(slopes, intercepts, hull[-2], hull[-1], j):
                hull.pop()
            hull.append(int(j))
        self.slopes, self.intercepts = slopes[hull], intercepts[hull]
        # where line i + 1 overtakes line i
        self.breaks = (self.intercepts[:-1] - self.intercepts[1:]) / (self.slopes[1:] - self.slopes[:-1])

    @staticmethod
    def _hidden(a: np.ndarray, b: np.ndarray, i: int, j: int, k: int) -> bool:
        """Whether line j (slope between i's and k's) is nowhere above both i and k."""
        return (b[k] - b[i]) * (a[j] - a[i]) >= (b[j] - b[i]) * (a[k] - a[i])

    def one_minus_f(self, alpha: np.ndarray) -> np.ndarray:
        """1 − f(α), an upper bound of the true 1 − f."""
        at = np.searchsorted(self.breaks, alpha)
        last = self.slopes.size - 1
        values = [self.slopes[i] * alpha + self.intercepts[i]
                  for i in (np.maximum(at - 1, 0), at, np.minimum(at + 1, last))]
        f_lower = np.maximum(np.maximum(np.maximum(*values[:2]), values[2]), 0.0)
        return np.minimum(1.0 - f_lower, 1.0)


def _epsilon_at(alphas: np.ndarray, reached: np.ndarray, delta: float) -> float:
    """The smallest ε with sup_α ((1 − g)(α) − e^ε α) ≤ δ, each cell [α_i, α_{i+1}] at its worst corner
    ((1 − g)(α_{i+1}) − e^ε α_i: 1 − g increases)."""
    upper, lower = reached[1:], alphas[:-1]

    def delta_at(eps: float) -> float:
        value = float(np.max(upper - math.exp(eps) * lower))
        return value if math.isfinite(value) else math.inf

    if delta_at(0.0) <= delta:
        return 0.0
    low, high = 0.0, 1.0
    while delta_at(high) > delta:
        low, high = high, 2 * high
        if high > 512:  # beyond e^512 only the grid's first cell [0, 1e-30] counts, and it exceeds δ
            return math.inf
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (low, mid) if delta_at(mid) <= delta else (mid, high)
    return high
