"""A pure, serialisable privacy accountant the training loop advances."""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from dataclasses import asdict, dataclass
from functools import lru_cache
from numbers import Integral, Real

import numpy as np

from ..._utils.compat import Interval, StrOptions, validate_params
from .chaining import chained_epsilon
from .pld_reading import epsilon_for_delta
from .skellam import PLD_INTERVAL, compose_while_certifying, discrete_epsilon, renyi_epsilon, step_pld
from .subsampled_gaussian import DISCRETIZATION, MIN_DELTA, grid_interval, single_step_pld

__all__ = ["MIXED_DELTA_SHARES", "PrivacyAccountant", "RunningEpsilon"]

#: A ledger of Gaussian and Skellam steps: the shares of δ its Gaussian steps' privacy-loss distribution may take
#: (the Skellam steps' Rényi DP the rest); the smallest ε of them, and of every step by Rényi DP, is certified.
MIXED_DELTA_SHARES = (0.1, 0.5, 0.9, 0.99)


@dataclass(frozen=True)
class _Entry:
    mu0: float
    sample_rate: float
    sampling: str
    steps: int
    group_size: int = 1
    unit: str = "record"
    #: A distributed-noise step's Skellam mechanism, (V, Δ2, Δ1) in the integer domain; () for a Gaussian step.
    skellam: tuple = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "skellam", tuple(float(x) for x in self.skellam))  # a list, read back from JSON

    @property
    def rdp_kind(self) -> tuple:
        """This step as :func:`~skfedriem.privacy.accounting.skellam.discrete_epsilon` reads it."""
        if self.skellam:
            return ("skellam", *self.skellam, self.sample_rate)
        return ("gaussian", self.mu0, self.sample_rate)


