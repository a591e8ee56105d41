"""One client's side of a round: check θ_t, take the private local steps, return its submission.

The same code runs in-process (the ``"local"`` backend) and inside a Flower
ClientApp: everything a client keeps between rounds (its secret randomness
and, optionally, its optimiser state) is in :class:`ClientState`, which is
never part of a reply. A deployed Flower site keeps none of its randomness:
it draws afresh for every message (:mod:`skfedriem.flower.protocol.client_app`).
"""

from __future__ import annotations

import copy
import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np
import torch
from torch import nn

from ..exceptions import InvalidInstructionsError, InvalidIterateError
from ..manifolds import manifold_of
from ..privacy import PrivateManifoldOptimizer
from ..privacy.per_sample import trainable_parameters
from ..privacy.per_sample import LossFn
from ..privacy.randomness import SecretRandomness, SecureRandomness, SeededRandomness
from ..privacy.step_plan import StepPlan
from ..privacy.units import (SubjectIndex, check_privacy_unit, check_records_per_subject, split_units, step_diameter,
                             unit_count)
from .aggregation import AGGREGATIONS, get_aggregation
from .optimizers import make_optimizer

__all__ = ["CLIPPED_FRACTION", "ClientRecipe", "ClientState", "RoundInstructions", "check_iterate", "round_units",
           "run_client_round", "step_plan"]


@dataclass(frozen=True)
class ClientRecipe:
    """What a client needs of the model, besides its records: all public, the same for every client.

    Parameters
    ----------
    module : torch.nn.Module
        A working copy of the model (its values are overwritten with θ_t each round).
    loss_fn : callable
        ``loss_fn(module(batch[0]), *batch[1:])`` -> per-record losses (B,).
    optimizer : str or callable, default="sgd"
        ``"sgd"``, ``"adam"``, or ``optimizer(params, lr)`` -> a ``torch.optim.Optimizer``.
    reset_optimizer : bool, default=True
        Start each round from a fresh optimiser state (else the client keeps
        its state, e.g. Adam's moments, in its :class:`ClientState`).
    lockstep : bool, default=False
        Simulated clients on one machine with the same instructions take
        their steps together (:mod:`skfedriem.federated.lockstep`), where
        :func:`~skfedriem.federated.lockstep.lockstep_eligible` allows it.
    privacy_unit : {"record", "subject"}, default="record"
        What the client's steps protect (:mod:`skfedriem.privacy.units`): with
        ``"subject"`` its records are ``(inputs, *targets, subjects)`` and it
        samples subjects. The client's own choice: it refuses instructions
        planned for the other unit.
    records_per_subject : int or None, default=None
        With ``privacy_unit="subject"``: None, its steps sample subjects whole;
        k, every round takes exactly k records of each subject and its steps
        sample them as records (:func:`round_units`). It refuses instructions
        planned for another k.
    """

    module: nn.Module
    loss_fn: LossFn
    optimizer: str | Callable = "sgd"
    reset_optimizer: bool = True
    lockstep: bool = False
    privacy_unit: str = "record"
    records_per_subject: int | None = None
    #: The model stacked for K clients, by K (:func:`~skfedriem.federated.lockstep.client_stack`).
    _stacks: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "records_per_subject",
                           check_records_per_subject(self.privacy_unit, self.records_per_subject))
        if check_privacy_unit(self.privacy_unit) == "subject" and self.records_per_subject is None and self.lockstep:
            raise ValueError("Clients that sample subjects whole cannot run in lockstep (a step's number of records "
                             "is its subjects'): build the recipe with lockstep=False, or records_per_subject.")

    def n_units(self, data: tuple[torch.Tensor, ...]) -> int:
        """m_i of a client holding ``data``: what its sampler draws from (:func:`~skfedriem.privacy.units.unit_count`)."""
        return unit_count(data, self.privacy_unit, self.records_per_subject)

    def run_round(self, theta: dict[str, torch.Tensor], data: tuple[torch.Tensor, ...], state: ClientState,
                  instructions: RoundInstructions) -> tuple[dict[str, torch.Tensor], float]:
        """:func:`run_client_round` with this recipe's model, loss, optimiser and unit."""
        return run_client_round(self.module, theta, data, state, instructions, loss_fn=self.loss_fn,
                                optimizer=self.optimizer, reset_optimizer=self.reset_optimizer,
                                privacy_unit=self.privacy_unit, records_per_subject=self.records_per_subject)


