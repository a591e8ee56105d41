"""Privacy accounting for the subsampled Gaussian local steps (docs: the method, privacy accounting).

One private local step releases a clipped batch mean plus Gaussian noise; under
substitution of one record it is μ0-GDP with μ0 = 2C / (B σ). Subsampling a
batch from a client of m records amplifies it, and the whole transcript of T
rounds of τ steps composes ``steps = T τ`` such mechanisms at the rate
q = B / m⋆ of the smallest client. Two rigorous modes:

``sampling="fixed"`` (the paper's theorem, Pautrel et al. 2026)
    Batches of exactly B drawn without replacement. We certify the
    ``steps``-fold composition of the symmetrised tradeoff function
    C_q(G_μ0) = min{f_q, f_q⁻¹}** of Dong, Roth & Su (2022, Gaussian
    differential privacy, JRSS-B), f_q = T(N(0,1), (1−q)N(0,1) + qN(μ0,1)).
    Its hockey-stick curve is, for ε >= 0, the larger of the two directions of
    the Poisson subsampled Gaussian (the conjugate of a convex hull of a
    minimum is the maximum of the conjugates), and for ε < 0 follows from the
    symmetry of C_q: δ(−ε) = 1 − e^{−ε} + e^{−ε} δ(ε). From that curve on a
    grid, dp-accounting's pessimistic connect-the-dots discretisation
    (Doroshenko et al., 2022) builds a privacy-loss distribution that dominates
    C_q, which its FFT composition composes pessimistically.
``sampling="poisson"``
    Each record joins a batch independently with probability q and the sum is
    divided by the expected size B. Certified with dp-accounting's tight
    REPLACE_ONE privacy-loss distribution; its convention shifts the two
    mixtures by ±sensitivity, so the sensitivity is μ0/2 at unit noise.

Only dp-accounting's documented mechanism classes and PMF constructor are used;
what it lacks (the symmetrised hull the method certifies) is built here from its pieces.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import lru_cache
from numbers import Integral, Real

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as plm
from scipy.optimize import brentq
from scipy.stats import norm

from ..._utils.compat import Interval, StrOptions, validate_params

__all__ = [
    "DISCRETIZATION",
    "MAX_EPSILON",
    "MAX_GRID_POINTS",
    "MIN_DELTA",
    "calibrate_mu0",
    "epsilon_spent",
    "gdp_epsilon",
    "gdp_mu",
    "grid_interval",
    "single_step_pld",
    "subsampled_gaussian_delta",
    "symmetric_curve",
    "symmetric_pld",
]

#: Discretisation interval of the privacy-loss grid. Connect-the-dots keeps the
#: certified ε within 0.01 % of a 10x finer grid at q = 0.1, 2000 steps
#: (see ``benchmarks/accounting.py``), well inside the 1 % we promise.
DISCRETIZATION = 1e-4

#: The most grid cells of :data:`DISCRETIZATION` a step's losses take on each side (:func:`grid_interval`).
MAX_GRID_POINTS = 2 ** 17
#: The composed loss span the default grid is sized for (:func:`grid_interval`): 200,000 cells.
_COMPOSED_SPAN = 20.0
#: The most doublings of the grid (beyond, a calibration's search is far outside any target the ε cap allows).
_MAX_DOUBLINGS = 8

#: Log of the noise mass dp-accounting may truncate (it is charged to δ).
_LOG_MASS_TRUNCATION = -50.0

#: The largest ε a run may target: e^100 bounds nothing a user can read, and the accountant's grids grow with ε.
#: A run without privacy is ``eps=None``.
MAX_EPSILON = 100.0
#: The smallest δ the accountant certifies: it truncates each step's privacy-loss distribution at mass
#: e^-50 (about 2e-22) and charges it to δ, and below about 1e-13 the calibration's search runs into those tails
#: (measured: at δ = 1e-15 every case failed, at 1e-14 one asked for a 13 TiB grid); 1e-12 calibrated in all 20
#: cases tried, ε ∈ {0.1, 1, 10, 100} × (q, steps) ∈ {(1, 1), (1, 200), (0.1, 200)} fixed, {(0.1, 200), (0.01, 5000)}
#: Poisson (four of them are in the tests).
MIN_DELTA = 1e-12

_COMMON_CONSTRAINTS = {
    "mu0": [Interval(Real, 0, None, closed="neither")],
    "sample_rate": [Interval(Real, 0, 1, closed="right")],
    "steps": [Interval(Integral, 1, None, closed="left")],
    "delta": [Interval(Real, MIN_DELTA, 1, closed="left")],
    "sampling": [StrOptions({"fixed", "poisson"})],
}


def _fixed_pld(mu0: float, sample_rate: float, interval: float) -> pld_lib.PrivacyLossDistribution:
    """Dominating discrete PLD of the symmetrised tradeoff C_q(G_μ0)."""
    directions = [
        plm.GaussianPrivacyLoss(
            1.0,
            sensitivity=mu0,
            sampling_prob=sample_rate,
            adjacency_type=adjacency,
            log_mass_truncation_bound=_LOG_MASS_TRUNCATION,
        )
        for adjacency in (plm.AdjacencyType.REMOVE, plm.AdjacencyType.ADD)
    ]
    eps_max = max(d.connect_dots_bounds().epsilon_upper for d in directions)
    n = max(1, math.ceil(eps_max / interval))
    eps_pos = np.arange(n + 1) * interval
    return symmetric_pld(interval, symmetric_curve(eps_pos, subsampled_gaussian_delta(mu0, sample_rate, eps_pos)))


def symmetric_curve(eps: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """A symmetric tradeoff's hockey-stick curve on the grid −ε_n … ε_n from its values at ``eps`` = 0, d, …, n d:
    δ(−ε) = 1 − e^{−ε} + e^{−ε} δ(ε), clipped to [0, 1] and made non-increasing (round-off can leave a 1e-17 rise).

    Parameters
    ----------
    eps, positive : ndarray
        The grid from 0 and δ on it.

    Returns
    -------
    ndarray, shape (2 n + 1,)
    """
    negative_eps = -eps[:0:-1]
    negative = 1.0 - np.exp(negative_eps) + np.exp(negative_eps) * positive[:0:-1]
    return np.minimum.accumulate(np.clip(np.concatenate([negative, positive]), 0.0, 1.0))


def symmetric_pld(interval: float, deltas: np.ndarray) -> pld_lib.PrivacyLossDistribution:
    """dp-accounting's pessimistic connect-the-dots distribution of a curve on −n d … n d (:func:`symmetric_curve`).

    Parameters
    ----------
    interval : float
        d.
    deltas : ndarray, shape (2 n + 1,)

    Returns
    -------
    dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution
    """
    n = (len(deltas) - 1) // 2
    return pld_lib.PrivacyLossDistribution(pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(interval, -n, n,
                                                                                                 deltas))


def subsampled_gaussian_delta(mu0: float, sample_rate: float, eps: np.ndarray) -> np.ndarray:
    """δ(ε) >= 0 of the Poisson subsampled Gaussian, the larger of its two directions, in closed form.

    P = (1 − q) N(0, 1) + q N(μ0, 1) against Q = N(0, 1): the loss log(dP/dQ)
    is increasing in x, so δ_{P‖Q}(ε) = q Φ̄(x_ε − μ0) − (e^ε − 1 + q) Φ̄(x_ε)
    with x_ε = (log((e^ε − 1 + q) / q) + μ0² / 2) / μ0; and δ_{Q‖P}(ε) =
    (1 − e^ε (1 − q)) Φ(y_ε) − q e^ε Φ(y_ε − μ0) with y_ε the same in e^{−ε},
    zero for ε >= −log(1 − q). The same values as dp-accounting's
    ``GaussianPrivacyLoss.get_delta_for_epsilon`` for its REMOVE and ADD
    directions (a test compares them), written here because that method
    inverts the loss in a Python loop, one ε at a time (at ε = 100 it was
    70 % of a calibration). Each difference is taken in logarithms,
    exp(a) (1 − exp(b − a)), so it keeps its relative precision where δ is
    far below the two terms.

    Parameters
    ----------
    mu0 : float
        > 0.
    sample_rate : float
        q in (0, 1].
    eps : numpy.ndarray
        ε >= 0.

    Returns
    -------
    numpy.ndarray
    """
    eps = np.asarray(eps, dtype=float)
    q, mu = float(sample_rate), float(mu0)
    log_q = math.log(q)
    # P against Q: log(e^ε − (1 − q)) = ε + log1p(−(1 − q) e^{−ε})
    log_gap = eps + np.log1p(-(1.0 - q) * np.exp(-eps))
    x = (log_gap - log_q + mu * mu / 2) / mu
    first = log_q + norm.logsf(x - mu)
    second = log_gap + norm.logsf(x)
    forward = _log_difference(first, second)
    # Q against P, where e^{−ε} > 1 − q
    backward = np.zeros_like(eps)
    live = eps < (-math.log1p(-q) if q < 1 else math.inf)
    if live.any():
        e = eps[live]
        with np.errstate(divide="ignore"):  # e^{−ε} = 1 − q at the boundary: log 0, then δ = 0
            log_low = np.log(q + np.expm1(-e))  # log(e^{−ε} − (1 − q))
        y = (log_low - log_q + mu * mu / 2) / mu
        log_weight = np.log(-np.expm1(e + math.log1p(-q))) if q < 1 else np.zeros_like(e)
        backward[live] = _log_difference(log_weight + norm.logcdf(y), log_q + e + norm.logcdf(y - mu))
    return np.clip(np.maximum(forward, backward), 0.0, 1.0)


def _log_difference(log_a: np.ndarray, log_b: np.ndarray) -> np.ndarray:
    """max(0, e^a − e^b), computed as e^a (1 − e^{b − a})."""
    with np.errstate(invalid="ignore", over="ignore"):
        value = np.exp(log_a) * -np.expm1(np.minimum(log_b - log_a, 0.0))
    return np.where(np.isfinite(log_a) & (log_b < log_a), value, 0.0)


def _poisson_pld(mu0: float, sample_rate: float, interval: float) -> pld_lib.PrivacyLossDistribution:
    """Tight replace-one PLD of the Poisson subsampled Gaussian (mean over B)."""
    return pld_lib.from_gaussian_mechanism(
        1.0,
        sensitivity=mu0 / 2.0,
        sampling_prob=sample_rate,
        value_discretization_interval=interval,
        log_mass_truncation_bound=_LOG_MASS_TRUNCATION,
        neighboring_relation=pld_lib.NeighborRel.REPLACE_ONE,
    )


@lru_cache(maxsize=256)
def single_step_pld(
    mu0: float, sample_rate: float, sampling: str = "fixed", interval: float = DISCRETIZATION
) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic privacy-loss distribution of one private local step.

    Parameters
    ----------
    mu0 : float
        Per-step Gaussian-DP parameter 2C / (Bσ).
    sample_rate : float
        q = B / m of the client.
    sampling : {"fixed", "poisson"}, default="fixed"
    interval : float, default=DISCRETIZATION

    Returns
    -------
    dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution
    """
    build = _fixed_pld if sampling == "fixed" else _poisson_pld
    return build(float(mu0), float(sample_rate), float(interval))