class PrivacyAccountant:
    """Ledger of private local steps, reporting the certified ε spent so far.

    Like Opacus' accountants it knows nothing of training: the federated loop
    calls :meth:`step` as rounds complete and :meth:`get_epsilon` to report.
    Steps with different (μ0, q, sampling) compose heterogeneously; the bound
    is the one of :func:`skfedriem.privacy.epsilon_spent` (docs: the method, privacy accounting).
    A step at ``mu0=inf`` is a release without noise (or without clipping):
    it is recorded like any other and makes every ε that includes it infinite.

    Every step carries what it protects, its
    :class:`~skfedriem.privacy.mechanisms.units.PrivacyUnit` (``unit``: ``"record"`` or
    ``"subject"``, and ``group_size``). k is how many of its records one
    protected unit may own: 1 for a record-level step and for a subject-level
    step that samples subjects; k for a subject-level step that samples
    records, each subject holding exactly k of them (``records_per_subject``).
    The ledger's ε is then for substituting one such unit: group privacy over
    the largest k of every step recorded
    (:func:`~skfedriem.privacy.accounting.chaining.chained_epsilon` of the composition;
    docs: what is protected). Every step with a smaller k fits the same chain,
    as a unit owning fewer of its records.

    A step of distributed noise (``skellam=(V, Δ2, Δ1)``: the Skellam
    mechanism of :mod:`skfedriem.privacy.mechanisms.discrete`, its ``mu0`` the
    Gaussian's Δ2 / √V at the same variance, for display) composes by
    :func:`~skfedriem.privacy.accounting.skellam.discrete_epsilon`: the
    smaller of Rényi DP and the privacy-loss distributions that dominate its
    steps. A ledger holding both kinds keeps the smallest of: every step by
    that; the Gaussian steps' own privacy-loss distribution at δ_G plus the
    Skellam steps' ε at δ − δ_G (:data:`MIXED_DELTA_SHARES`; two guarantees
    composed adaptively add their ε and their δ); and, for a record or a
    subject sampled whole, the Gaussian steps' distributions composed with
    the Skellam steps' dominating ones — each an upper bound.

    Examples
    --------
    >>> acc = PrivacyAccountant()
    >>> acc.step(mu0=1 / 16.9, sample_rate=0.1, num_steps=2000)
    >>> round(acc.get_epsilon(1e-5), 3)
    1.01
    >>> acc2 = PrivacyAccountant(); acc2.load_state_dict(acc.state_dict())
    >>> acc2.steps
    2000
    """

    def __init__(self) -> None:
        self.history: list[_Entry] = []

    @validate_params(
        {
            "mu0": [Interval(Real, 0, None, closed="right")],
            "sample_rate": [Interval(Real, 0, 1, closed="right")],
            "num_steps": [Interval(Integral, 0, None, closed="left")],
            "sampling": [StrOptions({"fixed", "poisson"})],
            "group_size": [Interval(Integral, 1, None, closed="left")],
            "unit": [StrOptions({"record", "subject"})],
            "skellam": [tuple],
        },
        prefer_skip_nested_validation=True,
    )
    def step(self, *, mu0: float, sample_rate: float, num_steps: int = 1, sampling: str = "fixed",
             group_size: int = 1, unit: str = "record", skellam: tuple = ()) -> None:
        """Record ``num_steps`` local steps at per-step μ0 (inf: not private) and rate q, each protected ``unit``
        owning up to ``group_size`` of their records; ``skellam=(V, Δ2, Δ1)`` for steps of distributed noise."""
        if num_steps == 0:
            return
        if skellam and (len(skellam) != 3 or group_size != 1 or not all(x > 0 for x in skellam)):
            raise ValueError(f"A Skellam step needs skellam=(V, Δ2, Δ1), all > 0, and group_size=1. "
                             f"Got skellam={skellam!r}, group_size={group_size!r}.")
        last = self.history[-1] if self.history else None
        entry = _Entry(float(mu0), float(sample_rate), sampling, int(num_steps), int(group_size), unit,
                       tuple(skellam))
        if last is not None and dataclasses.replace(last, steps=entry.steps) == entry:
            self.history[-1] = dataclasses.replace(last, steps=last.steps + entry.steps)
        else:
            self.history.append(entry)

    @property
    def steps(self) -> int:
        """Total number of recorded steps."""
        return sum(e.steps for e in self.history)

    @property
    def group_size(self) -> int:
        """The most records one protected unit owns in any recorded step (1: a record, or a sampled subject)."""
        return max((e.group_size for e in self.history), default=1)

    @property
    def unit(self) -> str:
        """What every recorded step protects: ``"subject"`` when each does (a subject-level run), else ``"record"``
        (a ledger holding a record-level step certifies no subject)."""
        subject = self.history and all(e.unit == "subject" for e in self.history)
        return "subject" if subject else "record"

    @property
    def private(self) -> bool:
        """Whether every recorded step added noise (else every ε of this ledger is inf)."""
        return all(math.isfinite(e.mu0) for e in self.history)

    @validate_params(
        {"delta": [Interval(Real, MIN_DELTA, 1, closed="left")]}, prefer_skip_nested_validation=True
    )
    def get_epsilon(self, delta: float, *, discretization: float = DISCRETIZATION) -> float:
        """Certified ε (an upper bound) of everything recorded, at ``delta``.

        A coarser ``discretization`` is faster and still an upper bound, only
        a looser one (the training loop uses 10x the default per round).
        """
        if not self.history:
            return 0.0
        if not self.private:
            return math.inf
        if self.discrete:
            return _discrete_epsilon(self, float(delta), float(discretization))
        return _composed_epsilon(_gaussian_items(self.history), float(delta), float(discretization), self.group_size)

    @property
    def discrete(self) -> bool:
        """Whether a recorded step added distributed (Skellam) noise (composed as :meth:`get_epsilon` says)."""
        return any(e.skellam for e in self.history)

    def extend(self, other: PrivacyAccountant) -> None:
        """Record every step of ``other`` after this ledger's own (composition of the two)."""
        for e in other.history:
            self.step(mu0=e.mu0, sample_rate=e.sample_rate, num_steps=e.steps, sampling=e.sampling,
                      group_size=e.group_size, unit=e.unit, skellam=e.skellam)

    def state_dict(self) -> dict:
        """Plain-Python state (JSON-serialisable)."""
        return {"history": [asdict(e) for e in self.history]}

    def load_state_dict(self, state: dict) -> None:
        """Restore a state produced by :meth:`state_dict`."""
        self.history = [_Entry(**e) for e in state["history"]]

    @classmethod
    def from_state_dict(cls, state: dict) -> PrivacyAccountant:
        """A new accountant holding the steps of ``state``."""
        accountant = cls()
        accountant.load_state_dict(state)
        return accountant

    def __len__(self) -> int:
        return len(self.history)

    def __repr__(self) -> str:
        return f"PrivacyAccountant(steps={self.steps}, entries={len(self.history)})"


