"""A round of K clients given the same instructions, lone (K = 1) or in lockstep: check θ_t, step, submit.

:func:`run_round` is the one round routine. Per client, and exactly as it
would run alone:

* its plan (:func:`~skfedriem.federated.instructions.step_plan`, from its own
  size) and its check of θ_t;
* its records of the round and its sampler, drawing its batches from its own
  secret randomness;
* its private step: the one step of :func:`~skfedriem.privacy.mechanisms.mechanism.private_step`,
  which clips, sums, counts and noises each client on its own (its own draws,
  in its own order) whatever K is;
* its optimiser: the stacked optimiser is element-wise
  (:func:`~skfedriem.federated.optimizers.is_elementwise`), so client k's slice
  of it is client k's SGD or Adam, and a client that keeps its optimiser state
  between rounds keeps its own slice (Adam's moments);
* its submission Sub(θ_t, θ_k), computed for it alone, and its fraction of unclipped records.

K clients run as one computation over a stack of the model
(:class:`~skfedriem.federated.lockstep.ClientStack`); one client runs on the
model itself (:class:`~skfedriem.privacy.per_record.copies.LoneClient`). What may differ
between the two is floating-point rounding where a batched kernel reduces in
another order than the single one (see the user guide, "Speed"); the noise
draws, batches and clip decisions are the same, and so is every ledger, which
charges each client's own plan.

Clients that sample by Poisson run in lockstep too, at a width computed from
their public sizes and rates, each secret batch padded to it with weight-0
records and, where larger, taken in further passes of that width
(:mod:`skfedriem.federated.lockstep.widths`): no client's release depends on
another's batch size.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from ..privacy.per_record.copies import ClientCopies
from ..privacy.mechanisms.distributed import distributed_release
from ..privacy.mechanisms.mechanism import private_step
from ..privacy.per_record.per_sample import LossFn
from ..privacy.mechanisms.units import RECORD, PrivacyUnit, SubjectIndex
from .aggregation import get_aggregation
from .client import ClientRecipe, ClientState, round_units
from .instructions import CLIPPED_FRACTION, ENCODED_RELEASE, EXCESS_NOISE, RoundInstructions, check_iterate, step_plan
from .lockstep.widths import padded_picks, poisson_width
from .optimizers import make_optimizer

__all__ = ["lockstep_groups", "run_client_round", "run_clients", "run_round"]

#: A client's reply: its submission Sub(θ_t, θ_k) by block name, and its share of the time spent in Sub.
Reply = tuple[dict[str, torch.Tensor], float]


def _state_signature(state: ClientState, keeps_optimizer: bool) -> tuple | None:
    """What of a kept optimiser state must agree across a group: its scalar entries (Adam's step count)."""
    if not keeps_optimizer or state.optimizer_state is None:
        return None
    return tuple(sorted((index, key, float(value))
                        for index, entry in state.optimizer_state["state"].items() for key, value in entry.items()
                        if not torch.is_tensor(value) or value.dim() == 0))


def lockstep_groups(selected: Sequence[int], instructions: dict[int, RoundInstructions],
                    states: Sequence[ClientState], *, keeps_optimizer: bool) -> list[list[int]]:
    """The selected clients grouped by equal instructions (and equal kept-optimiser step counts), in order.

    Parameters
    ----------
    selected : sequence of int
    instructions : dict of int to RoundInstructions
    states : sequence of ClientState
        Indexed by client.
    keeps_optimizer : bool
        Whether clients keep their optimiser state between rounds.

    Returns
    -------
    list of list of int
        Each group in the order of ``selected``.

    Examples
    --------
    >>> from skfedriem.federated.client import ClientState
    >>> a = RoundInstructions(0.1, 2, 8, 1.0, 0.5, "fixed", "projavg")
    >>> b = RoundInstructions(0.1, 3, 8, 1.0, 0.5, "fixed", "projavg")
    >>> lockstep_groups([0, 1, 2], {0: a, 1: b, 2: a}, [ClientState.fresh()] * 3, keeps_optimizer=False)
    [[0, 2], [1]]
    """
    groups: dict[tuple, list[int]] = {}
    for i in selected:
        # by type and value: lr=True and lr=1 are not the same instruction (a lone client refuses the first)
        # (the fields read as they are: astuple's deep copy of every scalar cost 40 µs a client a round)
        typed = tuple((type(v), v) for v in (getattr(instructions[i], f.name)
                                             for f in dataclasses.fields(instructions[i])))
        groups.setdefault((typed, _state_signature(states[i], keeps_optimizer)), []).append(i)
    return list(groups.values())


def _stacked_batch(clients: Sequence[tuple[torch.Tensor, ...]], picks: list[np.ndarray]) -> tuple[torch.Tensor, ...]:
    """Each client's picked records, stacked: (K, B, ...) (a view of the one client's for K = 1)."""
    picked = [[data[j].index_select(0, torch.from_numpy(p).to(data[j].device)) for data, p in zip(clients, picks)]
              for j in range(len(clients[0]))]
    return tuple(torch.stack(rows) if len(rows) > 1 else rows[0].unsqueeze(0) for rows in picked)


def _step_passes(clients: Sequence[tuple[torch.Tensor, ...]], picks: list[np.ndarray], subjects: SubjectIndex | None,
                 width: int | None) -> tuple[list, torch.Tensor | None]:
    """A step's passes over the clients' drawn ``picks`` and, for subjects sampled whole, each record's subject."""
    if subjects is not None:  # a lone client's step of whole subjects: their records, and whose each is
        records, segments = subjects.records_of(picks[0])
        return [(_stacked_batch(clients, [records]), None)], torch.from_numpy(segments)
    if width is None:
        return [(_stacked_batch(clients, picks), None)], None
    rows, sizes = padded_picks(picks, width)
    batch = _stacked_batch(clients, rows)
    sizes = torch.from_numpy(sizes).to(batch[0].device)
    columns = torch.arange(width, device=batch[0].device)
    return [(tuple(x[:, start:start + width] for x in batch), columns < (sizes - start).unsqueeze(1))
            for start in range(0, batch[0].shape[1], width)], None


def _submissions(copies: ClientCopies, theta: dict[str, torch.Tensor], aggregation: str) -> tuple[list[dict], float]:
    """Every client's Sub(θ_t, θ_k), client by client as alone, and the time it took each on average."""
    rule = get_aggregation(aggregation)
    started = time.perf_counter()
    points = copies.points()
    # client by client, as alone (an iterative Sub, kfavg's log, stops at each client's own tolerance), and copied
    # out of the copies, which the next group overwrites
    with torch.no_grad():
        subs = [{name: rule.submission(copies.manifolds[name], theta[name], point[k:k + 1])[0].clone().cpu()
                 for name, point in points.items()} for k in range(copies.n_clients)]
    return subs, (time.perf_counter() - started) / copies.n_clients


def _round_plans(recipe: ClientRecipe, clients: Sequence[tuple[torch.Tensor, ...]],
                 instructions: RoundInstructions) -> list:
    """Each client's :func:`~skfedriem.federated.instructions.step_plan`, from its own size (one per size)."""
    sizes = [recipe.n_units(data) for data in clients]
    by_size = {size: step_plan(instructions, size, recipe.module, recipe.unit) for size in dict.fromkeys(sizes)}  # clients of equal size take the same steps
    return [by_size[size] for size in sizes]


def _round_records(recipe: ClientRecipe, clients: Sequence[tuple[torch.Tensor, ...]],
                   states: Sequence[ClientState]) -> tuple[list, SubjectIndex | None]:
    """Each client's records of the round, drawn from its own stream in the order a lone client draws them, and a
    lone client's subjects when its steps sample them whole."""
    units = [round_units(data, recipe.unit, state.randomness) for data, state in zip(clients, states)]
    subjects = units[0][1]
    if subjects is not None and len(clients) > 1:
        raise ValueError("Clients that sample subjects whole run one by one: their steps' records are their "
                         "subjects', which no common width holds.")
    return [records for records, _ in units], subjects


def _round_optimizer(recipe: ClientRecipe, copies: ClientCopies, states: Sequence[ClientState],
                     lr: float) -> torch.optim.Optimizer:
    """The clients' optimiser over the copies, at the round's rate, from their kept states when they keep them."""
    optimizer = make_optimizer(recipe.optimizer, copies.parameters, lr)
    if not recipe.reset_optimizer and states[0].optimizer_state is not None:
        optimizer.load_state_dict(copies.merged_optimizer_state([s.optimizer_state for s in states]))
        for group in optimizer.param_groups:
            group["lr"] = lr
    return optimizer


def _poisson_width(plans: list) -> int | None:
    """The public width of a step of several clients that sample by Poisson (None: fixed-size, or one client)."""
    if plans[0].sampling == "fixed" or len(plans) == 1:
        return None
    return poisson_width(tuple(p.n_records for p in plans), tuple(p.sample_rate for p in plans))


def _take_steps(recipe: ClientRecipe, copies: ClientCopies, optimizer: torch.optim.Optimizer, plans: list,
                states: Sequence[ClientState], records: list, subjects: SubjectIndex | None) -> list | None:
    """The round's τ private steps of every client; each client's noisy counts (adaptive clipping), else None."""
    plan = plans[0]  # clip, noise, B and τ come from the shared instructions; the sizes are each client's own
    samplers = [p.sampler() for p in plans]
    counts = [[] for _ in plans] if plan.count_noise_std > 0 else None
    width = _poisson_width(plans)
    for _ in range(plan.local_steps):
        picks = [np.asarray(s.sample(state.randomness)) for s, state in zip(samplers, states)]
        passes, segments = _step_passes(records, picks, subjects, width)
        released = private_step(copies, recipe.loss_fn, passes, clip=plan.clip, noise_std=plan.noise_std,
                                denominator=plan.denominator, randomness=[s.randomness for s in states],
                                count_noise_std=plan.count_noise_std, counts=counts, segments=segments)
        copies.step_(optimizer, released)
    return counts


def _distributed_round(recipe: ClientRecipe, copies: ClientCopies, plans: list, states: Sequence[ClientState],
                       records: list, subjects: SubjectIndex | None) -> list[Reply]:
    """The one step of a round of distributed noise: every client's encoded release, and with a dropout allowance
    (in process) the excess components it keeps apart."""
    plan = plans[0]
    picks = [np.asarray(p.sampler().sample(state.randomness)) for p, state in zip(plans, states)]
    passes, segments = _step_passes(records, picks, subjects, _poisson_width(plans))
    started = time.perf_counter()
    releases = distributed_release(copies, recipe.loss_fn, passes, clip=plan.clip, encoding=plan.encoding,
                                   randomness=[s.randomness for s in states], segments=segments)
    seconds = (time.perf_counter() - started) / len(releases)
    return [(_release_reply(release), seconds) for release in releases]


def _release_reply(release: np.ndarray) -> dict[str, torch.Tensor]:
    """A release's reply: the release, and its excess components apart (rows 1 … d of a two-dimensional one)."""
    if release.ndim == 1:
        return {ENCODED_RELEASE: torch.from_numpy(release)}
    return {ENCODED_RELEASE: torch.from_numpy(release[0].copy()), EXCESS_NOISE: torch.from_numpy(release[1:].copy())}


def run_round(recipe: ClientRecipe, theta: dict[str, torch.Tensor], clients: Sequence[tuple[torch.Tensor, ...]],
              states: Sequence[ClientState], instructions: RoundInstructions) -> list[Reply]:
    """K clients' rounds from θ_t under the same instructions (K = 1: a lone client); their replies in order.

    Parameters
    ----------
    recipe : ClientRecipe
    theta : dict of str to Tensor
        θ_t as the server sent it (checked by
        :func:`~skfedriem.federated.instructions.check_iterate`: a bad θ_t
        raises InvalidIterateError).
    clients : sequence of tuple of Tensor
        Each client's records ``(inputs, *targets)``, and with
        ``privacy_unit="subject"`` each record's subject as a last tensor.
    states : sequence of ClientState
        Each client's state, advanced in place (streams; optimiser state when kept).
    instructions : RoundInstructions
        Every client's (the same), turned by each into the
        :func:`~skfedriem.federated.instructions.step_plan` its sampler and step
        run (instructions it cannot run as stated raise InvalidInstructionsError).

    Returns
    -------
    list of (dict, float)
        Client k's submission Sub(θ_t, θ_k) per block, and its share of the
        time spent in Sub (reported with the aggregation cost).
    """
    plans = _round_plans(recipe, clients, instructions)
    theta = check_iterate(recipe.module, theta)
    records, subjects = _round_records(recipe, clients, states)
    copies = recipe.copies(len(clients))
    copies.load(theta)
    copies.verify(recipe.loss_fn, records)
    if plans[0].mechanism.secure_sum:  # its releases are summed by the transport, not averaged
        return _distributed_round(recipe, copies, plans, states, records, subjects)
    optimizer = _round_optimizer(recipe, copies, states, instructions.lr)
    counts = _take_steps(recipe, copies, optimizer, plans, states, records, subjects)
    if not recipe.reset_optimizer:
        for state, own in zip(states, copies.client_optimizer_states(optimizer.state_dict())):
            state.optimizer_state = own
    subs, seconds = _submissions(copies, theta, instructions.aggregation)
    for submission, own in zip(subs, counts or ()):  # post-processing of the steps' noisy counts
        submission[CLIPPED_FRACTION] = torch.tensor(sum(own) / (plans[0].denominator * plans[0].local_steps) + 0.5,
                                                    dtype=torch.float64)
    return [(submission, seconds) for submission in subs]


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
    unit: PrivacyUnit = RECORD,
) -> Reply:
    """One client's round on its own model: :func:`run_round` with K = 1.

    Parameters
    ----------
    module : torch.nn.Module
        The client's working copy; its parameters are overwritten with θ_t.
    theta : dict of str to Tensor
        θ_t as the server sent it.
    data : tuple of Tensor
        The client's records ``(inputs, *targets)``, and with
        ``privacy_unit="subject"`` each record's subject as a last tensor.
    state : ClientState
        Advanced in place.
    instructions : RoundInstructions
    loss_fn : callable
    optimizer : str or callable, default="sgd"
    reset_optimizer : bool, default=True
    unit : PrivacyUnit, default=RECORD

    Returns
    -------
    submission : dict of str to Tensor
        Sub(θ_t, θ_i) per block.
    submission_seconds : float
        Time spent in Sub.
    """
    recipe = ClientRecipe(module, loss_fn, optimizer, reset_optimizer, False, unit)
    return run_round(recipe, theta, [data], [state], instructions)[0]


def run_clients(recipe: ClientRecipe, theta: dict[str, torch.Tensor], clients: Sequence[tuple[torch.Tensor, ...]],
                states: Sequence[ClientState], selected: Sequence[int],
                instructions: dict[int, RoundInstructions]) -> dict[int, Reply]:
    """The selected clients' rounds on this machine: in lockstep groups when the recipe allows, else one by one.

    Parameters
    ----------
    recipe : ClientRecipe
    theta : dict of str to Tensor
    clients : sequence of tuple of Tensor
        Client i's records.
    states : sequence of ClientState
        Client i's state, advanced in place.
    selected : sequence of int
    instructions : dict of int to RoundInstructions

    Returns
    -------
    dict of int to (dict, float)
        Every selected client's submission and Sub time, in the order of ``selected``.
    """
    groups = (lockstep_groups(selected, instructions, states, keeps_optimizer=not recipe.reset_optimizer)
              if recipe.lockstep else [[i] for i in selected])
    replies = {}
    for group in groups:
        results = run_round(recipe, theta, [clients[i] for i in group], [states[i] for i in group],
                            instructions[group[0]])
        replies.update(zip(group, results))
    return {i: replies[i] for i in selected}