@lru_cache(maxsize=1024)
def _loss_span(mu0: float, sample_rate: float) -> float:
    """The largest loss a step's grid must reach (dp-accounting's connect-the-dots bound, both directions)."""
    return max(plm.GaussianPrivacyLoss(1.0, sensitivity=mu0, sampling_prob=sample_rate, adjacency_type=adjacency,
                                       log_mass_truncation_bound=_LOG_MASS_TRUNCATION).connect_dots_bounds()
               .epsilon_upper for adjacency in (plm.AdjacencyType.REMOVE, plm.AdjacencyType.ADD))


def grid_interval(steps: Iterable[tuple[float, float, int]], interval: float = DISCRETIZATION) -> float:
    """The one discretisation a composition of steps is built on: ``interval``, scaled up by a power of 2 where the
    steps' losses, or their composition's, span more than the grid was sized for.

    A large ε spreads the losses: one step's over ±μ0²/2 and more (a large
    μ0), a composition's over about μ²/2 + 10 μ, μ its Gaussian-DP summary
    (:func:`gdp_mu`, summed in squares over the kinds of steps). The
    composition's cost grows with the grid (at ε = 100, one round: 2 × 1.1
    million points a step, most of a fit's time). ``interval`` is then
    multiplied by the next power of 2 of the larger of span / 13.1 (one
    step: :data:`MAX_GRID_POINTS` cells of :data:`DISCRETIZATION`) and
    composed span / 20 (200,000 cells); below both, that is up to an ε of
    about 7 for a long run, nothing changes. Every bound stays an upper bound (the
    discretisation is pessimistic at any width; the tests check the
    calibrated ε within 1 % of prv-accountant's at 26 targets up to 100).
    All the steps of a composition share the grid (dp-accounting composes
    equal grids only), and a calibration reads its steps on the grid a
    ledger of those steps reads them on, so a calibrated run certifies what it
    was calibrated for. Powers of 2 keep the grid of a growing ledger (the
    per-round history) from changing but a few times a run.

    Parameters
    ----------
    steps : iterable of (float, float, int)
        (μ0, q, number of steps) of every kind of step composed; infinite μ0 are ignored.
    interval : float, default=DISCRETIZATION

    Returns
    -------
    float
    """
    kinds = [(float(mu0), float(rate), int(n)) for mu0, rate, n in steps if math.isfinite(mu0)]
    step_span = max((_loss_span(mu0, rate) for mu0, rate, _ in kinds), default=0.0)
    mu = math.sqrt(sum(gdp_mu(min(mu0, 20.0), rate, n) ** 2 for mu0, rate, n in kinds))  # e^{μ0²} stays finite
    ratio = max(1.0, step_span / (MAX_GRID_POINTS * DISCRETIZATION), (mu * mu / 2 + 10 * mu) / _COMPOSED_SPAN)
    return float(interval) * 2.0 ** min(math.ceil(math.log2(ratio)), _MAX_DOUBLINGS)


