"""What a record-level run guarantees for a group of k records, e.g. a subject's k trials (docs: what is protected).

A record-level run is f-DP for the tradeoff function f of its ledger (the
composition its accountant certifies); by group privacy (Dong, Roth & Su
2022, Gaussian differential privacy, Theorem 2.14) it is then

    g_k = 1 − (1 − f)^{∘k}

-DP for any two federations that differ in k records, whatever those records
are and wherever they sit. For a μ-GDP run this is (k μ)-GDP: a subject with
288 trials at μ = 0.5 is protected as a single trial at μ = 144 would be,
that is, not at all. :func:`group_epsilon` computes g_k pointwise from the
ledger's certified privacy curve and reads its ε at δ. Every approximation
is on the safe side: f is bounded from below by finitely many of its (ε, δ)
supporting lines, 1 − f is iterated exactly at each point, and the
conversion back to (ε, δ) takes each grid cell's worst corner, so the result
is an upper bound (tests compare it with the exact k μ of a Gaussian
mechanism: within ln 1.03 up to k μ ≈ 3, looser beyond, where the
accountant's curve stops at δ ≈ 1e-20). The generic (kε, k e^{(k−1)ε} δ)
lemma over the same curve is also computed, and the smaller of the two
returned.

Not the tight bound a subsampled run admits for a group (the mixture-of-
Gaussians accountants of Ganesh 2024 and Charles et al. 2024 take the
sampling of the group's records into account): this one holds for any
mechanism with the ledger's curve, and is what the library can certify today.
To protect a person for what they are, train with ``privacy_unit="subject"``.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from .._utils.compat import Interval, validate_params
from .ledger import PrivacyAccountant, _steps_pld
from .subsampled_gaussian import DISCRETIZATION, MIN_DELTA

__all__ = ["group_epsilon"]

#: Supporting lines of the run's tradeoff function, and points where 1 − f is iterated.
_N_LINES, _N_POINTS = 1500, 2500
#: The smallest type I error the group's tradeoff curve is followed from (the grid's first cell starts at 0).
_SMALLEST_ALPHA = 1e-30
#: The largest ε of a supporting line: e^ε must stay finite in double precision.
_LARGEST_LINE = 700.0


@validate_params(
    {"ledger": [PrivacyAccountant], "group_size": [Interval(Integral, 1, None, closed="left")],
     "delta": [Interval(Real, MIN_DELTA, 1, closed="neither")]},
    prefer_skip_nested_validation=True,
)
def group_epsilon(ledger: PrivacyAccountant, group_size: int, delta: float) -> float:
    """Certified ε at ``delta`` of a record-level run's ledger for any group of ``group_size`` records.

    Parameters
    ----------
    ledger : PrivacyAccountant
        What the run charged (a fitted estimator's ``ledger_``).
    group_size : int
        k, e.g. the most trials one subject contributed to the run.
    delta : float

    Returns
    -------
    float
        An upper bound on ε for substituting any k records; for k = 1, the
        ledger's own ε. inf for a run that was not private, and where the
        ledger's certified curve (followed down to δ ≈ 1e-20, where its
        accountant stops) cannot certify the group at ``delta``: for a subject
        of hundreds of trials at a record-level ε of a few units, nothing is
        certified, and (k μ-GDP) nothing meaningful holds.

    Examples
    --------
    >>> ledger = PrivacyAccountant()
    >>> ledger.step(mu0=0.5, sample_rate=1.0, num_steps=1)  # a 0.5-GDP release
    >>> round(group_epsilon(ledger, 1, 1e-5), 2), round(group_epsilon(ledger, 4, 1e-5), 2)
    (1.99, 10.02)
    """
    if not ledger.private:
        return math.inf
    if not ledger.history:
        return 0.0
    if group_size == 1:
        return ledger.get_epsilon(delta)
    composed = _composed(ledger)
    return min(_tradeoff_group_epsilon(composed, group_size, delta), _lemma_group_epsilon(composed, group_size, delta))


def _composed(ledger: PrivacyAccountant):
    """The privacy-loss distribution of everything the ledger holds."""
    composed = None
    for entry in ledger.history:
        pld = _steps_pld(entry.mu0, entry.sample_rate, entry.sampling, entry.steps, DISCRETIZATION)
        composed = pld if composed is None else composed.compose(pld)
    return composed


def _tradeoff_group_epsilon(composed, group_size: int, delta: float) -> float:
    """ε at δ of 1 − (1 − f)^{∘k} (module docstring), inf where the grid certifies nothing."""
    lines = _supporting_lines(composed)
    if lines is None:
        return math.inf
    alphas = np.concatenate([[0.0], np.logspace(math.log10(_SMALLEST_ALPHA), 0.0, _N_POINTS)])
    reached = alphas
    for _ in range(group_size):
        reached = _one_minus_f(reached, *lines)
        # 1 − g only grows with k: once its first cell alone exceeds δ (or a value is not a number), no ε holds
        if not (reached[1] <= delta and np.isfinite(reached).all()):
            return math.inf
    return _epsilon_at(alphas, reached, delta)


def _lemma_group_epsilon(composed, group_size: int, delta: float) -> float:
    """The generic lemma's ε: the least k ε(δ') over the run's curve with k e^{(k−1) ε(δ')} δ' ≤ δ (Dwork & Roth,
    2014, Theorem 2.2). Also an upper bound, and the tighter one where the tradeoff grid runs out."""
    best = math.inf
    for record_delta in np.logspace(math.log10(MIN_DELTA), math.log10(delta / group_size), 40):
        eps = float(composed.get_epsilon_for_delta(float(record_delta)))
        if math.isfinite(eps) and (group_size - 1) * eps < 700 \
                and group_size * math.exp((group_size - 1) * eps) * record_delta <= delta:
            best = min(best, group_size * eps)
    return best


def _supporting_lines(composed) -> tuple[np.ndarray, np.ndarray] | None:
    """(ε_j, δ(ε_j)) on a grid of the composed privacy curve (each a valid guarantee of the run), up to where δ
    reaches the mass the PLD truncated (about 2e-22, charged to every δ) and below e^700 (beyond, e^ε overflows);
    None when the curve is nowhere finite there."""
    top = next((e for d in (1e-20, 1e-16, 1e-12) if math.isfinite(e := float(composed.get_epsilon_for_delta(d)))),
               None)
    if top is None:
        return None
    top = min(max(top, 1.0), _LARGEST_LINE)
    eps = np.linspace(0.0, top, _N_LINES)
    if 2 * top <= _LARGEST_LINE:
        eps = np.concatenate([eps, [2 * top]])
    deltas = np.asarray(composed.get_delta_for_epsilon(eps), dtype=float)
    return eps, np.where(np.isfinite(deltas), np.clip(deltas, 0.0, 1.0), 1.0)  # a δ of 1 is a line that bounds nothing


def _one_minus_f(alpha: np.ndarray, line_eps: np.ndarray, line_delta: np.ndarray) -> np.ndarray:
    """1 − f(α), with f bounded below by the lines 1 − δ_j − e^{ε_j} α and e^{−ε_j}(1 − δ_j − α) of every
    (ε_j, δ_j) guarantee (so the value is an upper bound of the true 1 − f)."""
    a = alpha[:, None]
    first = 1.0 - line_delta - np.exp(line_eps) * a
    second = np.exp(-line_eps) * (1.0 - line_delta - a)
    f_lower = np.maximum(np.maximum(first, second).max(axis=1), 0.0)
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