@lru_cache(maxsize=1024)
def _composed_epsilon(items: tuple, delta: float, discretization: float, group_size: int = 1) -> float:
    """ε at δ of the composition of ``((mu0, q, sampling), steps)`` items, for a unit owning ``group_size`` of
    their records (cached: refits reuse it)."""
    composed = None
    interval = grid_interval([(mu0, q, steps) for (mu0, q, _), steps in items], discretization)
    for (mu0, q, sampling), steps in items:
        pld = single_step_pld(mu0, q, sampling, interval).self_compose(steps)
        composed = pld if composed is None else composed.compose(pld)
    if group_size > 1:
        return chained_epsilon(composed, group_size, delta)
    return float(composed.get_epsilon_for_delta(delta))


def _discrete_epsilon(ledger: PrivacyAccountant, delta: float, discretization: float) -> float:
    """ε of a ledger holding distributed-noise steps: the Skellam steps by Rényi DP, and Gaussian steps either with
    them or by their privacy-loss distribution, whichever certifies less (a group of records only the latter)."""
    skellam = _merged_steps(e for e in ledger.history if e.skellam)
    gaussian = [e for e in ledger.history if not e.skellam]
    if not gaussian:
        return discrete_epsilon(skellam, delta)
    group = max(e.group_size for e in gaussian)  # a Skellam step carries its group in its sensitivities
    items = _gaussian_items(gaussian)
    bounds = [_composed_epsilon(items, share * delta, discretization, group)
              + discrete_epsilon(skellam, (1 - share) * delta)
              for share in MIXED_DELTA_SHARES if share * delta >= MIN_DELTA]  # the PLD is read only at δ it certifies
    if group == 1:  # Rényi DP composes a record's or a whole subject's steps, not a group's; so do the Skellam
        bounds.append(renyi_epsilon(_merged_steps(ledger.history), delta))  # steps' distributions with the
        bounds.append(_joint_epsilon(items, tuple(sorted(skellam)), delta))  # Gaussians' own ones, at one δ
    return min(bounds, default=math.inf)  # a group at a δ too small to split: no bound here


@lru_cache(maxsize=256)
def _joint_epsilon(gaussian: tuple, skellam: tuple, delta: float) -> float:
    """ε at δ of Gaussian steps (``((mu0, q, sampling), steps)``, their own PLDs) and Skellam steps (``(kind, count)``,
    the PLDs that dominate them) composed as one privacy-loss distribution on the Skellam steps' grid."""
    parts = [(single_step_pld(mu0, q, sampling, PLD_INTERVAL), steps) for (mu0, q, sampling), steps in gaussian]
    return compose_while_certifying(parts + [(step_pld(kind), count) for kind, count in skellam], delta)


def _gaussian_items(entries) -> tuple:
    """``((mu0, q, sampling), steps)`` of every kind of Gaussian step among ``entries``, sorted (a cache key)."""
    merged: dict[tuple, int] = {}
    for e in entries:
        key = (e.mu0, e.sample_rate, e.sampling)
        merged[key] = merged.get(key, 0) + e.steps
    return tuple(sorted(merged.items()))


def _merged_steps(entries) -> list[tuple[tuple, int]]:
    """``(kind, count)`` of every kind of step among ``entries``, as
    :func:`~skfedriem.privacy.accounting.skellam.discrete_epsilon` reads them."""
    merged: dict[tuple, int] = {}
    for e in entries:
        merged[e.rdp_kind] = merged.get(e.rdp_kind, 0) + e.steps
    return list(merged.items())


_RUNNING_CACHE_SIZE = 4096
_RUNNING_VALUES: OrderedDict[tuple, float] = OrderedDict()