def _epsilon(mu0, sample_rate, steps, delta, sampling, interval=DISCRETIZATION) -> float:
    pld = single_step_pld(mu0, sample_rate, sampling, grid_interval([(mu0, sample_rate, steps)], interval))
    return float(pld.self_compose(int(steps)).get_epsilon_for_delta(delta))


@validate_params(_COMMON_CONSTRAINTS, prefer_skip_nested_validation=True)
def epsilon_spent(
    mu0, sample_rate, steps, delta, sampling="fixed", *, discretization=DISCRETIZATION
) -> float:
    """Certified ε after ``steps`` private local steps, an upper bound.

    Parameters
    ----------
    mu0 : float
        Per-step Gaussian-DP parameter μ0 = 2C / (Bσ) (docs: the method, privacy accounting), > 0.
    sample_rate : float
        q = B / m⋆ in (0, 1], m⋆ the size of the smallest client.
    steps : int
        Number of composed local steps T τ, >= 1.
    delta : float
        Target δ in (0, 1).
    sampling : {"fixed", "poisson"}, default="fixed"
        Batch sampling scheme the steps used (see the module docstring).
    discretization : float, default=DISCRETIZATION
        Grid step of the privacy-loss distribution; smaller is tighter and
        slower. The result is an upper bound for every value.

    Returns
    -------
    epsilon : float
        The smallest ε >= 0 with the composition (ε, δ)-DP under record
        substitution, rounded up by the pessimistic discretisation; ``inf``
        when δ is below the mass the accountant cannot bound.

    Examples
    --------
    >>> round(epsilon_spent(1 / 16.9, 0.1, 2000, 1e-5), 3)
    1.01
    """
    return _epsilon(mu0, sample_rate, steps, delta, sampling, discretization)


