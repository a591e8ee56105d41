"""The private steps a client takes in one round, as the objects that run them will run them.

A client turns the round's instructions (public, and possibly malicious) and
its own size into one :class:`StepPlan` before it touches a record. Its
sampler, the mechanism's denominator and noise, and every charge to a ledger
are all read off that plan, so what is charged is what runs: a batch size of
1.999 is refused rather than charged as 1.999 and run as 1, and a round
without noise or without clipping is charged as infinite loss rather than
left out of the ledger.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from numbers import Integral, Real

from ...exceptions import InvalidInstructionsError
from .discrete import DistributedEncoding
from ..accounting.ledger import PrivacyAccountant
from .sampling import BatchSampler, make_sampler
from .step_mechanism import GAUSSIAN_STEPS, SkellamSteps, StepMechanism, round_envelope
from .units import RECORD, PrivacyUnit

__all__ = ["SAMPLINGS", "StepPlan", "local_round_release", "round_release"]

#: The batch samplings a client knows how to run and account.
SAMPLINGS = ("fixed", "poisson")


def _integer(name: str, value, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise InvalidInstructionsError(f"The round's '{name}' must be an integer. Got {value!r} instead.")
    if value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise InvalidInstructionsError(f"The round's '{name}' must be {allowed}. Got {value!r} instead.")
    return int(value)


def _real(name: str, value) -> float:
    try:
        number = float(value) if isinstance(value, Real) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an int beyond any float
        number = math.nan
    if math.isnan(number):
        raise InvalidInstructionsError(f"The round's '{name}' must be a real number. Got {value!r} instead.")
    return number


def _finite_within(value: float, low: float, high: float) -> bool:
    return math.isfinite(value) and low <= value <= high


def _check_noise(fields: dict, floor: float, ceiling: float, given: tuple) -> None:
    """InvalidInstructionsError unless the clip, σ and σ_b are within what the dtype computes, and noise (of the
    gradient or the count) always comes with a finite clip."""
    clip, noise, count = fields["clip"], fields["noise_std"], fields["count_noise_std"]
    if not (clip >= floor and clip > 0 and (clip <= ceiling or math.isinf(clip))):
        raise InvalidInstructionsError(f"The round's 'clip' must be in [{floor:.3g}, {ceiling:.3g}] and > 0 "
                                       f"(inf: no clipping). Got {given[0]!r}.")
    if not (noise == 0 or _finite_within(noise, floor, ceiling)):
        raise InvalidInstructionsError(f"The round's 'noise_std' must be 0, or in [{floor:.3g}, {ceiling:.3g}]. "
                                       f"Got {given[1]!r}.")
    if not (count == 0 or _finite_within(count, floor, ceiling)):
        raise InvalidInstructionsError(f"The round's 'count_noise_std' must be 0 (no count), or in [{floor:.3g}, "
                                       f"{ceiling:.3g}]. Got {given[2]!r}.")
    _check_bounded(clip, noise, count)


def _check_bounded(clip: float, noise: float, count: float) -> None:
    """InvalidInstructionsError for noise or a count without a finite clip (nothing bounds the sensitivity)."""
    if count > 0 and math.isinf(clip):
        raise InvalidInstructionsError("The round asks for a count of the clipped records but clips nothing "
                                       "(clip=inf). Send a finite clip.")
    if noise > 0 and math.isinf(clip):
        raise InvalidInstructionsError("The round adds noise but clips nothing (clip=inf): noise without a bound "
                                       "on the sensitivity protects nothing. Send a finite clip.")


def _check_unit(unit: PrivacyUnit, n_records: int) -> PrivacyUnit:
    """``unit``, checked against the client's records (k n of them with ``records_per_subject``), or why not."""
    if not isinstance(unit, PrivacyUnit):
        raise TypeError(f"A step plan's 'unit' must be a PrivacyUnit. Got {unit!r} instead.")
    if n_records % unit.group_size:
        raise ValueError(f"A client sampling {unit.group_size} records per subject holds a multiple of "
                         f"{unit.group_size} records. Got n_records={n_records}.")
    return unit