@lru_cache(maxsize=64)
def _steps_pld(mu0: float, sample_rate: float, sampling: str, steps: int, discretization: float):
    """The PLD of ``steps`` identical steps on exactly the grid ``discretization`` (cached: every round of a run adds
    the same τ steps)."""
    return single_step_pld(mu0, sample_rate, sampling, discretization).self_compose(steps)


class RunningEpsilon:
    """The ε of a ledger as steps are added to it, composing only the steps added since the last call.

    A training loop reports ε after every round. Recomputing it from the
    whole ledger each time (:meth:`PrivacyAccountant.get_epsilon`) re-composes
    every step and costs more each round; this keeps the composed
    privacy-loss distribution of what it has seen and composes each new round
    onto it (dp-accounting's ``compose``, whose tail truncation is charged to
    the infinite-loss mass, so every value is still an upper bound).

    Parameters
    ----------
    ledger : PrivacyAccountant
        Read, never written; steps are only ever appended to it.
    delta : float
    discretization : float, default=DISCRETIZATION
    chunk : int, optional
        Compose new steps in chunks of this many (a round's τ): the values
        then do not depend on how the ledger was filled (one round at a time,
        or several at once when a run resumes from a checkpoint), bit for bit.

    Examples
    --------
    >>> ledger = PrivacyAccountant()
    >>> running = RunningEpsilon(ledger, 1e-5, discretization=1e-3)
    >>> for _ in range(3):
    ...     ledger.step(mu0=0.5, sample_rate=0.05, num_steps=20)
    ...     spent = running()
    >>> abs(spent - ledger.get_epsilon(1e-5, discretization=1e-3)) < 1e-6
    True
    """

    def __init__(self, ledger: PrivacyAccountant, delta: float, *, discretization: float = DISCRETIZATION,
                 chunk: int | None = None) -> None:
        self.ledger = ledger
        self.delta = float(delta)
        self.discretization = float(discretization)
        self.chunk = chunk
        self._pld = None
        self._composed_steps = 0
        self._seen_steps = 0
        self._interval = None

    def __call__(self) -> float:
        """ε of every step in the ledger now (0 when it is empty)."""
        total = self.ledger.steps
        if total < self._seen_steps:
            raise ValueError("RunningEpsilon's ledger lost steps; a ledger may only grow.")
        self._seen_steps = total
        if total == 0:
            return 0.0
        if not self.ledger.private:
            return math.inf
        if self.ledger.discrete:  # recomposed whole (Rényi DP adds curves; each kind's PLD is cached): cheap
            # for the few kinds of step a run has, seconds a read for hundreds
            return self.ledger.get_epsilon(self.delta, discretization=self.discretization)
        # Values are shared by every RunningEpsilon (repeated fits with one plan: cross-validation, audits,
        # grid searches), as PrivacyAccountant.get_epsilon's are; a hit needs no composition at all.
        key = (tuple((e.mu0, e.sample_rate, e.sampling, e.steps, e.group_size) for e in self.ledger.history),
               self.chunk, self.delta, self.discretization)
        if key in _RUNNING_VALUES:
            _RUNNING_VALUES.move_to_end(key)
            return _RUNNING_VALUES[key]
        self._compose_new_steps()
        group = self.ledger.group_size
        value = epsilon_for_delta(self._pld, self.delta) if group == 1 else chained_epsilon(self._pld, group,
                                                                                               self.delta)
        _RUNNING_VALUES[key] = value
        if len(_RUNNING_VALUES) > _RUNNING_CACHE_SIZE:
            _RUNNING_VALUES.popitem(last=False)
        return value

    def _compose_new_steps(self) -> None:
        # One grid for every step (grid_interval): a new kind of step that widens it recomposes from the start.
        interval = grid_interval([(e.mu0, e.sample_rate, e.steps) for e in self.ledger.history], self.discretization)
        if interval != self._interval:
            self._pld, self._composed_steps, self._interval = None, 0, interval
        done = 0
        for e in self.ledger.history:
            new = min(e.steps, done + e.steps - self._composed_steps)
            done += e.steps
            while new > 0:
                steps = new if self.chunk is None else min(new, self.chunk)
                pld = _steps_pld(e.mu0, e.sample_rate, e.sampling, steps, interval)
                self._pld = pld if self._pld is None else self._pld.compose(pld)
                self._composed_steps += steps
                new -= steps