@validate_params(
    {"eps": [Interval(Real, 0, MAX_EPSILON, closed="right")], **_COMMON_CONSTRAINTS},
    prefer_skip_nested_validation=True,
)
def calibrate_mu0(
    eps, delta, sample_rate, steps, sampling="fixed", *, rtol=1e-4, discretization=DISCRETIZATION
) -> float:
    """Largest per-step μ0 whose certified ε (by :func:`epsilon_spent`) is <= eps.

    The noise std of a step with clip C and batch size B is then
    σ = 2C / (B μ0).

    Parameters
    ----------
    eps : float
        Target ε > 0.
    delta : float
        Target δ in (0, 1).
    sample_rate : float
        q = B / m⋆ in (0, 1].
    steps : int
        Total number of local steps T τ to be composed.
    sampling : {"fixed", "poisson"}, default="fixed"
    rtol : float, default=1e-4
        Relative tolerance on ε: the returned μ0 certifies an ε in
        [eps (1 − rtol), eps], so ε(μ0) <= eps always holds (for an ε of a few
        grid steps, as close below eps as the grid allows).
    discretization : float, default=DISCRETIZATION
        Grid step of the privacy-loss distribution (see :func:`epsilon_spent`).

    Returns
    -------
    mu0 : float

    Raises
    ------
    ValueError
        When ``delta`` is at least the chance that a record is ever sampled,
        1 − (1 − q)^steps: no noise is then needed for (ε, δ), which
        certifies nothing.

    Examples
    --------
    >>> mu0 = calibrate_mu0(1.0, 1e-5, 0.1, 2000)
    >>> epsilon_spent(mu0, 0.1, 2000, 1e-5) <= 1.0
    True
    """
    ever_sampled = 1.0 if sample_rate >= 1 else -math.expm1(steps * math.log1p(-sample_rate))  # 1 − (1 − q)^steps
    if delta >= ever_sampled:
        raise ValueError(f"delta={delta!r} is at least the chance that a record is sampled at all in {steps} steps at "
                         f"rate {sample_rate:.3g}: every noise level certifies eps=0 at that delta (a record may be "
                         "released in the clear with that probability). Ask for a much smaller delta.")
    return _calibrate(float(eps), float(delta), float(sample_rate), int(steps), sampling, float(rtol),
                      float(discretization))


