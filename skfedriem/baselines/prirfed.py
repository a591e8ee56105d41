"""PriRFed (Huang et al., 2026), the closest prior method: its accounting and its intrinsic noise.

Accounting. Each round, a client runs τ Poisson-subsampled Gaussian steps
(rate q, add/remove adjacency), accounted tightly with dp-accounting's
privacy-loss distributions at δ_r = δ / (2T); the T rounds are then composed
with the advanced composition theorem (Dwork, Rothblum & Vadhan, 2010) at
δ̂ = δ / 2, so T δ_r + δ̂ = δ. Client sampling gives no amplification. Adjacency is
the substitution of one record for both methods, so a step's clipped
mean moves by at most 2C / B: PriRFed's step is the Poisson-subsampled Gaussian
of sensitivity 2C / B, i.e. noise multiplier σB / (2C) = 1 / μ0 in the
convention μ0 = 2C / (Bσ) of :func:`skfedriem.privacy.calibrate_mu0`, accounted
with dp-accounting's add/remove privacy-loss distribution (both directions).
With this convention the noise ratio lands at the paper's 5–6x
(``benchmarks/noise_ratio.py``); an add/remove sensitivity of C / B instead
would halve PriRFed's noise.

Noise. PriRFed draws Gaussian coefficients in an orthonormal basis of the
tangent space at the current iterate (:func:`intrinsic_tangent_noise`).
"""

from __future__ import annotations

import math
from functools import lru_cache
from numbers import Integral, Real

import torch
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy.optimize import brentq

from .._utils.compat import Interval, validate_params
from ..manifolds import Euclidean, Manifold, Sphere, Stiefel
from ..privacy import DISCRETIZATION, PrivacyAccountant
from ..privacy.accounting.accounting_methods import RunAccounting, register_accounting

__all__ = ["PriRFedAccounting", "advanced_composition", "intrinsic_tangent_noise", "prirfed_calibrate_mu0",
           "prirfed_epsilon"]

_CONSTRAINTS = {
    "delta": [Interval(Real, 0, 1, closed="neither")],
    "sample_rate": [Interval(Real, 0, 1, closed="right")],
    "local_steps": [Interval(Integral, 1, None, closed="left")],
    "rounds": [Interval(Integral, 1, None, closed="left")],
}


def advanced_composition(eps_round: float, rounds: int, delta_hat: float) -> float:
    """ε of ``rounds`` adaptive compositions of ε_r-DP mechanisms (extra δ = δ̂).

    ε = √(2 T ln(1/δ̂)) ε_r + T ε_r (e^{ε_r} − 1)  (Dwork, Rothblum & Vadhan, 2010).

    Parameters
    ----------
    eps_round : float
        ε_r of each mechanism.
    rounds : int
        T.
    delta_hat : float
        δ̂, the δ the composition adds.

    Returns
    -------
    float

    Examples
    --------
    >>> round(advanced_composition(0.1, 100, 1e-5), 2)
    5.85
    """
    return math.sqrt(2 * rounds * math.log(1 / delta_hat)) * eps_round + rounds * eps_round * math.expm1(eps_round)


@lru_cache(maxsize=256)
def _round_epsilon(mu0: float, sample_rate: float, local_steps: int, delta_round: float, interval: float) -> float:
    step = pld_lib.from_gaussian_mechanism(
        1.0,
        sensitivity=mu0,
        sampling_prob=sample_rate,
        value_discretization_interval=interval,
        neighboring_relation=pld_lib.NeighborRel.ADD_OR_REMOVE_ONE,
    )
    return float(step.self_compose(local_steps).get_epsilon_for_delta(delta_round))


@validate_params({"mu0": [Interval(Real, 0, None, closed="neither")], **_CONSTRAINTS},
                 prefer_skip_nested_validation=True)
def prirfed_epsilon(mu0, delta, sample_rate, local_steps, rounds, *, total_rounds=None,
                    discretization=DISCRETIZATION) -> float:
    """ε certified by PriRFed's accounting after ``rounds`` rounds of τ local steps.

    Parameters
    ----------
    mu0 : float
        Per-step parameter 2C / (Bσ) (our convention).
    delta : float
        The run's δ in (0, 1).
    sample_rate : float
        q, the Poisson sampling rate.
    local_steps : int
        τ steps per round.
    rounds : int
        Rounds composed so far.
    total_rounds : int, optional
        T, which fixes δ_r = δ / (2T); default ``rounds``.
    discretization : float, default=DISCRETIZATION

    Returns
    -------
    epsilon : float

    Examples
    --------
    >>> round(prirfed_epsilon(0.05, 1e-5, 0.1, 10, 200), 2)
    5.99
    """
    total = rounds if total_rounds is None else total_rounds
    eps_round = _round_epsilon(float(mu0), float(sample_rate), int(local_steps), delta / (2 * total),
                               float(discretization))
    return advanced_composition(eps_round, rounds, delta / 2)


@validate_params({"eps": [Interval(Real, 0, None, closed="neither")], **_CONSTRAINTS},
                 prefer_skip_nested_validation=True)
