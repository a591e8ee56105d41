"""A privacy-loss distribution that dominates one subsampled Skellam step, from the Skellam's Rényi DP.

Rényi DP composes a subsampled Skellam step poorly: the generic subsampling
bound (:func:`~skfedriem.privacy.accounting.skellam.subsampled_rdp`) keeps
terms of order q³ that do not shrink with the noise, so at q = 0.1 it
calibrates nearly the noise of q = 1. This module certifies the step in the
f-DP domain instead, where subsampling is exact for any mechanism:

1. **The unsampled step's privacy profile.** The Skellam mechanism at
   sensitivities (Δ2, Δ1) has Rényi DP ε(α) (Agarwal, Kairouz & Liu 2021;
   :func:`~skfedriem.privacy.accounting.skellam.skellam_rdp`), which bounds
   its hockey-stick divergence at every ε ≥ 0 (Canonne, Kamath & Steinke
   2020, Proposition 12), and by the total variation δ(0) ≤ √(1 − e^{−ε(2)})
   (Bretagnolle–Huber, the Kullback–Leibler divergence below ε(2)), where
   much noise leaves the orders too few:

       δ(ε) ≤ min(min_α exp((α − 1)(ε(α) − ε + log(1 − 1/α))) / α, √(1 − e^{−ε(2)})).

   The noise is symmetric and the set of shifts is too, so the same δ(ε)
   bounds both orders of every pair of inputs Δ apart.
2. **Subsampling.** Dong, Roth & Su (2022, Gaussian differential privacy,
   Theorem 9) make a mechanism whose neighbouring pairs are f-DP into a
   C_q(f)-DP one when each step samples a fixed-size batch at rate q and one
   record is substituted; the proof rests only on the step's output being
   the mixture pair (1 − q) R + q P, (1 − q) R + q P' with R, P, P' pairwise
   f-close, which a Poisson-sampled sum has too (the record's slot is in the
   batch with probability q; R differs from P by one record's removal,
   within the substitution's sensitivity). For ε ≥ 0 the hockey-stick curve
   of C_q(f) is the larger of its two directions, exact functions of δ:

       remove:  q δ(log(1 + (e^ε − 1) / q)),
       add:     (1 − (1 − q) e^ε) δ(log(q e^ε / (1 − (1 − q) e^ε))),   where 1 − (1 − q) e^ε > 0,

   and for ε < 0 the symmetry of C_q gives δ(−ε) = 1 − e^{−ε} + e^{−ε} δ(ε).
3. **A valid distribution.** Each value is an upper bound on the true
   curve, which is convex in e^ε; their greatest convex minorant in e^ε is
   then still above the true curve, and dp-accounting's pessimistic
   connect-the-dots discretisation (Doroshenko et al. 2022) turns it into a
   privacy-loss distribution that dominates the step, which its FFT composes.

Every step pays the conversion of step 1 (RDP bounds a profile loosely), so
the composition is looser than the real mechanism's (at q = 0.1, 300 steps,
the variance certified for ε = 4 has a real ε of 2.62 at one coordinate with
fixed-size batches, 2.45 Poisson-sampled; by Rényi DP alone 0.46)
and at q = 1, where sampling amplifies nothing, Rényi DP composed and
converted once is tighter: :func:`~skfedriem.privacy.accounting.skellam.discrete_epsilon`
certifies the smaller of the two. dp-accounting has the machinery of steps 2
and 3 only for its own mechanism classes (no Skellam), so the curve is built
here and handed to its PMF constructor, as the fixed-size Gaussian's is.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import stats

from .subsampled_gaussian import symmetric_curve, symmetric_pld

__all__ = ["LOG_MASS_TRUNCATION", "one_coordinate_pld", "subsampled_step_pld", "unsampled_log_delta"]

#: Log of the hockey-stick divergence at which a step's curve is cut: what lies beyond goes to the infinite loss
#: (charged to δ), as dp-accounting truncates its own mechanisms' tails.
LOG_MASS_TRUNCATION = -50.0
#: The largest loss a step's grid reaches, whatever its curve.
_MAX_LOSS = 60.0


def unsampled_log_delta(rdp: np.ndarray, orders: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """log δ(ε) of a mechanism of Rényi DP ``rdp`` at ``orders`` (> 1), at every ε ≥ 0 (module docstring, step 1).

    Parameters
    ----------
    rdp, orders : ndarray
    eps : ndarray

    Returns
    -------
    ndarray
        At most 0.

    Examples
    --------
    >>> orders = np.arange(2.0, 200.0)
    >>> round(float(np.exp(unsampled_log_delta(orders * 0.5, orders, np.array([3.0]))[0])), 4)  # a Gaussian, μ = 1
    0.0053

    (the Gaussian's exact δ(3) is 0.0047: Rényi DP bounds a profile, not exactly).
    """
    a = np.asarray(orders, dtype=np.float64)[:, np.newaxis]
    r = np.asarray(rdp, dtype=np.float64)[:, np.newaxis]
    eps = np.asarray(eps, dtype=np.float64)[np.newaxis, :]
    bounds = (a - 1) * (r - eps + np.log1p(-1 / a)) - np.log(a)
    total_variation = 0.5 * math.log(-math.expm1(-float(np.min(rdp)))) if np.min(rdp) > 0 else -math.inf
    return np.minimum(np.minimum(bounds.min(axis=0), total_variation), 0.0)


def _sampled_delta(rdp: np.ndarray, orders: np.ndarray, rate: float, eps: np.ndarray) -> np.ndarray:
    """δ(ε) ≥ 0 of C_q(f) at ε ≥ 0: the larger of its remove and add directions (module docstring, step 2)."""
    remove = rate * np.exp(unsampled_log_delta(rdp, orders, np.log1p(np.expm1(eps) / rate)))
    if rate >= 1:
        return remove
    weight = -np.expm1(eps + math.log1p(-rate))  # 1 − (1 − q) e^ε
    add = np.zeros_like(eps)
    live = weight > 0
    if live.any():
        inner = math.log(rate) + eps[live] - np.log(weight[live])
        add[live] = weight[live] * np.exp(unsampled_log_delta(rdp, orders, inner))
    return np.maximum(remove, add)


def _convex_minorant(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The greatest convex minorant of the points (x, y), x increasing, at the x (the lower hull, monotone chain).

    Written here: scipy's ConvexHull (Qhull) works in floating-point geometry that x from e^−60 to e^60 defeats, and
    numpy has no hull."""
    hull: list[int] = []
    for i in range(len(x)):
        while len(hull) >= 2:
            j, k = hull[-2], hull[-1]
            if (y[k] - y[j]) * (x[i] - x[j]) >= (y[i] - y[j]) * (x[k] - x[j]):
                hull.pop()
            else:
                break
        hull.append(i)
    return np.interp(x, x[hull], y[hull])


def _loss_span(rdp: np.ndarray, orders: np.ndarray, rate: float, interval: float) -> int:
    """Grid cells up to the first ε whose curve falls below e^:data:`LOG_MASS_TRUNCATION` (at most :data:`_MAX_LOSS`)."""
    coarse = np.arange(0.0, _MAX_LOSS + 0.25, 0.25)
    curve = _sampled_delta(rdp, orders, rate, coarse)
    below = np.nonzero(curve <= math.exp(LOG_MASS_TRUNCATION))[0]
    top = coarse[below[0]] if below.size else _MAX_LOSS
    return max(1, math.ceil(top / interval))


@functools.lru_cache(maxsize=256)
def subsampled_step_pld(rdp: tuple, orders: tuple, rate: float, interval: float) -> pld_lib.PrivacyLossDistribution:
    """A privacy-loss distribution on the grid ``interval`` that dominates one step of rate q whose unsampled mechanism
    has Rényi DP ``rdp`` at ``orders`` (symmetric in its inputs, as additive symmetric noise is).

    Parameters
    ----------
    rdp, orders : tuple of float
        Tuples, so that a run's repeated steps share one distribution (cached).
    rate : float
        q in (0, 1].
    interval : float
        The loss grid's width.

    Returns
    -------
    dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution

    Examples
    --------
    >>> orders = np.arange(2.0, 257.0)
    >>> pld = subsampled_step_pld(tuple(orders * 0.02), tuple(orders), 0.1, 1e-3)   # μ = 0.2, q = 0.1
    >>> round(pld.self_compose(300).get_epsilon_for_delta(1e-5), 2)
    2.0
    """
    curve_rdp, curve_orders = np.asarray(rdp, dtype=np.float64), np.asarray(orders, dtype=np.float64)
    n = _loss_span(curve_rdp, curve_orders, float(rate), float(interval))
    eps = np.arange(n + 1) * float(interval)
    deltas = symmetric_curve(eps, _sampled_delta(curve_rdp, curve_orders, float(rate), eps))
    return symmetric_pld(float(interval), _convex_minorant(np.exp(np.concatenate([-eps[:0:-1], eps])), deltas))


def one_coordinate_pld(lam: float, shift: int, rate: float, *, one_sided: bool = False
                       ) -> pld_lib.PrivacyLossDistribution:
    """The privacy-loss distribution of the real discrete mechanism at one coordinate, the reference the accountant is
    checked against (dp-accounting from the two mass functions, the support cut 12 standard deviations out).

    One record substituted at rate q, the rest of the batch fixed, records within a of 0 (Δ2 = Δ1 = 2a):

    * ``one_sided=False``: (1 − q) Sk(λ) + q Sk(λ)(· − a) against (1 − q) Sk(λ) + q Sk(λ)(· + a), the
      worst case of a Poisson-sampled sum (the record's slot is empty or holds z = a or z' = −a);
    * ``one_sided=True``: (1 − q) Sk(λ) + q Sk(λ)(· − 2a) against Sk(λ), both orders: a fixed-size
      batch, which without the record holds another one, y = z' = −a, so that only z = a moves it, by 2a.

    Parameters
    ----------
    lam : float
        λ of Sk(λ, λ) (variance 2λ).
    shift : int
        a.
    rate : float
        q.
    one_sided : bool, default=False

    Returns
    -------
    dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution
    """
    a = int(shift)
    half = int(12 * math.sqrt(2 * lam)) + 4 * a + 10
    support = np.arange(-half, half + 1)
    base = stats.skellam.logpmf(support, lam, lam)

    def mixture(offset: int, weight: float) -> dict:
        logs = base if weight == 0 else np.logaddexp(math.log1p(-weight) + base if weight < 1 else -np.inf,
                                                     math.log(weight) + stats.skellam.logpmf(support - offset, lam, lam))
        return {int(x): float(v) for x, v in zip(support, logs) if np.isfinite(v)}

    if one_sided:
        return pld_lib.from_two_probability_mass_functions(log_probability_mass_function_lower=mixture(0, 0.0),
                                                           log_probability_mass_function_upper=mixture(2 * a, rate),
                                                           symmetric=False)
    return pld_lib.from_two_probability_mass_functions(log_probability_mass_function_lower=mixture(-a, rate),
                                                       log_probability_mass_function_upper=mixture(a, rate))
