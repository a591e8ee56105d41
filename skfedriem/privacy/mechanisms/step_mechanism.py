"""The mechanism a client's steps run, as the object that answers for it: what it releases, over which transport,
which steps it can run, and how its release is charged.

:class:`GaussianSteps` (local noise): τ steps, each a clipped mean plus
Gaussian noise (and the noisy count of adaptive clipping), charged by their
privacy-loss distributions. :class:`SkellamSteps` (distributed noise): one
step whose clipped sum goes on the encoding's integer grid with the client's
Skellam share of the noise, summed securely, charged by Rényi DP: centrally
at the K − t honest shares' variance, locally at the client's own share.

A :class:`~skfedriem.privacy.mechanisms.step_plan.StepPlan` holds one (its
``mechanism``) and asks it for μ0, its ledger entries and a round's envelope,
so the rules of each mechanism live in one class and a round of clients is
charged by the rule of the mechanism they all run.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Protocol

from ...exceptions import InvalidInstructionsError
from ..accounting.ledger import PrivacyAccountant
from .discrete import DistributedEncoding
from .units import PrivacyUnit

__all__ = ["GAUSSIAN_STEPS", "TRUSTS", "GaussianSteps", "PlannedSteps", "SkellamSteps", "StepMechanism",
           "round_envelope", "sensitivity_factor"]

#: Whom a ledger entry holds against: ``"central"`` a server that runs the protocol, with at most t colluding
#: clients (ε_central); ``"deviating"`` a server that deviates from it, with t colluders (it may declare t honest
#: clients dropped out); ``"local"`` anyone who sees the client's own release (ε_local).
TRUSTS = ("central", "deviating", "local")


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


class PlannedSteps(Protocol):
    """What a mechanism reads of a client's validated steps (a
    :class:`~skfedriem.privacy.mechanisms.step_plan.StepPlan`)."""

    batch_size: int
    local_steps: int
    clip: float
    noise_std: float
    sampling: str
    diameter: float
    count_noise_std: float
    unit: PrivacyUnit

    @property
    def sample_rate(self) -> float: ...

    @property
    def group_size(self) -> int: ...

    @property
    def mu0(self) -> float: ...

    @property
    def mechanism(self) -> StepMechanism: ...


class StepMechanism(ABC):
    """What a client's steps of one round release, and how that release is charged."""

    #: The release must reach the server only inside a secure sum of the round's clients (a share of the noise
    #: protects nothing alone).
    secure_sum: bool = False

    @abstractmethod
    def check(self, fields: dict) -> None:
        """InvalidInstructionsError unless this mechanism can run steps of the validated ``fields`` (a
        :class:`~skfedriem.privacy.mechanisms.step_plan.StepPlan`'s, by name)."""

    @abstractmethod
    def private(self, plan: PlannedSteps) -> bool:
        """Whether the plan's steps add noise to clipped gradients (otherwise charged as infinite loss)."""

    @abstractmethod
    def mu0(self, plan: PlannedSteps) -> float:
        """The per-step Gaussian-DP parameter of the plan's steps (inf without noise)."""

    @abstractmethod
    def entry(self, plan: PlannedSteps, *, trust: str) -> PrivacyAccountant:
        """The plan's steps as a ledger against whom ``trust`` names (one of :data:`TRUSTS`)."""

    @abstractmethod
    def envelope(self, plans: list[PlannedSteps], *, trust: str) -> PrivacyAccountant:
        """One round of several clients running this mechanism, as ledger steps that dominate each client's."""


class GaussianSteps(StepMechanism):
    """Local noise: each step a clipped mean plus N(0, σ²), and with σ_b > 0 the noisy count of clipped records."""

    def check(self, fields: dict) -> None:
        return None  # the clip, σ and σ_b are checked for every plan (step_plan._check_noise)

    def private(self, plan: PlannedSteps) -> bool:
        return plan.noise_std > 0

    def mu0(self, plan: PlannedSteps) -> float:
        """μ_g = factor · C / (B σ) (:func:`sensitivity_factor`), or with a
        count √(μ_g² + 1/σ_b²); inf without noise.

        The count's μ is 1/σ_b in both samplings: the centred count moves by
        at most 1 when one record is replaced, and by ½ when one is added or
        removed, which the Poisson model's pair (factor 2) doubles to 1.
        """
        if not self.private(plan):
            return math.inf
        mu_g = sensitivity_factor(plan.diameter, plan.sampling) * plan.clip / (plan.batch_size * plan.noise_std)
        if plan.count_noise_std == 0:
            return mu_g
        return math.hypot(mu_g, 1.0 / plan.count_noise_std)

    def entry(self, plan: PlannedSteps, *, trust: str) -> PrivacyAccountant:
        """τ steps at μ0 and q = B / m for the plan's unit; the same against anyone (the noise is the client's
        own)."""
        ledger = PrivacyAccountant()
        ledger.step(mu0=plan.mu0, sample_rate=plan.sample_rate, num_steps=plan.local_steps, sampling=plan.sampling,
                    group_size=plan.group_size, unit=plan.unit.kind)
        return ledger

    def envelope(self, plans: list[PlannedSteps], *, trust: str) -> PrivacyAccountant:
        """τ steps at the largest μ0 and the largest rate of the round (the subsampled Gaussian's tradeoff curve is
        monotone in both) for the largest group of records one unit owns, one entry per sampling mode (a round
        mixing units is charged as record-level: it certifies no subject)."""
        envelopes: dict[str, tuple[float, float, int, int, str]] = {}
        for plan in plans:
            mu0, rate, steps, group, unit = envelopes.get(plan.sampling, (0.0, 0.0, 0, 1, plan.unit.kind))
            envelopes[plan.sampling] = (max(mu0, plan.mu0), max(rate, plan.sample_rate),
                                        max(steps, plan.local_steps), max(group, plan.group_size),
                                        unit if unit == plan.unit.kind else "record")
        ledger = PrivacyAccountant()
        for sampling, (mu0, rate, steps, group, unit) in sorted(envelopes.items()):
            ledger.step(mu0=mu0, sample_rate=rate, num_steps=steps, sampling=sampling, group_size=group, unit=unit)
        return ledger