def prirfed_calibrate_mu0(eps, delta, sample_rate, local_steps, rounds, *, discretization=DISCRETIZATION) -> float:
    """Largest μ0 = 2C / (Bσ) for which PriRFed's accounting certifies ``eps`` after ``rounds``.

    Same convention as :func:`skfedriem.privacy.calibrate_mu0`, so
    ``calibrate_mu0(...) / prirfed_calibrate_mu0(...)`` is the noise ratio
    σ_PriRFed / σ_ours.

    Parameters
    ----------
    eps : float
        Target ε, > 0.
    delta : float
        Target δ, in (0, 1).
    sample_rate : float
        q, in (0, 1].
    local_steps : int
        τ.
    rounds : int
        T.
    discretization : float, default=1e-4
        The PLD grid of each round's accountant.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        When even μ0 = 1e-8 spends more than ``eps``.

    Examples
    --------
    >>> mu0 = prirfed_calibrate_mu0(5.0, 1e-5, 0.1, 10, 200)
    >>> prirfed_epsilon(mu0, 1e-5, 0.1, 10, 200) <= 5.0
    True
    """

    def excess(log_mu0: float) -> float:
        return prirfed_epsilon(math.exp(log_mu0), delta, sample_rate, local_steps, rounds,
                               discretization=discretization) - eps

    lo = hi = math.log(0.1)
    while excess(lo) > 0:
        lo -= math.log(2.0)
        if lo < math.log(1e-8):
            raise ValueError(f"PriRFed cannot certify eps={eps!r} at delta={delta!r}: even mu0=1e-8 spends more.")
    while excess(hi) <= 0:
        lo, hi = hi, hi + math.log(2.0)
        if hi > math.log(1e4):
            return math.exp(lo)
    x = brentq(excess, lo, hi, xtol=1e-7)
    while excess(x) > 0:  # land on the certified side of eps
        x -= 1e-7
    return math.exp(x)


class PriRFedAccounting(RunAccounting):
    """PriRFed's accounting as a method estimators take by name (``accounting="prirfed"``; Poisson sampling).

    The ledger's steps must share one (μ0, q): PriRFed's per-round bound has
    no heterogeneous composition.

    Examples
    --------
    >>> from skfedriem.privacy import get_accounting
    >>> ours, theirs = get_accounting("rfedproj"), get_accounting("prirfed")
    >>> plan = dict(sample_rate=0.1, steps_per_round=10, n_rounds=200, sampling="poisson")
    >>> ratio = ours.calibrate(1.0, 1e-5, **plan) / theirs.calibrate(1.0, 1e-5, **plan)
    >>> round(ratio, 1)   # σ_PriRFed / σ_ours: the noise PriRFed needs for the same ε
    5.5
    """

    name = "prirfed"
    samplings = ("poisson",)

    def calibrate(self, eps, delta, *, sample_rate, steps_per_round, n_rounds, sampling):
        return prirfed_calibrate_mu0(eps, delta, sample_rate, steps_per_round, n_rounds)

    def epsilon(self, ledger: PrivacyAccountant, delta, *, steps_per_round, n_rounds, discretization=DISCRETIZATION):
        if not ledger.history:
            return 0.0
        if len({(e.mu0, e.sample_rate) for e in ledger.history}) > 1:
            raise ValueError("PriRFed's accounting needs every step at one (mu0, q); this ledger mixes several.")
        last = ledger.history[-1]
        rounds = max(1, -(-ledger.steps // steps_per_round))  # a partial round counts as one (conservative)
        return prirfed_epsilon(last.mu0, delta, last.sample_rate, steps_per_round, rounds,
                               total_rounds=max(n_rounds, rounds), discretization=discretization)


register_accounting(PriRFedAccounting())


def intrinsic_tangent_noise(manifold: Manifold, X: torch.Tensor, std: float, *,
                            generator: torch.Generator | None = None) -> torch.Tensor:
    """Σ_b c_b E_b with c_b ~ N(0, std²) iid and (E_b) an orthonormal basis of T_X M.

    PriRFed's noise. Bases (induced metric): Stiefel, X (e_i e_jᵀ − e_j e_iᵀ)/√2
    (i < j) and X_⊥ e_k e_lᵀ; sphere, an orthonormal basis of x^⊥; Euclidean,
    the standard basis. For these the law equals that of P_X(Z), Z ~ N(0, std² I)
    (tested), which is what our mechanism draws.

    Parameters
    ----------
    manifold : Stiefel, Sphere or Euclidean
    X : torch.Tensor
        A point of the manifold.
    std : float
    generator : torch.Generator, optional

    Returns
    -------
    noise : torch.Tensor, same shape as X
    """
    def gaussian(*shape):
        return std * torch.randn(*shape, generator=generator, dtype=X.dtype, device=X.device)

    if isinstance(manifold, Euclidean):
        return gaussian(*X.shape)
    if isinstance(manifold, Sphere):
        x = X.reshape(-1)
        complement = _orthonormal_complement(x.unsqueeze(1))
        return (complement @ gaussian(complement.shape[1])).reshape(X.shape)
    if isinstance(manifold, Stiefel):
        n, p = X.shape
        upper = torch.triu(gaussian(p, p), diagonal=1) / math.sqrt(2)
        omega = upper - upper.T
        complement = _orthonormal_complement(X)
        return X @ omega + complement @ gaussian(n - p, p)
    raise TypeError(f"intrinsic_tangent_noise supports Stiefel, Sphere and Euclidean. Got {manifold!r} instead.")


def _orthonormal_complement(X: torch.Tensor) -> torch.Tensor:
    """Orthonormal columns spanning range(X)^⊥, for X (n, p) with orthonormal columns."""
    n, p = X.shape
    # Householder QR of [X, I] gives a full orthogonal Q whose first p columns span range(X)
    Q, _ = torch.linalg.qr(torch.cat([X, torch.eye(n, dtype=X.dtype, device=X.device)], dim=1))
    return Q[:, p:]