@dataclass
class ClientState:
    """What a client carries from one round to the next; it never leaves the client.

    Parameters
    ----------
    randomness : SecretRandomness
        Draws the batches and the noise.
    optimizer_state : dict or None, default=None
        Kept only when the optimiser is not reset between rounds.
    """

    randomness: SecretRandomness
    optimizer_state: dict | None = None

    @classmethod
    def fresh(cls, seed: np.random.SeedSequence | None = None, *, secure_mode: bool = False) -> ClientState:
        """A new client's state.

        Parameters
        ----------
        seed : numpy.random.SeedSequence, optional
            Seeds the batches and noise (reproducible, and replayable by anyone
            who knows the seed). None: 128 bits of fresh OS entropy.
        secure_mode : bool, default=False
            The OS's cryptographically secure generator instead (``seed`` must be None).
        """
        if secure_mode:
            if seed is not None:
                raise ValueError("secure_mode draws from the OS's secure generator and cannot be seeded.")
            return cls(SecureRandomness())
        return cls(SeededRandomness(seed if seed is not None else np.random.SeedSequence()))

    def to_bytes(self) -> bytes:
        """Serialise (for a Flower node's private context, or a worker process): JSON, or torch's tensors-only
        format when there is an optimiser state; never a pickle, so reading it back runs no code."""
        randomness = self.randomness.to_bytes()
        if self.optimizer_state is None:
            return _RANDOMNESS_ONLY + randomness
        buffer = io.BytesIO()
        torch.save({"randomness": randomness, "optimizer_state": self.optimizer_state}, buffer)
        return _WITH_OPTIMIZER + buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> ClientState:
        """Inverse of :meth:`to_bytes`; ValueError for anything else."""
        kind, payload = data[:1], data[1:]
        if kind == _RANDOMNESS_ONLY:
            return cls(SecretRandomness.from_bytes(payload))
        if kind == _WITH_OPTIMIZER:
            try:
                state = torch.load(io.BytesIO(payload), weights_only=True)
            except Exception as error:  # noqa: BLE001 - whatever the bytes, a ValueError
                raise ValueError(f"Not a saved ClientState: {error}") from None
            return cls(SecretRandomness.from_bytes(state["randomness"]), state["optimizer_state"])
        raise ValueError("Not a saved ClientState.")


_RANDOMNESS_ONLY, _WITH_OPTIMIZER = b"R", b"T"


#: The key of a submission's noisy fraction of unclipped records (adaptive clipping); never a parameter's name
#: (a parameter's name has no spaces).
CLIPPED_FRACTION = "clipped fraction"


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


