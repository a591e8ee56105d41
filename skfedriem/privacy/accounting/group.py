"""What a run guarantees a group of k of its units, e.g. a subject's k trials in a record-level run (docs: what is
protected).

A run is f-DP for the tradeoff function f of its ledger (the composition its
accountant certifies); by group privacy (Dong, Roth & Su 2022, Gaussian
differential privacy, Theorem 2.14) it is then g_k = 1 − (1 − f)^{∘k}-DP for
any two federations that differ by substituting k records, whatever those
records are and wherever they sit (:func:`~skfedriem.privacy.accounting.chaining.chained_epsilon`:
tests compare it with the exact k μ of a Gaussian mechanism, within ln 1.03 up
to k μ ≈ 3). For a μ-GDP run this is (k μ)-GDP: a subject with 288 trials at
μ = 0.5 is protected as a single trial at μ = 144 would be, that is, not at
all. For Poisson steps it is close to a concrete pair of datasets
(:func:`~skfedriem.audit.subject_pair_epsilon`; ``benchmarks/group_charge.py``).

Whether a person took part at all (adding or removing their records) is not
certified: a client's sampling rate q = B / m follows its own size, so a
federation without the person samples everyone else at another rate, and an
accountant of a fixed rate understates what that reveals. To protect a
person, train with ``privacy_unit="subject"``.
"""

from __future__ import annotations

import math
from functools import lru_cache
from numbers import Integral, Real

from ..._utils.compat import Interval, StrOptions, validate_params
from .chaining import chained_epsilon
from .ledger import PrivacyAccountant, _steps_pld
from .subsampled_gaussian import DISCRETIZATION, MAX_EPSILON, MIN_DELTA, calibrate_mu0, grid_interval

__all__ = ["calibrate_group_mu0", "group_epsilon"]


