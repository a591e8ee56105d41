"""Reading a privacy-loss distribution's ε at δ fast: dp-accounting's formula with cumulative sums.

dp-accounting's ``get_epsilon_for_delta`` walks the PMF in a Python loop;
the per-round history and group privacy's search over δ read a curve many
times, so they use :func:`epsilon_for_delta`, which agrees with the library to
rounding. A certified value the library can give is still the library's.
"""

from __future__ import annotations

import math

import numpy as np

from ..._utils.compat import DensePMF, dense_pmfs

__all__ = ["deltas_for_epsilons", "epsilon_for_delta"]


def epsilon_for_delta(pld, delta: float) -> float:
    """dp-accounting's ``PrivacyLossDistribution.get_epsilon_for_delta``, vectorised over the PMF.

    The library walks the PMF in a Python loop, paid at every round for
    ``history_`` (``benchmarks/accounting.py`` times both); this evaluates the
    same hockey-stick formula with cumulative sums. It agrees with the library
    to rounding (a test checks it against the library); the certified
    ``epsilon_`` still comes from the library's own call.

    Parameters
    ----------
    pld : dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution
    delta : float

    Returns
    -------
    epsilon : float
    """
    return max(_pmf_epsilon_for_delta(pmf, delta) for pmf in dense_pmfs(pld))


def _pmf_epsilon_for_delta(pmf: DensePMF, delta: float) -> float:
    infinity_mass = pmf.infinity_mass
    if infinity_mass > delta:
        return math.inf
    probs = np.flip(pmf.probs)
    n = len(probs)
    losses = (pmf.lower_loss + n - 1) * pmf.discretization - pmf.discretization * np.arange(n)  # descending
    upper_after = infinity_mass + np.cumsum(probs)  # the library's running masses after each loss
    lower_after = np.cumsum(np.exp(-losses) * probs)
    upper_before = np.concatenate(([infinity_mass], upper_after[:-1]))
    lower_before = np.concatenate(([0.0], lower_after[:-1]))
    usable = (upper_before > delta) & (lower_before > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = np.log(np.where(usable, upper_before - delta, 1.0) / np.where(usable, lower_before, 1.0))
    stops = np.flatnonzero(usable & (bound >= losses))  # the loop's break: ε is at least this loss
    tops = np.flatnonzero((upper_after >= delta) & (lower_after == 0))  # the loop's return of a huge loss
    stop = stops[0] if stops.size else n
    top = tops[0] if tops.size else n
    if top < stop:
        return max(0.0, float(losses[top]))
    upper, lower = (upper_before[stop], lower_before[stop]) if stop < n else (upper_after[-1], lower_after[-1])
    if upper <= lower + delta:
        return 0.0
    return math.log((upper - delta) / lower)


def deltas_for_epsilons(pld, epsilons: np.ndarray) -> np.ndarray:
    """dp-accounting's ``PrivacyLossDistribution.get_delta_for_epsilon`` at ascending ``epsilons``, with cumulative
    sums in place of its Python loop.

    The same formula, δ(ε) = m_∞ + Σ_{l > ε} p_l − e^ε Σ_{l > ε} p_l e^{−l}, its sums accumulated in the
    library's order (from the largest loss down, starting from the infinite mass), so the values are those of
    the library's call on an array of ε, bit for bit (its call on one ε sums in another order: within 1e-15);
    the larger of the two directions where the distribution is asymmetric. Values far along the curve carry
    the composition's rounding (tiny negative masses make some negative): read them with that error.

    Parameters
    ----------
    pld : dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution
    epsilons : numpy.ndarray, ascending

    Returns
    -------
    numpy.ndarray
    """
    epsilons = np.asarray(epsilons, dtype=float)
    if np.isnan(epsilons).any() or np.any(np.diff(epsilons) < 0):
        raise ValueError(f"deltas_for_epsilons needs ascending epsilons, without NaN. Got {epsilons!r}.")
    return np.maximum.reduce([_pmf_deltas(pmf, epsilons) for pmf in dense_pmfs(pld)])


def _pmf_deltas(pmf: DensePMF, epsilons: np.ndarray) -> np.ndarray:
    losses = (np.arange(len(pmf.probs)) + pmf.lower_loss) * pmf.discretization  # ascending, as the library's
    probs = np.asarray(pmf.probs, dtype=float)
    upper = np.cumsum(np.concatenate(([pmf.infinity_mass], probs[::-1])))  # after the top j losses
    lower = np.cumsum(np.concatenate(([0.0], probs[::-1] * np.exp(-losses[::-1]))))
    above = len(losses) - np.searchsorted(losses, epsilons, side="right")  # losses > ε, counted from the top
    with np.errstate(over="ignore", invalid="ignore"):
        deltas = upper[above] - np.exp(epsilons) * lower[above]
    return np.where(np.isposinf(epsilons), pmf.infinity_mass, deltas)