class SkellamSteps(StepMechanism):
    """Distributed noise: one step, the clipped sum on ``encoding``'s grid plus the client's Skellam share, summed
    securely.

    Parameters
    ----------
    encoding : DistributedEncoding
    """

    secure_sum = True

    def __init__(self, encoding: DistributedEncoding) -> None:
        if not isinstance(encoding, DistributedEncoding):
            raise InvalidInstructionsError(f"The round's 'encoding' must be a DistributedEncoding. "
                                           f"Got {type(encoding).__name__} instead.")
        self.encoding = encoding

    def check(self, fields: dict) -> None:
        """One step whose only noise is the encoding's share, a finite clip the grid holds exactly."""
        if fields["local_steps"] != 1 or fields["noise_std"] != 0 or fields["count_noise_std"] != 0:
            raise InvalidInstructionsError(
                "A round of distributed noise is one step (local_steps=1) whose only noise is the encoding's share "
                f"(noise_std=0, count_noise_std=0). Got local_steps={fields['local_steps']!r}, "
                f"noise_std={fields['noise_std']!r}, count_noise_std={fields['count_noise_std']!r}.")
        if not math.isfinite(fields["clip"]):
            raise InvalidInstructionsError("A round of distributed noise needs a finite clip. Got clip=inf.")
        self.encoding.bound(fields["clip"])  # the grid must hold the clipped records exactly

    def private(self, plan: PlannedSteps) -> bool:
        return True

    def mu0(self, plan: PlannedSteps) -> float:
        """The Gaussian's Δ2 / √V at the honest shares' variance (for display: charged as the Skellam mechanism)."""
        return self._charged(plan)[1] / math.sqrt(self.encoding.central_variance)

    def entry(self, plan: PlannedSteps, *, trust: str) -> PrivacyAccountant:
        """The Skellam mechanism of the honest shares' sum: the K − t of a server that runs the protocol
        (``"central"``: ε against a server that sees only the sum), the K − 2t a deviating one can leave, and at
        least the client's own (``"deviating"``), or the client's own share alone (``"local"``); a unit of k
        records at k times a record's sensitivity (:func:`~skfedriem.privacy.mechanisms.discrete.group_step`).

        The central and deviating entries hold only if the round really has the
        encoding's K clients, at most t of them colluding: a client can check its
        own share, not K or t.
        """
        variance = {"central": self.encoding.central_variance, "deviating": self.encoding.deviating_variance,
                    "local": self.encoding.local_variance}[trust]
        rate, l2, l1 = self._charged(plan)
        ledger = PrivacyAccountant()
        ledger.step(mu0=l2 / math.sqrt(variance), sample_rate=rate, num_steps=plan.local_steps,
                    sampling=plan.sampling, unit=plan.unit.kind, skellam=(variance, l2, l1))
        return ledger

    def envelope(self, plans: list[PlannedSteps], *, trust: str) -> PrivacyAccountant:
        """One Skellam step per sampling that dominates every client's: the smallest variance, the largest
        sensitivities and rate."""
        envelopes: dict[str, list] = {}
        for plan in plans:
            (entry,) = plan.mechanism.entry(plan, trust=trust).history
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

    def _charged(self, plan: PlannedSteps) -> tuple[float, float, float]:
        return self.encoding.charged_step(plan.clip, plan.sample_rate, plan.group_size)


#: Local noise's mechanism (it holds nothing of its own).
GAUSSIAN_STEPS = GaussianSteps()


def round_envelope(plans: list[PlannedSteps], *, trust: str) -> PrivacyAccountant:
    """One round of several clients as ledger steps that dominate each client's own, by the rule of the mechanism
    they all run (ValueError for a round mixing mechanisms: no one rule charges it).

    Parameters
    ----------
    plans : list of StepPlan
    trust : {"central", "deviating", "local"}
        Against whom (:data:`TRUSTS`).

    Returns
    -------
    PrivacyAccountant
    """
    kinds = {type(plan.mechanism) for plan in plans}
    if len(kinds) > 1:
        raise ValueError("A round mixes distributed and local noise: its clients' steps cannot be charged as one.")
    if trust not in TRUSTS:
        raise ValueError(f"trust must be one of {TRUSTS}. Got {trust!r} instead.")
    return plans[0].mechanism.envelope(plans, trust=trust)
