"""Rényi-DP accounting of subsampled Skellam steps (distributed noise), beside the subsampled Gaussian's.

The Skellam mechanism adds Sk(λ, λ) = Poisson(λ) − Poisson(λ) to every
integer coordinate, variance V = 2λ. Its Rényi divergence of order α between
two inputs whose difference has L2 norm Δ2 and L1 norm Δ1 is at most
(Agarwal, Kairouz & Liu, "The Skellam Mechanism for Differentially Private
Federated Learning", NeurIPS 2021, Theorem 3.5, as the authors' accounting
code writes it in the integer domain)

    ε(α) ≤ α Δ2² / (2V) + min(((2α − 1) Δ2² + 6 Δ1) / (4V²), 3 Δ1 / (2V)),

the Gaussian's α Δ2² / (2V) plus a term that vanishes as V grows. A step
samples its records (fixed-size batches without replacement, or Poisson at
rate q) and one record is *substituted*; conditioned on the rest of the
batch, the step's output is then the pair of mixtures (1 − q) P + q P_z and
(1 − q) P + q P_z', P the output without either record and P_z, P_z' with
one of them, every two of which are inputs at most Δ apart. Wang, Balle &
Kasiviswanathan's bound for subsampling without replacement under
substitution ("Subsampled Rényi Differential Privacy and Analytical Moments
Accountant", AISTATS 2019, Theorem 9, with ε(∞) = ∞) bounds exactly such a
pair, for integer α ≥ 2:

    A(α) = 1 + q² C(α, 2) min(4 (e^{ε(2)} − 1), 2 e^{ε(2)}) + Σ_{j=3..α} 2 q^j C(α, j) e^{(j − 1) ε(j)},
    ε_q(α) = min(log A(α) / (α − 1), ε(α)).

dp-accounting implements this bound only for a Gaussian (it tightens the
j ≥ 3 terms for the Gaussian alone), so it is written here for any ε(α); a
test checks it against dp-accounting's at the Gaussian's ε(α), where it must
be looser. Steps compose by adding their RDP order by order; dp-accounting's
``compute_epsilon`` (its improved conversion) turns the sum into (ε, δ).

That bound keeps terms of order q^j, j ≥ 3, that no noise shrinks, so below
q = 1 it amplifies little (at q = 0.1, 300 steps, ε = 4 it calibrates a noise
std 0.68x that of full batches, whose real ε is 0.46; the distributions below:
0.14x, benchmarks/skellam_accounting.py). Every composition is therefore
also certified by privacy-loss distributions that dominate each subsampled
step, built from the same ε(α) in the f-DP domain where subsampling is exact
(:mod:`skfedriem.privacy.accounting.skellam_pld`), and
:func:`discrete_epsilon` reports the smaller of the two upper bounds.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable

import numpy as np
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon
from scipy.special import gammaln, logsumexp

from ..._utils.compat import infinity_mass
from .skellam_pld import subsampled_step_pld

__all__ = ["ORDERS", "PLD_INTERVAL", "PROFILE_ORDERS", "calibrate_skellam_variance", "compose_while_certifying",
           "discrete_epsilon", "gaussian_rdp", "renyi_epsilon", "skellam_rdp", "step_pld", "subsampled_rdp"]

#: The integer Rényi orders every curve is computed at.
ORDERS = np.arange(2, 257, dtype=np.float64)
#: The orders a step's privacy profile is read from (:mod:`.skellam_pld`): :data:`ORDERS` and more, up to 10^4, for
#: the tails of steps with much noise (an order near ε / μ² bounds δ(ε) best).
PROFILE_ORDERS = np.unique(np.concatenate([ORDERS, np.round(np.geomspace(257.0, 1.0e4, 120))]))
#: The loss grid of the privacy-loss distributions of Skellam steps: at q = 0.1, 300 steps, ε = 4, five times finer
#: moves the certified ε by 4e-5.
PLD_INTERVAL = 1e-3


def skellam_rdp(variance: float, l2: float, l1: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """ε(α) of the Skellam mechanism of total variance V per coordinate, for inputs Δ2 (L2) and Δ1 (L1) apart.

    Parameters
    ----------
    variance : float
        V = 2λ, the variance of every coordinate's Sk(λ, λ).
    l2, l1 : float
        Δ2 and Δ1, in the integer domain.
    orders : ndarray of int-valued float

    Returns
    -------
    ndarray, shape (len(orders),)

    Examples
    --------
    >>> round(float(skellam_rdp(2.0e4, 10.0, 30.0, np.array([2.0]))[0]), 6)   # the Gaussian's 0.005, and a little
    0.005
    """
    a = np.asarray(orders, dtype=np.float64)
    gaussian = a * l2 ** 2 / (2 * variance)
    return gaussian + np.minimum(((2 * a - 1) * l2 ** 2 + 6 * l1) / (4 * variance ** 2), 3 * l1 / (2 * variance))


def gaussian_rdp(mu0: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """ε(α) = α μ0² / 2 of a Gaussian whose two inputs are μ0 noise stds apart (a local-noise step's μ0).

    Parameters
    ----------
    mu0 : float
    orders : ndarray

    Returns
    -------
    ndarray
    """
    return np.asarray(orders, dtype=np.float64) * mu0 ** 2 / 2


def _log_comb(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def subsampled_rdp(rdp: np.ndarray, sample_rate: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """ε_q(α) of a step that samples each record with probability q and runs a mechanism of RDP ``rdp``.

    Wang, Balle & Kasiviswanathan (2019), Theorem 9 (module docstring); the
    orders must be the consecutive integers from 2 (every ε(j), j ≤ α, enters
    A(α)).

    Parameters
    ----------
    rdp : ndarray
        ε(α) of the mechanism, at ``orders``.
    sample_rate : float
        q in (0, 1].
    orders : ndarray
        2, 3, ..., in order.

    Returns
    -------
    ndarray
    """
    a = np.asarray(orders, dtype=np.float64)
    if not np.array_equal(a, np.arange(2, 2 + len(a))):
        raise ValueError("subsampled_rdp needs the consecutive integer orders 2, 3, ...")
    if sample_rate >= 1:
        return np.asarray(rdp, dtype=np.float64)
    log_q = math.log(sample_rate)
    eps2 = float(rdp[0])
    # j = 2: q² C(α, 2) min(4 (e^ε(2) − 1), 2 e^ε(2)), in logs
    second = 2 * log_q + _log_comb(a, 2.0) + min(math.log(4) + eps2 + math.log(-math.expm1(-eps2)) if eps2 > 0
                                                 else -math.inf, math.log(2) + eps2)
    # every term of every order at once: row α, column j (j ≤ α), e^{(j−1) ε(j)} with ε(j) = rdp[j − 2]
    j = a[np.newaxis, :]
    alpha = a[:, np.newaxis]
    terms = math.log(2) + j * log_q + _log_comb(np.maximum(alpha, j), j) + (j - 1) * np.asarray(rdp)[np.newaxis, :]
    terms = np.where((j >= 3) & (j <= alpha), terms, -np.inf)
    log_a = logsumexp(np.concatenate([np.zeros((len(a), 1)), second[:, np.newaxis], terms], axis=1), axis=1)
    out = log_a / (a - 1)
    return np.minimum(out, rdp)


def _unsampled_rdp(step: tuple, orders: np.ndarray) -> np.ndarray:
    """ε(α) of one kind of step without its sampling: ("gaussian", μ0, q) or ("skellam", V, Δ2, Δ1, q)."""
    if step[0] == "gaussian":
        return gaussian_rdp(step[1], orders)
    return skellam_rdp(*step[1:4], orders)


@functools.lru_cache(maxsize=1024)
def _step_rdp(step: tuple) -> np.ndarray:
    """The RDP curve of one kind of step, per step: ("gaussian", μ0, q) or ("skellam", V, Δ2, Δ1, q).

    Kept for the steps seen last (read-only): a run's rounds are the same few kinds, and ε is read every round."""
    curve = np.array(subsampled_rdp(_unsampled_rdp(step, ORDERS), step[-1]), dtype=np.float64)
    curve.flags.writeable = False
    return curve


def renyi_epsilon(steps: Iterable[tuple[tuple, int]], delta: float) -> float:
    """ε at δ of a composition of subsampled steps by Rényi DP alone (module docstring): each ``(kind, count)``.

    Parameters
    ----------
    steps : iterable of (tuple, int)
    delta : float

    Returns
    -------
    float
    """
    total = np.zeros_like(ORDERS)
    for kind, count in steps:
        total += count * _step_rdp(kind)
    eps, _ = compute_epsilon(ORDERS, total, delta)
    return float(eps)


def step_pld(kind: tuple):
    """The privacy-loss distribution, on the grid :data:`PLD_INTERVAL`, that dominates one step of this kind,
    ``("skellam", V, Δ2, Δ1, q)`` or ``("gaussian", μ0, q)`` (:mod:`.skellam_pld`).

    Parameters
    ----------
    kind : tuple

    Returns
    -------
    dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution
    """
    rdp = _unsampled_rdp(kind, PROFILE_ORDERS)
    return subsampled_step_pld(tuple(rdp.tolist()), tuple(PROFILE_ORDERS.tolist()), float(kind[-1]), PLD_INTERVAL)


@functools.lru_cache(maxsize=1024)
def _pld_epsilon(steps: tuple, delta: float) -> float:
    """ε at δ of the steps' dominating distributions composed; inf as soon as a part's mass at infinite loss reaches
    δ (no ε holds there, and dp-accounting cannot compose a distribution that is all infinite loss)."""
    return compose_while_certifying([(step_pld(kind), int(count)) for kind, count in steps], delta)


def compose_while_certifying(parts: list, delta: float) -> float:
    """ε at δ of ``(pld, count)`` parts composed, each ``count`` times; inf once a step, a part or the composition so
    far puts mass δ or more at infinite loss.

    Parameters
    ----------
    parts : list of (PrivacyLossDistribution, int)
        On one grid.
    delta : float

    Returns
    -------
    float
    """
    composed = None
    for pld, count in parts:
        if infinity_mass(pld) >= delta:
            return math.inf
        pld = pld.self_compose(count)
        if infinity_mass(pld) >= delta:
            return math.inf
        composed = pld if composed is None else composed.compose(pld)
        if infinity_mass(composed) >= delta:
            return math.inf
    return 0.0 if composed is None else float(composed.get_epsilon_for_delta(delta))


def discrete_epsilon(steps: Iterable[tuple[tuple, int]], delta: float) -> float:
    """ε at δ of a composition of subsampled steps: each ``(kind, count)``; the smaller of two upper bounds, Rényi DP
    composed (module docstring) and the steps' dominating privacy-loss distributions composed (:mod:`.skellam_pld`).

    Parameters
    ----------
    steps : iterable of (tuple, int)
        ``(("skellam", V, Δ2, Δ1, q), n)`` or ``(("gaussian", μ0, q), n)``:
        n steps of that kind.
    delta : float

    Returns
    -------
    float
        An upper bound on ε.

    Examples
    --------
    >>> eps = discrete_epsilon([(("skellam", 1.0e7, 1000.0, 8000.0, 0.01), 500)], 1e-5)
    >>> round(eps, 2)   # noise std 3.2 Δ2, q = 0.01, 500 steps (by Rényi DP alone: 0.69)
    0.38
    """
    steps = sorted((tuple(kind), int(count)) for kind, count in steps if count)
    if not steps:
        return 0.0
    rdp = renyi_epsilon(steps, delta)
    if all(kind[-1] >= 1 for kind, _ in steps):  # nothing to amplify: Rényi DP is the tighter
        return rdp
    return min(rdp, _pld_epsilon(tuple(steps), float(delta)))


def calibrate_skellam_variance(eps: float, delta: float, sample_rate: float, n_steps: int,
                               sensitivity: Callable[[], tuple[float, float]]) -> float:
    """The smallest total variance V (to 0.1 %) whose ``n_steps`` subsampled Skellam steps certify (ε, δ).

    Parameters
    ----------
    eps, delta : float
    sample_rate : float
        q.
    n_steps : int
    sensitivity : callable
        ``() -> (Δ2, Δ1)`` in the integer domain.

    Returns
    -------
    float

    Examples
    --------
    >>> v = calibrate_skellam_variance(1.0, 1e-5, 0.1, 500, lambda: (1000.0, 8000.0))
    >>> discrete_epsilon([(("skellam", v, 1000.0, 8000.0, 0.1), 500)], 1e-5) <= 1.0
    True
    """
    l2, l1 = sensitivity()

    def certifies(variance: float) -> bool:  # discrete_epsilon(...) <= eps, the cheaper bound read first
        steps = [(("skellam", variance, l2, l1, sample_rate), n_steps)]
        return renyi_epsilon(steps, delta) <= eps or (sample_rate < 1 and _pld_epsilon(tuple(steps), delta) <= eps)

    low, high = l2 ** 2 * 1e-6, l2 ** 2
    while not certifies(high):
        low, high = high, high * 16
        if high > l2 ** 2 * 1e30:
            raise ValueError(f"No Skellam noise certifies eps={eps!r} at delta={delta!r} over {n_steps} steps.")
    while high / low > 1.001:
        middle = math.sqrt(low * high)
        low, high = (low, middle) if certifies(middle) else (middle, high)
    return high