@dataclass(frozen=True)
class StepPlan:
    """One client's private local steps of one round, validated: what its sampler and mechanism run.

    Constructing one validates it; an invalid field raises
    :class:`~skfedriem.exceptions.InvalidInstructionsError` naming it.

    Parameters
    ----------
    n_records : int
        m_i, the client's own number of records (never taken from a message).
    batch_size : int
        B, in [1, m_i]: the exact size of every batch (``"fixed"``) or the
        expected one (``"poisson"``), and the denominator of every step's mean.
    local_steps : int
        τ_i >= 1.
    clip : float
        C > 0; ``inf`` (no clipping) only in a round without noise.
    noise_std : float
        σ >= 0, finite; 0 is a round without noise.
    sampling : {"fixed", "poisson"}
    diameter : float, default=2.0
        The largest distance between two records' clipped gradients, in units
        of C (the model's :func:`~skfedriem.privacy.clipped_gradient_diameter`):
        with fixed-size batches, replacing one record moves a step's mean by at
        most ``diameter · C / B`` (:func:`~skfedriem.privacy.mechanisms.step_mechanism.sensitivity_factor`).
    floor : float, default=0.0
        The smallest clip and non-zero noise std the model's dtype computes
        with safely (:func:`~skfedriem.federated.client.step_plan` sets √(its
        smallest normal number)): below it, squares and products of gradients
        and noise underflow, and clipping or noise would silently vanish.
    ceiling : float, default=inf
        The largest finite clip and noise std (the count's too) the model's
        dtype computes with safely (:func:`~skfedriem.federated.client.step_plan`
        sets √(its largest finite number) / 64): above it, the noise, its
        squares in an optimiser's moments or its product with the learning
        rate overflow, and a release charged at a vanishing μ0 would come out
        infinite.
    unit : PrivacyUnit, default=RECORD
        What the steps protect (:mod:`skfedriem.privacy.mechanisms.units`): a record; a
        subject with all its records (one of ``n_records`` is a subject, the
        sampler draws subjects, and B, q and every charge count them); or,
        with ``records_per_subject`` k, a subject holding exactly k of the
        ``n_records`` records (k n in all), which the steps sample and clip as
        records, each charge then for a group of k records, the guarantee of
        one subject. Every ledger entry of :meth:`release` carries it.
    count_noise_std : float, default=0.0
        σ_b > 0: every step also releases the noisy count of its records whose
        gradient norm is at most C, Σ (1[‖g_z‖ ≤ C] − ½) + N(0, σ_b²) (adaptive
        clipping); 0: no count. Replacing one record moves the centred count by
        at most 1, so the step's release is a Gaussian mechanism on the pair
        (mean gradient, count) whose μ0 is √(μ_g² + 1/σ_b²) (:attr:`mu0`).
    encoding : DistributedEncoding, optional
        Distributed noise (:mod:`skfedriem.privacy.mechanisms.discrete`): the one step
        (τ = 1) releases the clipped sum on the encoding's grid plus the
        client's share of the noise, ``noise_std`` is 0 and there is no count.
        Its charges are the Skellam mechanism's: :meth:`release` the sum of
        the K − t honest shares (ε against a server that sees only the sum),
        :meth:`local_release` this client's share alone; for a unit of k
        records (``records_per_subject``), at k times a record's sensitivity
        and q = 1 (:func:`~skfedriem.privacy.mechanisms.discrete.group_step`).

    Examples
    --------
    >>> plan = StepPlan(n_records=100, batch_size=10, local_steps=5, clip=1.0, noise_std=0.5, sampling="fixed")
    >>> plan.mu0, plan.sample_rate, plan.private
    (0.4, 0.1, True)
    >>> plan.release().steps
    5
    """

    n_records: int
    batch_size: int
    local_steps: int
    clip: float
    noise_std: float
    sampling: str
    diameter: float = 2.0
    floor: float = 0.0
    ceiling: float = math.inf
    count_noise_std: float = 0.0
    unit: PrivacyUnit = RECORD
    encoding: DistributedEncoding | None = None

    def __post_init__(self) -> None:
        n = _integer("n_records", self.n_records, 1)
        fields = {"n_records": n, "batch_size": _integer("batch_size", self.batch_size, 1, n),
                  "local_steps": _integer("local_steps", self.local_steps, 1),
                  "clip": _real("clip", self.clip), "noise_std": _real("noise_std", self.noise_std),
                  "diameter": _real("diameter", self.diameter),
                  "count_noise_std": _real("count_noise_std", self.count_noise_std)}
        _check_noise(fields, max(float(self.floor), 0.0), float(self.ceiling), (self.clip, self.noise_std,
                                                                                  self.count_noise_std))
        if not 0 < fields["diameter"] <= 2:
            raise ValueError(f"A model's clipped-gradient diameter must be in (0, 2]. Got {self.diameter!r}.")
        if not isinstance(self.sampling, str) or self.sampling not in SAMPLINGS:
            raise InvalidInstructionsError(f"The round's 'sampling' must be one of {list(SAMPLINGS)}. "
                                           f"Got {self.sampling!r} instead.")
        fields["sampling"] = str(self.sampling)
        fields["unit"] = _check_unit(self.unit, n)
        self.mechanism.check(fields)
        for name, value in fields.items():  # canonical types: plans compare and hash by value
            object.__setattr__(self, name, value)

    @property
    def group_size(self) -> int:
        """How many of the records one protected unit owns (``unit.group_size``)."""
        return self.unit.group_size

    @property
    def mechanism(self) -> StepMechanism:
        """What these steps run: the Skellam mechanism of the encoding (distributed noise), else the Gaussian."""
        return GAUSSIAN_STEPS if self.encoding is None else SkellamSteps(self.encoding)

    @property
    def private(self) -> bool:
        """Whether the steps add noise to clipped gradients (otherwise they are charged as infinite loss)."""
        return self.mechanism.private(self)

    @property
    def denominator(self) -> float:
        """What every step divides its clipped sum by: B."""
        return float(self.batch_size)

    @property
    def sample_rate(self) -> float:
        """q_i = B / m_i."""
        return self.batch_size / self.n_records

    @property
    def mu0(self) -> float:
        """Per-step Gaussian-DP parameter, as the plan's :attr:`mechanism` states it: μ_g = factor · C / (B σ), or
        with a count √(μ_g² + 1/σ_b²); with distributed noise the Gaussian's at the honest shares' variance; inf
        without noise."""
        return self.mechanism.mu0(self)

    def sampler(self) -> BatchSampler:
        """The batch sampler these steps draw from."""
        return make_sampler(self.sampling, self.n_records, self.batch_size)

    def release(self) -> PrivacyAccountant:
        """These steps as a ledger entry (μ0 = inf when they add no noise); with distributed noise, the Skellam
        mechanism of the K − t honest shares' sum.

        With distributed noise this holds only if the round really has the
        encoding's K clients, at most t of them colluding, and the server
        learns only their sum: a client can check its own share, not K or t
        (:meth:`local_release` is what it guarantees on its own).
        """
        return self.mechanism.entry(self, trust="central")

    def local_release(self) -> PrivacyAccountant:
        """What this client's own release guarantees alone, against a server that breaks the protocol: its share's
        Skellam mechanism with distributed noise, else :meth:`release`."""
        return self.mechanism.entry(self, trust="local")

    def deviating_release(self) -> PrivacyAccountant:
        """What these steps guarantee against a server that deviates from the protocol with t colluding clients:
        with distributed noise the Skellam mechanism of the K − 2t honest shares it can leave in a sum, else
        :meth:`release`."""
        return self.mechanism.entry(self, trust="deviating")