@lru_cache(maxsize=256)
def _calibrate(eps: float, delta: float, sample_rate: float, steps: int, sampling: str, rtol: float,
               discretization: float) -> float:
    """:func:`calibrate_mu0` (cached: refits, cross-validation folds and audits reuse it)."""

    def excess(log_mu0: float, grid: float) -> float:
        return _epsilon(math.exp(log_mu0), sample_rate, steps, delta, sampling, grid) - eps

    # Stage 1: solve on a 10x coarser grid (fast, and within ~0.3 % in ε).
    # Below ε = 1 the coarse grid's pessimism is a large part of ε (at ε = 0.1, 4200 steps: 0.1 against 0.06 on the
    # target grid), which sends the second stage's Newton steps astray: there it shrinks to ε · 10 grid steps.
    coarse = discretization * min(10.0, max(1.0, 10.0 * eps))
    lo = hi = math.log(_clt_mu0(eps, delta, sample_rate, steps))
    while excess(lo, coarse) > 0:  # ε is increasing in μ0: bracket in log μ0
        lo -= math.log(2.0)
        if lo < math.log(1e-8):
            smallest = _epsilon(1e-8, sample_rate, steps, delta, sampling, discretization)
            raise ValueError(
                f"eps={eps!r} is too small to certify at delta={delta!r} with {steps} steps at sampling rate "
                f"{sample_rate:.3g}: even a per-step mu0 of 1e-8 spends epsilon={smallest:.3g} on the accountant's "
                f"grid (discretization={discretization:g}). Ask for eps >= {smallest:.3g}, or pass a finer "
                "discretization.")
    while excess(hi, coarse) <= 0:
        lo, hi = hi, hi + math.log(2.0)
        if hi > math.log(1e4):
            return math.exp(lo)
    x = brentq(lambda t: excess(t, coarse), lo, hi, xtol=1e-6) if lo < hi else lo
    h = 1e-3
    slope = (excess(x + h, coarse) - excess(x - h, coarse)) / (2 * h)  # dε / dlog μ0 > 0

    # Stage 2: Newton steps on the target grid, aimed just below eps, so the
    # result certifies eps on that grid and sits within rtol of the largest μ0.
    for _ in range(20):
        f = excess(x, discretization)
        if -rtol * eps <= f <= 0:
            return math.exp(x)
        x -= (f + 0.5 * rtol * eps) / slope
    # An ε of a few grid steps moves in jumps of the grid, which Newton's steps cannot land between:
    # bisect in log μ0 for the largest μ0 the grid certifies (ε <= eps, as close below as the grid allows).
    lo, hi = x - math.log(2.0), x + math.log(2.0)
    while excess(lo, discretization) > 0:
        lo -= math.log(2.0)
    while excess(hi, discretization) <= 0:
        hi += math.log(2.0)
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid, discretization) <= 0 else (lo, mid)
    return math.exp(lo)