def step_plan(instructions: RoundInstructions, n_records: int, module: nn.Module,
              privacy_unit: str = "record", records_per_subject: int | None = None) -> StepPlan:
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
        :func:`~skfedriem.privacy.units.unit_count`).
    module : torch.nn.Module
        The client's model (its :func:`~skfedriem.privacy.clipped_gradient_diameter`).
    privacy_unit : {"record", "subject"}, default="record"
        What the client protects (its own setting, never the message's).
    records_per_subject : int or None, default=None
        How it samples subjects (its own setting, never the message's).

    Returns
    -------
    StepPlan

    Raises
    ------
    InvalidInstructionsError
        Naming the first instruction the client cannot run as stated.
    """
    dtypes = [p.dtype for p in trainable_parameters(module).values()]
    floor = math.sqrt(max((torch.finfo(d).tiny for d in dtypes), default=0.0))
    ceiling = min((math.sqrt(torch.finfo(d).max) / 64 for d in dtypes), default=math.inf)
    lr = instructions.lr
    if isinstance(lr, bool) or not isinstance(lr, Real) or not 0 <= lr <= ceiling or math.isinf(lr):
        raise InvalidInstructionsError(f"The round's 'lr' must be a number in [0, {ceiling:.3g}]. Got {lr!r} instead.")
    if instructions.aggregation not in AGGREGATIONS:
        raise InvalidInstructionsError(f"The round's 'aggregation' must be one of {list(AGGREGATIONS.names())}. "
                                       f"Got {instructions.aggregation!r} instead.")
    if instructions.privacy_unit != check_privacy_unit(privacy_unit):
        raise InvalidInstructionsError(f"The round was planned to protect each {instructions.privacy_unit!r}; this "
                                       f"client protects each {privacy_unit!r}, so the server's certificate would not "
                                       "be its guarantee.")
    if instructions.records_per_subject != records_per_subject:
        raise InvalidInstructionsError(f"The round was planned with records_per_subject="
                                       f"{instructions.records_per_subject!r}; this client samples "
                                       f"records_per_subject={records_per_subject!r}.")
    planned = instructions.planned_records
    if isinstance(planned, bool) or not isinstance(planned, Integral) or planned not in (0, n_records):
        units = f"{privacy_unit}s" if records_per_subject is None else f"records ({records_per_subject} a subject)"
        raise InvalidInstructionsError(f"The round was planned for a client of {planned!r} {units}; this "
                                       f"client holds {n_records}, so the server's certificate would not cover it.")
    return StepPlan(n_records=n_records, batch_size=instructions.batch_size, local_steps=instructions.local_steps,
                    clip=instructions.clip, noise_std=instructions.noise_std, sampling=instructions.sampling,
                    diameter=step_diameter(module, privacy_unit, records_per_subject), floor=floor, ceiling=ceiling,
                    count_noise_std=instructions.count_noise_std, privacy_unit=privacy_unit,
                    records_per_subject=records_per_subject)


def round_units(data: tuple[torch.Tensor, ...], privacy_unit: str, records_per_subject: int | None,
                randomness: SecretRandomness) -> tuple[tuple[torch.Tensor, ...], SubjectIndex | None]:
    """A client's records as one round samples them, and their subjects when its steps sample subjects whole.

    With ``records_per_subject`` k the records are every subject's k slots
    for this round (:meth:`~skfedriem.privacy.units.SubjectIndex.slots`, drawn
    by the client's secret ``randomness``), sampled as records.

    Parameters
    ----------
    data : tuple of torch.Tensor
        ``(inputs, *targets)``, or with ``privacy_unit="subject"`` ``(inputs, *targets, subjects)``.
    privacy_unit : {"record", "subject"}
    records_per_subject : int or None
    randomness : SecretRandomness

    Returns
    -------
    records : tuple of torch.Tensor
    subjects : SubjectIndex or None
    """
    records, subjects = split_units(data, privacy_unit)
    if subjects is None or records_per_subject is None:
        return records, subjects
    idx = torch.from_numpy(subjects.slots(records_per_subject, randomness))
    return tuple(x.index_select(0, idx.to(x.device)) for x in records), None


def run_client_round(
    module: nn.Module,
    theta: dict[str, torch.Tensor],
    data: tuple[torch.Tensor, ...],
    state: ClientState,
    instructions: RoundInstructions,
    *,
    loss_fn: LossFn,
    optimizer: str | Callable = "sgd",
    reset_optimizer: bool = True,
    privacy_unit: str = "record",
    records_per_subject: int | None = None,
) -> tuple[dict[str, torch.Tensor], float]:
    """Check θ_t, take τ_i private local steps from it, return the submission Sub(θ_t, θ_i) of every block.

    Parameters
    ----------
    module : torch.nn.Module
        The client's working copy; its parameters are overwritten with θ_t.
    theta : dict of str to Tensor
        θ_t, by trainable-parameter name, as the server sent it (checked by
        :func:`check_iterate`: a bad θ_t raises InvalidIterateError).
    data : tuple of Tensor
        The client's records ``(inputs, *targets)``, and with
        ``privacy_unit="subject"`` each record's subject as a last tensor.
    state : ClientState
        Advanced in place (streams; optimiser state when kept).
    instructions : RoundInstructions
        Turned into the :func:`step_plan` that the sampler and the mechanism
        run (instructions it cannot run as stated raise InvalidInstructionsError).
    loss_fn : callable
    optimizer : str or callable
    reset_optimizer : bool
    privacy_unit : {"record", "subject"}, default="record"
        Each step samples records, or subjects each contributing the mean
        gradient of all its records (:mod:`skfedriem.privacy.units`).
    records_per_subject : int or None, default=None
        With ``privacy_unit="subject"``: k records of every subject each
        round, sampled as records (:func:`round_units`).

    Returns
    -------
    submission : dict of str to Tensor
        Sub(θ_t, θ_i) per block.
    submission_seconds : float
        Time spent in Sub (reported with the aggregation cost).
    """
    n_units = unit_count(data, privacy_unit, records_per_subject)
    plan = step_plan(instructions, n_units, module, privacy_unit, records_per_subject)
    theta = check_iterate(module, theta)
    data, subjects = round_units(data, privacy_unit, records_per_subject, state.randomness)
    params = trainable_parameters(module)
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(theta[name])
    inner = make_optimizer(optimizer, module.parameters(), instructions.lr)
    if not reset_optimizer and state.optimizer_state is not None:
        inner.load_state_dict(state.optimizer_state)
        for group in inner.param_groups:
            group["lr"] = instructions.lr
    step = PrivateManifoldOptimizer(module, inner, loss_fn=loss_fn, clip=plan.clip, noise_std=plan.noise_std,
                                    randomness=state.randomness, count_noise_std=plan.count_noise_std)
    sampler = plan.sampler()
    for _ in range(plan.local_steps):
        chosen, segments = sampler.sample(state.randomness), None
        if subjects is not None:
            chosen, segments = subjects.records_of(chosen)
            segments = torch.from_numpy(segments)
        idx = torch.from_numpy(chosen)
        step.step(tuple(x.index_select(0, idx.to(x.device)) for x in data), denominator=plan.denominator,
                  segments=segments)
    if not reset_optimizer:
        state.optimizer_state = copy.deepcopy(inner.state_dict())
    rule = get_aggregation(instructions.aggregation)
    started = time.perf_counter()
    with torch.no_grad():
        submission = {name: rule.submission(manifold_of(p), theta[name], p.detach().unsqueeze(0))[0].clone().cpu()
                      for name, p in params.items()}
    seconds = time.perf_counter() - started
    if plan.count_noise_std > 0:  # post-processing of the steps' noisy counts
        fraction = sum(step.noisy_counts) / (plan.denominator * plan.local_steps) + 0.5
        submission[CLIPPED_FRACTION] = torch.tensor(fraction, dtype=torch.float64)
    return submission, seconds
