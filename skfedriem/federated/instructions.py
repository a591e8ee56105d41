"""What the server tells a client for a round, and what the client makes of it before touching a record.

:class:`RoundInstructions` are public and possibly malicious. A client checks
the iterate it receives (:func:`check_iterate`) and turns the instructions,
its own size and its own model into the :class:`~skfedriem.privacy.StepPlan`
its sampler and mechanism run (:func:`step_plan`), or refuses the round by
name. The in-process clients, the worker processes, a Flower site's ClientApp
and the server's pricing of a round all use these two functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real

import torch
from torch import nn

from ..exceptions import InvalidInstructionsError, InvalidIterateError
from ..manifolds import manifold_of
from ..privacy.per_record.copies import check_private_dtypes
from ..privacy.mechanisms.discrete import DistributedEncoding
from ..privacy.per_record.per_sample import trainable_parameters
from ..privacy.mechanisms.step_plan import StepPlan
from ..privacy.mechanisms.units import RECORD, PrivacyUnit, step_diameter
from .aggregation import AGGREGATIONS

__all__ = ["CLIPPED_FRACTION", "ENCODED_RELEASE", "EXCESS_NOISE", "RoundInstructions", "check_iterate",
           "iterate_tolerance", "step_plan"]

#: The key of a submission's noisy fraction of unclipped records (adaptive clipping); never a parameter's name
#: (a parameter's name has no spaces).
CLIPPED_FRACTION = "clipped fraction"
#: The key of a distributed-noise round's reply: the client's encoded release (int64, modulo 2^bits), its only entry.
ENCODED_RELEASE = "encoded release"
#: The key of the excess components a client of a distributed-noise round keeps apart (a dropout allowance, in
#: process): ``(d, length)`` int64, of which the server takes out those above the round's level.
EXCESS_NOISE = "excess noise"


def iterate_tolerance(dtype: torch.dtype) -> float:
    """How far from its manifold a received θ_t may be: √(machine ε) of its dtype (3.5e-4 in float32)."""
    return math.sqrt(torch.finfo(dtype).eps)


def check_iterate(module: nn.Module, theta: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """θ_t as the client's model holds it, or :class:`~skfedriem.exceptions.InvalidIterateError`.

    Every trainable block must be present, with the model's shape, finite,
    and (manifold blocks) on the manifold within :func:`iterate_tolerance`
    of the model's dtype. An honest server always sends such a point (its
    output map ends with a projection Π). The private step is safe for any θ
    (noise is added before the tangent projection), so this check is not
    what makes a round private: it refuses, loudly, a server that is broken
    or probing, rather than silently projecting its θ back, so the refusal
    shows in the server's log and in the client's.

    Returns
    -------
    theta : dict of str to Tensor
        The same values, in the model's dtype and on its device.
    """
    params = trainable_parameters(module)
    unexpected, missing = sorted(set(theta) - set(params)), sorted(set(params) - set(theta))
    if unexpected or missing:
        raise InvalidIterateError(f"The server's θ_t names blocks {sorted(theta)}; this model has {sorted(params)} "
                                  f"(missing {missing}, unexpected {unexpected}).")
    checked = {}
    for name, param in params.items():
        value = torch.as_tensor(theta[name])
        if tuple(value.shape) != tuple(param.shape):
            raise InvalidIterateError(f"The server's θ_t[{name!r}] has shape {tuple(value.shape)}; "
                                      f"the model's is {tuple(param.shape)}.")
        value = value.to(device=param.device, dtype=param.dtype)
        manifold = manifold_of(param)
        ok, reason = manifold.check_point(value, atol=iterate_tolerance(param.dtype), explain=True)
        if not ok:
            raise InvalidIterateError(f"The server's θ_t[{name!r}] is not a point of {manifold!r}: {reason}. "
                                      "The client refuses the round.")
        checked[name] = value
    return checked


@dataclass(frozen=True)
class RoundInstructions:
    """What the server tells a selected client for one round (all public).

    Parameters
    ----------
    lr : float
        The round's learning rate.
    local_steps : int
        τ_i for this client.
    batch_size : int
        B.
    clip : float
        C (inf: no clipping).
    noise_std : float
        σ (0: no noise).
    sampling : {"fixed", "poisson"}
        How the client draws its batches.
    aggregation : str
        The rule whose Sub the client applies.
    count_noise_std : float, default=0.0
        σ_b > 0: adaptive clipping; every step also releases the noisy count
        of its unclipped records, and the client returns their mean as the
        fraction ``submission[CLIPPED_FRACTION]`` (0: no count).
    planned_records : int, default=0
        The m_i the server calibrated this client's round for (0: not
        stated; the in-process engine, whose clients cannot change). A client
        holding another number of records refuses the round before charging
        or running anything: the server's certificate holds only for the
        sizes it planned with (a deployed site that restarted with another
        data file, say).
    privacy_unit : {"record", "subject"}, default="record"
        What the round was planned to protect; ``batch_size`` and
        ``planned_records`` count units of it. A client refuses a round
        planned for another unit than its own.
    records_per_subject : int or None, default=None
        ``privacy_unit="subject"``: None, the steps sample subjects whole; k,
        every subject gives exactly k of its records to the round, which the
        steps sample as records (``batch_size`` and ``planned_records`` then
        count these k n records). A client refuses a round planned for another
        k than its own.
    encoding : DistributedEncoding or None, default=None
        Distributed noise (:mod:`skfedriem.privacy.mechanisms.discrete`): the round's
        grid, modulus, noise share, K, t and public rotation; the client's one
        step releases its encoded sum plus its share instead of a submission.
        None: local noise.
    """

    lr: float
    local_steps: int
    batch_size: int
    clip: float
    noise_std: float
    sampling: str
    aggregation: str
    count_noise_std: float = 0.0
    planned_records: int = 0
    privacy_unit: str = "record"
    records_per_subject: int | None = None
    encoding: DistributedEncoding | None = None

    @property
    def unit(self) -> PrivacyUnit:
        """What the round was planned to protect, as one value (the message carries it as its two fields)."""
        return PrivacyUnit(self.privacy_unit, self.records_per_subject)


def _check_planned_for(instructions: RoundInstructions, n_records: int, unit: PrivacyUnit) -> None:
    """InvalidInstructionsError unless the round was planned for this client: its unit, its k and its size."""
    if instructions.privacy_unit != unit.kind:
        raise InvalidInstructionsError(f"The round was planned to protect each {instructions.privacy_unit!r}; this "
                                       f"client protects each {unit.kind!r}, so the server's certificate would not "
                                       "be its guarantee.")
    if instructions.records_per_subject != unit.records_per_subject:
        raise InvalidInstructionsError(f"The round was planned with records_per_subject="
                                       f"{instructions.records_per_subject!r}; this client samples "
                                       f"records_per_subject={unit.records_per_subject!r}.")
    planned = instructions.planned_records
    if isinstance(planned, bool) or not isinstance(planned, Integral) or planned not in (0, n_records):
        units = f"{unit.kind}s" if unit.records_per_subject is None else f"records ({unit.group_size} a subject)"
        raise InvalidInstructionsError(f"The round was planned for a client of {planned!r} {units}; this "
                                       f"client holds {n_records}, so the server's certificate would not cover it.")


def _encoding_for(encoding, module: nn.Module):
    """The round's encoding, or InvalidInstructionsError when it is not for this model's coordinates."""
    dimension = sum(p.numel() for p in trainable_parameters(module).values())
    if encoding is not None and getattr(encoding, "dimension", None) != dimension:
        raise InvalidInstructionsError(f"The round's encoding is for {getattr(encoding, 'dimension', None)!r} "
                                       f"coordinates; this client's model has {dimension}.")
    return encoding


def step_plan(instructions: RoundInstructions, n_records: int, module: nn.Module,
              unit: PrivacyUnit = RECORD) -> StepPlan:
    """The steps a client of ``n_records`` records running ``module`` takes for ``instructions``, validated.

    What the client's sampler and mechanism run and what every ledger is
    charged with both come from this one plan; the in-process clients, the
    worker processes and a Flower site's ClientApp all build it here, from the
    instructions they received, their own size and their own model.

    Parameters
    ----------
    instructions : RoundInstructions
        As received (any values: a server may be malicious).
    n_records : int
        The client's own m_i: what its sampler draws from (records, subjects,
        or with ``instructions.records_per_subject`` k its k n subjects' slots:
        :func:`~skfedriem.privacy.mechanisms.units.unit_count`).
    module : torch.nn.Module
        The client's model (its :func:`~skfedriem.privacy.clipped_gradient_diameter`).
    unit : PrivacyUnit, default=RECORD
        What the client protects and how it samples subjects (its own
        setting, never the message's).

    Returns
    -------
    StepPlan

    Raises
    ------
    InvalidInstructionsError
        Naming the first instruction the client cannot run as stated.
    """
    dtypes = check_private_dtypes(module)
    floor = math.sqrt(max((torch.finfo(d).tiny for d in dtypes), default=0.0))
    ceiling = min((math.sqrt(torch.finfo(d).max) / 64 for d in dtypes), default=math.inf)
    lr = instructions.lr
    if isinstance(lr, bool) or not isinstance(lr, Real) or not 0 <= lr <= ceiling or math.isinf(lr):
        raise InvalidInstructionsError(f"The round's 'lr' must be a number in [0, {ceiling:.3g}]. Got {lr!r} instead.")
    if instructions.aggregation not in AGGREGATIONS:
        raise InvalidInstructionsError(f"The round's 'aggregation' must be one of {list(AGGREGATIONS.names())}. "
                                       f"Got {instructions.aggregation!r} instead.")
    _check_planned_for(instructions, n_records, unit)
    encoding = _encoding_for(instructions.encoding, module)
    return StepPlan(n_records=n_records, batch_size=instructions.batch_size, local_steps=instructions.local_steps,
                    clip=instructions.clip, noise_std=instructions.noise_std, sampling=instructions.sampling,
                    diameter=step_diameter(module, unit), floor=floor, ceiling=ceiling,
                    count_noise_std=instructions.count_noise_std, unit=unit, encoding=encoding)
