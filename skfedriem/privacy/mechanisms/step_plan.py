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
from .units import RECORD, PrivacyUnit

__all__ = ["SAMPLINGS", "StepPlan", "local_round_release", "round_release", "sensitivity_factor"]

#: The batch samplings a client knows how to run and account.
SAMPLINGS = ("fixed", "poisson")


def sensitivity_factor(diameter: float, sampling: str) -> float:
    """What a step's mean can move by when one record is replaced, in units of C / B, as its accountant models it.

    With fixed-size batches the replaced record is in the batch or not, and
    when it is, the mean moves by the difference of the two records' clipped
    gradients: at most ``diameter`` · C / B (Dong, Roth & Su's replace-one
    subsampling theorem needs only that distance). With Poisson sampling the
    accountant compares a batch holding one record with a batch holding the
    other *or neither*, and the distance from "neither" to a record is that
    record's clipped norm, up to C: it models the pair ±C (factor 2) whatever
    the diameter, which orthogonal pairs of a smaller diameter would otherwise
    exceed.

    Parameters
    ----------
    diameter : float
        The model's :func:`~skfedriem.privacy.clipped_gradient_diameter`.
    sampling : {"fixed", "poisson"}

    Returns
    -------
    float
        ``diameter`` for fixed-size batches, 2 for Poisson sampling.
    """
    return diameter if sampling == "fixed" else 2.0


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
        most ``diameter · C / B`` (:func:`sensitivity_factor`).
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
        if self.encoding is not None:
            _check_distributed(self.encoding, fields)
        for name, value in fields.items():  # canonical types: plans compare and hash by value
            object.__setattr__(self, name, value)

    @property
    def group_size(self) -> int:
        """How many of the records one protected unit owns (``unit.group_size``)."""
        return self.unit.group_size

    @property
    def private(self) -> bool:
        """Whether the steps add noise to clipped gradients (otherwise they are charged as infinite loss)."""
        return self.noise_std > 0 or self.encoding is not None

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
        """Per-step Gaussian-DP parameter: μ_g = factor · C / (B σ) (:func:`sensitivity_factor`), or with a count
        √(μ_g² + 1/σ_b²); inf without noise.

        The count's μ is 1/σ_b in both samplings: the centred count moves by
        at most 1 when one record is replaced, and by ½ when one is added or
        removed, which the Poisson model's pair (factor 2) doubles to 1.
        """
        if not self.private:
            return math.inf
        if self.encoding is not None:  # the Gaussian's at the honest shares' variance (display; charged as Skellam)
            l2 = self.encoding.charged_step(self.clip, self.sample_rate, self.group_size)[1]
            return l2 / math.sqrt(self.encoding.central_variance)
        mu_g = sensitivity_factor(self.diameter, self.sampling) * self.clip / (self.batch_size * self.noise_std)
        if self.count_noise_std == 0:
            return mu_g
        return math.hypot(mu_g, 1.0 / self.count_noise_std)

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
        return self._entry(None if self.encoding is None else self.encoding.central_variance)

    def local_release(self) -> PrivacyAccountant:
        """What this client's own release guarantees alone, against a server that breaks the protocol: its share's
        Skellam mechanism with distributed noise, else :meth:`release`."""
        return self._entry(None if self.encoding is None else self.encoding.local_variance)

    def _entry(self, variance: float | None) -> PrivacyAccountant:
        ledger = PrivacyAccountant()
        if variance is None:
            ledger.step(mu0=self.mu0, sample_rate=self.sample_rate, num_steps=self.local_steps,
                        sampling=self.sampling, group_size=self.group_size, unit=self.unit.kind)
            return ledger
        # a unit of k records is one Skellam step at k times a record's sensitivity (discrete.group_step)
        rate, l2, l1 = self.encoding.charged_step(self.clip, self.sample_rate, self.group_size)
        ledger.step(mu0=l2 / math.sqrt(variance), sample_rate=rate, num_steps=self.local_steps,
                    sampling=self.sampling, unit=self.unit.kind, skellam=(variance, l2, l1))
        return ledger