def round_release(plans: Iterable[StepPlan], trust: str = "central") -> PrivacyAccountant:
    """One round of several clients as ledger steps that dominate each client's own.

    A record lives at one client, so a round is as private for it as that
    client's steps; the mechanism they all run dominates every client's steps
    by one entry per sampling mode
    (:func:`~skfedriem.privacy.mechanisms.step_mechanism.round_envelope`): for
    local noise τ steps at the largest μ0 and rate of the round for the largest
    group of records one unit owns (a round mixing units is charged as
    record-level: it certifies no subject); for distributed noise one Skellam
    step at the smallest variance and the largest sensitivities and rate.

    Parameters
    ----------
    plans : iterable of StepPlan
    trust : {"central", "deviating", "local"}, default="central"
        Against whom
        (:data:`~skfedriem.privacy.mechanisms.step_mechanism.TRUSTS`): a
        server that runs the protocol, one that deviates from it, or anyone
        who sees a client's own release.

    Returns
    -------
    PrivacyAccountant
    """
    plans = list(plans)
    return round_envelope(plans, trust=trust) if plans else PrivacyAccountant()


def local_round_release(plans: Iterable[StepPlan]) -> PrivacyAccountant:
    """What one round guarantees every client by its own release alone (:meth:`StepPlan.local_release`), dominated
    as :func:`round_release` dominates; the round's release itself for local noise."""
    return round_release(plans, trust="local")