def gdp_mu(mu0: float, sample_rate: float, steps: int) -> float:
    """Central-limit summary μ_tot ≈ q √(steps (e^{μ0²} − 1)) (Dong et al. 2022).

    An approximation for reading results, never used to certify anything: the
    certified figure is :func:`epsilon_spent`. It grows like √steps, depends on
    C/σ only, and shrinks with the smallest client (docs: the method, privacy accounting).

    Parameters
    ----------
    mu0 : float
    sample_rate : float
    steps : int

    Returns
    -------
    mu_tot : float
    """
    return sample_rate * math.sqrt(steps * math.expm1(mu0 * mu0))


def gdp_epsilon(mu: float, delta: float) -> float:
    """Exact (ε, δ) conversion of μ-GDP: the ε with δ(ε) = ``delta``.

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth & Su, 2022, Cor. 1).

    Parameters
    ----------
    mu : float
        The GDP parameter, > 0.
    delta : float

    Returns
    -------
    epsilon : float

    Examples
    --------
    >>> round(gdp_epsilon(1.0, 1e-5), 2)
    4.38
    """

    def delta_of(eps: float) -> float:
        return _gdp_delta(eps, mu)

    if delta_of(0.0) <= delta:
        return 0.0
    hi = 1.0
    while delta_of(hi) > delta:
        hi *= 2
    return brentq(lambda e: delta_of(e) - delta, 0.0, hi, xtol=1e-12)


def gdp_mu_for_epsilon(eps: float, delta: float) -> float:
    """The μ of μ-GDP whose exact (ε, δ) conversion (:func:`gdp_epsilon`) is ``eps`` at ``delta``.

    Parameters
    ----------
    eps : float
        > 0.
    delta : float

    Returns
    -------
    mu : float

    Examples
    --------
    >>> round(gdp_mu_for_epsilon(gdp_epsilon(1.0, 1e-5), 1e-5), 6)
    1.0
    """
    hi = 1.0
    while _gdp_delta(eps, hi) < delta:
        hi *= 2
    return brentq(lambda mu: _gdp_delta(eps, mu) - delta, 1e-9, hi, xtol=1e-12)


def _gdp_delta(eps: float, mu: float) -> float:
    """δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (the second term in log space: e^ε overflows past 709)."""
    return norm.cdf(-eps / mu + mu / 2) - math.exp(min(eps + norm.logcdf(-eps / mu - mu / 2), 709.0))


def _clt_mu0(eps: float, delta: float, sample_rate: float, steps: int) -> float:
    """Starting point for calibration: invert the GDP central-limit summary."""

    def delta_of(mu: float) -> float:
        return _gdp_delta(eps, mu)

    mu_tot = brentq(lambda m: delta_of(m) - delta, 1e-6, 100.0) if delta_of(100.0) > delta else 100.0
    return max(1e-6, math.sqrt(math.log1p((mu_tot / sample_rate) ** 2 / steps)))