def _check_distributed(encoding: DistributedEncoding, fields: dict) -> None:
    """InvalidInstructionsError unless distributed noise can run these steps: one step, no Gaussian noise or count,
    a finite clip."""
    if not isinstance(encoding, DistributedEncoding):
        raise InvalidInstructionsError(f"The round's 'encoding' must be a DistributedEncoding. "
                                       f"Got {type(encoding).__name__} instead.")
    if fields["local_steps"] != 1 or fields["noise_std"] != 0 or fields["count_noise_std"] != 0:
        raise InvalidInstructionsError(
            "A round of distributed noise is one step (local_steps=1) whose only noise is the encoding's share "
            f"(noise_std=0, count_noise_std=0). Got local_steps={fields['local_steps']!r}, "
            f"noise_std={fields['noise_std']!r}, count_noise_std={fields['count_noise_std']!r}.")
    if not math.isfinite(fields["clip"]):
        raise InvalidInstructionsError("A round of distributed noise needs a finite clip. Got clip=inf.")
    encoding.bound(fields["clip"])  # the grid must hold the clipped records exactly


def round_release(plans: Iterable[StepPlan]) -> PrivacyAccountant:
    """One round of several clients as ledger steps that dominate each client's own.

    A record lives at one client, so a round is as private for it as that
    client's steps; every client's steps are dominated by τ steps at the
    largest μ0 and the largest rate of the round (the subsampled Gaussian's
    tradeoff curve is monotone in both) for the largest group of records one
    unit owns, one entry per sampling mode (a round mixing units is charged as
    record-level: it certifies no subject).

    Parameters
    ----------
    plans : iterable of StepPlan

    Returns
    -------
    PrivacyAccountant
    """
    plans = list(plans)
    if any(plan.encoding is not None for plan in plans):
        return _distributed_envelope(plans, local=False)
    envelopes: dict[str, tuple[float, float, int, int, str]] = {}
    for plan in plans:
        mu0, rate, steps, group, unit = envelopes.get(plan.sampling, (0.0, 0.0, 0, 1, plan.unit.kind))
        envelopes[plan.sampling] = (max(mu0, plan.mu0), max(rate, plan.sample_rate), max(steps, plan.local_steps),
                                    max(group, plan.group_size), unit if unit == plan.unit.kind else "record")
    ledger = PrivacyAccountant()
    for sampling, (mu0, rate, steps, group, unit) in sorted(envelopes.items()):
        ledger.step(mu0=mu0, sample_rate=rate, num_steps=steps, sampling=sampling, group_size=group, unit=unit)
    return ledger


def _distributed_envelope(plans: list[StepPlan], *, local: bool) -> PrivacyAccountant:
    """One round of distributed noise as one Skellam step per sampling that dominates every client's: the smallest
    variance, the largest sensitivities and rate (a round mixing in a step of local noise is refused)."""
    if any(plan.encoding is None for plan in plans):
        raise ValueError("A round mixes distributed and local noise: its clients' steps cannot be charged as one.")
    envelopes: dict[str, list] = {}
    for plan in plans:
        (entry,) = (plan.local_release() if local else plan.release()).history
        (variance, l2, l1), rate = entry.skellam, entry.sample_rate
        known = envelopes.get(plan.sampling)
        envelopes[plan.sampling] = [variance, l2, l1, rate, entry.unit] if known is None else [
            min(known[0], variance), max(known[1], l2), max(known[2], l1), max(known[3], rate),
            known[4] if known[4] == entry.unit else "record"]
    ledger = PrivacyAccountant()
    for sampling, (variance, l2, l1, rate, unit) in sorted(envelopes.items()):
        ledger.step(mu0=l2 / math.sqrt(variance), sample_rate=rate, sampling=sampling, unit=unit,
                    skellam=(variance, l2, l1))
    return ledger


def local_round_release(plans: Iterable[StepPlan]) -> PrivacyAccountant:
    """What one round guarantees every client by its own release alone (:meth:`StepPlan.local_release`), dominated
    as :func:`round_release` dominates; the round's release itself for local noise."""
    plans = list(plans)
    if any(plan.encoding is not None for plan in plans):
        return _distributed_envelope(plans, local=True)
    return round_release(plans)