@validate_params(
    {"ledger": [PrivacyAccountant], "group_size": [Interval(Integral, 1, None, closed="left")],
     "delta": [Interval(Real, MIN_DELTA, 1, closed="left")]},
    prefer_skip_nested_validation=True,
)
def group_epsilon(ledger: PrivacyAccountant, group_size: int, delta: float) -> float:
    """Certified ε at ``delta`` of a run's ledger for any group of ``group_size`` of its units, substituted.

    Parameters
    ----------
    ledger : PrivacyAccountant
        What the run charged (a fitted estimator's ``ledger_``).
    group_size : int
        k, e.g. the most trials one subject contributed to a record-level run.
        A ledger whose steps already hold groups (``group_size`` of its
        entries, a run of ``records_per_subject``) is chained over k times its
        largest group.
    delta : float

    Returns
    -------
    float
        An upper bound on ε; for k = 1, the ledger's own ε. inf for a run
        that was not private, and where the ledger's certified curve (followed
        down to its rounding error, δ ≈ 1e-14, where a composition's curve
        stops meaning anything) cannot certify the group at ``delta``: for a
        subject of hundreds of trials at a record-level ε of a few units,
        nothing is certified by group privacy, and (k μ-GDP) nothing
        meaningful holds.

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
    if ledger.discrete:
        raise ValueError(f"A group of {group_size} is certified by group privacy over the privacy-loss distribution "
                         "of Gaussian steps; this ledger holds distributed-noise (Skellam) steps, composed by Rényi "
                         "DP, which certifies one record or subject.")
    return chained_epsilon(_composed(ledger), group_size * ledger.group_size, delta)


@validate_params(
    {"eps": [Interval(Real, 0, MAX_EPSILON, closed="right")], "delta": [Interval(Real, MIN_DELTA, 1, closed="left")],
     "sample_rate": [Interval(Real, 0, 1, closed="right")], "steps": [Interval(Integral, 1, None, closed="left")],
     "group_size": [Interval(Integral, 1, None, closed="left")], "sampling": [StrOptions({"fixed", "poisson"})]},
    prefer_skip_nested_validation=True,
)
def calibrate_group_mu0(eps: float, delta: float, sample_rate: float, steps: int, group_size: int,
                        sampling: str = "fixed", *, rtol: float = 1e-3,
                        discretization: float = DISCRETIZATION) -> float:
    """Largest per-step μ0 whose ``steps`` record-level steps certify (ε, δ) for any group of ``group_size`` records.

    What a run that samples records and is charged per subject (each subject
    owning exactly k of the records) is calibrated with: the ε is the
    ledger's for steps of ``group_size`` k
    (:meth:`~skfedriem.privacy.PrivacyAccountant.get_epsilon`, group privacy of
    the composition), computed exactly as the run will be charged.

    Parameters
    ----------
    eps : float
        Target ε for the group.
    delta : float
    sample_rate : float
        q = B / m⋆, m⋆ counting records (k per subject).
    steps : int
    group_size : int
        k.
    sampling : {"fixed", "poisson"}, default="fixed"
    rtol : float, default=1e-3
        The returned μ0 certifies an ε in [eps (1 − rtol), eps] where the
        grid allows (group privacy's curve moves in small jumps). Where a
        group's ε nears the end of the accountant's range (a composed curve
        followed down to δ ≈ 1e-14, its rounding: tens for large groups), the
        chain certifies nothing above some μ0, and the μ0 returned certifies
        less than ``eps``: more noise than needed, never less.
    discretization : float, default=DISCRETIZATION

    Returns
    -------
    mu0 : float

    Raises
    ------
    ValueError
        When no μ0 down to 1e-8 certifies ``eps`` for the group.

    Examples
    --------
    >>> mu0 = calibrate_group_mu0(4.0, 1e-5, 0.1, 300, 4)
    >>> ledger = PrivacyAccountant(); ledger.step(mu0=mu0, sample_rate=0.1, num_steps=300, group_size=4)
    >>> 3.99 <= ledger.get_epsilon(1e-5) <= 4.0
    True
    """
    if group_size == 1:
        return calibrate_mu0(eps, delta, sample_rate, steps, sampling, discretization=discretization)
    return _calibrate_group(float(eps), float(delta), float(sample_rate), int(steps), int(group_size), sampling,
                            float(rtol), float(discretization))


@lru_cache(maxsize=128)
def _calibrate_group(eps: float, delta: float, sample_rate: float, steps: int, group_size: int, sampling: str,
                     rtol: float, discretization: float) -> float:
    """:func:`calibrate_group_mu0` (cached: cross-validation folds and grid-search candidates reuse it)."""

    def spent(log_mu0: float, grid: float) -> float:
        ledger = PrivacyAccountant()
        ledger.step(mu0=math.exp(log_mu0), sample_rate=sample_rate, num_steps=steps, sampling=sampling,
                    group_size=group_size)
        return ledger.get_epsilon(delta, discretization=grid)

    # Stage 1, on a 10x coarser grid (ten times faster, and more pessimistic): bracket and bisect to 1 % in μ0.
    # A group's ε is at least one record's, so the record-level calibration bounds μ0 from above.
    coarse = 10 * discretization
    hi = math.log(calibrate_mu0(eps, delta, sample_rate, steps, sampling, discretization=discretization))
    lo = hi - math.log(group_size)  # about where a Gaussian's k μ would be
    while spent(lo, coarse) > eps:
        lo -= math.log(2.0)
        if lo < math.log(1e-8):
            raise ValueError(f"eps={eps!r} cannot be certified at delta={delta!r} for groups of {group_size} records "
                             f"over {steps} steps at sampling rate {sample_rate:.3g}, even at a per-step mu0 of 1e-8: "
                             "ask for a larger eps, or fewer records per subject.")
    if spent(hi, discretization) <= eps:
        return math.exp(hi)
    while hi - lo > 1e-2:
        middle = 0.5 * (lo + hi)
        lo, hi = (middle, hi) if spent(middle, coarse) <= eps else (lo, middle)
    # Stage 2, on the target grid: bisect from the coarse answer up to the first μ0 it does not certify, stopping
    # within rtol below eps (the chained curve moves in small steps a secant would not land between).
    value = spent(lo, discretization)
    while value > eps:  # the finer grid certifies no more than the coarse one only by exception
        lo -= 1e-2
        value = spent(lo, discretization)
    hi = max(hi, lo + 1e-2)
    while value < eps * (1 - rtol) and (trial := spent(hi, discretization)) <= eps:  # the fine grid certifies more
        lo, value, hi = hi, trial, hi + 2 * (hi - lo)
    while hi - lo > 1e-6 and value < eps * (1 - rtol):
        middle = 0.5 * (lo + hi)
        trial = spent(middle, discretization)
        if trial <= eps:
            lo, value = middle, trial
        else:
            hi = middle
    return math.exp(lo)


def _composed(ledger: PrivacyAccountant):
    """The privacy-loss distribution of everything the ledger holds."""
    composed = None
    interval = grid_interval([(entry.mu0, entry.sample_rate, entry.steps) for entry in ledger.history])
    for entry in ledger.history:
        pld = _steps_pld(entry.mu0, entry.sample_rate, entry.sampling, entry.steps, interval)
        composed = pld if composed is None else composed.compose(pld)
    return composed
