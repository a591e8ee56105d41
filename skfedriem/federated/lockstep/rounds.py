"""A round's simulated clients grouped by their instructions, and each group's local steps taken in lockstep."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np
import torch

from ...manifolds import manifold_of
from ...privacy.optimizer import apply_gradients
from ...privacy.per_sample import trainable_parameters
from ..aggregation import get_aggregation
from ..client import (CLIPPED_FRACTION, ClientRecipe, ClientState, RoundInstructions, check_iterate, round_units,
                      step_plan)
from ..optimizers import make_optimizer
from .stack import ClientStack
from .widths import padded_picks, poisson_width

__all__ = ["client_stack", "lockstep_groups", "run_clients", "run_lockstep"]


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
    >>> from skfedriem.federated.client import ClientState, RoundInstructions
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


def client_stack(recipe: ClientRecipe, n_clients: int) -> ClientStack:
    """The recipe's model stacked for ``n_clients`` clients (made once per K and recipe, then reused).

    Parameters
    ----------
    recipe : ClientRecipe
    n_clients : int

    Returns
    -------
    ClientStack
    """
    if n_clients not in recipe._stacks:
        recipe._stacks[n_clients] = ClientStack(recipe.module, n_clients)
    return recipe._stacks[n_clients]


def _stacked_batch(clients: Sequence[tuple[torch.Tensor, ...]], picks: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Each client's picked records (B each), stacked: (K, B, ...)."""
    return tuple(torch.stack([data[j].index_select(0, p.to(data[j].device)) for data, p in zip(clients, picks)])
                 for j in range(len(clients[0])))


def _stacked_indices(stack: ClientStack) -> set[int]:
    """The optimiser's indices of the stacked blocks (a frozen parameter is shared, not stacked)."""
    return {i for i, p in enumerate(stack.parameters) if any(p is b for b in stack.blocks.values())}


def _stack_optimizer_states(states: list[dict], stack: ClientStack) -> dict:
    """The clients' optimiser states as one state of the stacked optimiser."""
    stacked_at = _stacked_indices(stack)
    merged = {"param_groups": states[0]["param_groups"], "state": {}}
    for index, entry in states[0]["state"].items():
        merged["state"][index] = {
            key: torch.stack([s["state"][index][key] for s in states])
            if index in stacked_at and torch.is_tensor(value) and value.dim() > 0 else value
            for key, value in entry.items()}
    return merged


def _client_optimizer_state(merged: dict, k: int, stack: ClientStack) -> dict:
    """Client k's slice of the stacked optimiser's state, as its own optimiser would hold it."""
    stacked_at = _stacked_indices(stack)
    state = {}
    for index, entry in merged["state"].items():
        state[index] = {key: value[k].clone() if index in stacked_at and torch.is_tensor(value) and value.dim() > 0
                        else (value.clone() if torch.is_tensor(value) else value) for key, value in entry.items()}
    return {"state": state, "param_groups": [dict(g) for g in merged["param_groups"]]}


def run_lockstep(recipe: ClientRecipe, theta: dict[str, torch.Tensor], clients: Sequence[tuple[torch.Tensor, ...]],
                 states: Sequence[ClientState], instructions: RoundInstructions) -> list[tuple[dict, float]]:
    """K clients' rounds from θ_t under the same instructions, in lockstep; their replies in order.

    Parameters
    ----------
    recipe : ClientRecipe
    theta : dict of str to Tensor
        θ_t as the server sent it.
    clients : sequence of tuple of Tensor
        Each client's records.
    states : sequence of ClientState
        Each client's state, advanced in place.
    instructions : RoundInstructions
        Every client's (the same). Under ``sampling="poisson"`` each step's
        batches are padded to the clients' public width
        (:mod:`skfedriem.federated.lockstep.widths`).

    Returns
    -------
    list of (dict, float)
        Client k's submission and its share of the time spent in Sub, as
        :func:`~skfedriem.federated.client.run_client_round` returns them.
    """
    module, unit, k = recipe.module, recipe.privacy_unit, recipe.records_per_subject
    # one plan per client size (the instructions are shared): clients of equal size take the same steps
    sizes = [recipe.n_units(data) for data in clients]
    by_size = {size: step_plan(instructions, size, module, unit, k) for size in dict.fromkeys(sizes)}
    plans = [by_size[size] for size in sizes]
    theta = check_iterate(module, theta)
    # each client's records of the round, drawn from its own stream in the order a lone client draws them
    clients = [round_units(data, unit, k, state.randomness)[0] for data, state in zip(clients, states)]
    stack = client_stack(recipe, len(clients))
    stack.load(theta)
    stack.verify(recipe.loss_fn, list(clients))
    optimizer = make_optimizer(recipe.optimizer, stack.parameters, instructions.lr)
    if not recipe.reset_optimizer and states[0].optimizer_state is not None:
        optimizer.load_state_dict(_stack_optimizer_states([s.optimizer_state for s in states], stack))
        for group in optimizer.param_groups:
            group["lr"] = instructions.lr
    plan = plans[0]  # clip, noise, B and τ come from the shared instructions; the sizes are each client's own
    samplers = [p.sampler() for p in plans]
    counts = [[] for _ in clients] if plan.count_noise_std > 0 else None
    width = None if plan.sampling == "fixed" else poisson_width(tuple(p.n_records for p in plans),
                                                                tuple(p.sample_rate for p in plans))
    for _ in range(plan.local_steps):
        picks, sizes = [np.asarray(s.sample(state.randomness)) for s, state in zip(samplers, states)], None
        if width is not None:
            picks, sizes = padded_picks(picks, width)
            sizes = torch.from_numpy(sizes)
        batch = _stacked_batch(clients, [torch.from_numpy(p) for p in picks])
        grads = stack.private_gradient(recipe.loss_fn, batch, clip=plan.clip,
                                       noise_std=plan.noise_std, denominator=plan.denominator,
                                       randomness=[s.randomness for s in states],
                                       count_noise_std=plan.count_noise_std, counts=counts, sizes=sizes, width=width)
        apply_gradients(optimizer, stack.blocks, grads)
        stack.project_()
    if not recipe.reset_optimizer:
        merged = optimizer.state_dict()
        for k, state in enumerate(states):
            state.optimizer_state = _client_optimizer_state(merged, k, stack)
    rule = get_aggregation(instructions.aggregation)
    started = time.perf_counter()
    manifolds = {name: manifold_of(p) for name, p in trainable_parameters(module).items()}
    # client by client, as alone (an iterative Sub, kfavg's log, stops at each client's own tolerance), and copied
    # out of the stack, which the next group overwrites
    with torch.no_grad():
        subs = [{name: rule.submission(manifold, theta[name], stack.blocks[name][k:k + 1].detach())[0].clone().cpu()
                 for name, manifold in manifolds.items()} for k in range(len(clients))]
    seconds = (time.perf_counter() - started) / len(clients)
    replies = []
    for k in range(len(clients)):
        submission = subs[k]
        if counts is not None:  # post-processing of the steps' noisy counts
            fraction = sum(counts[k]) / (plan.denominator * plan.local_steps) + 0.5
            submission[CLIPPED_FRACTION] = torch.tensor(fraction, dtype=torch.float64)
        replies.append((submission, seconds))
    return replies


def run_clients(recipe: ClientRecipe, theta: dict[str, torch.Tensor], clients: Sequence[tuple[torch.Tensor, ...]],
                states: Sequence[ClientState], selected: Sequence[int],
                instructions: dict[int, RoundInstructions]) -> dict[int, tuple[dict[str, torch.Tensor], float]]:
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
    if not recipe.lockstep:
        return {i: recipe.run_round(theta, clients[i], states[i], instructions[i]) for i in selected}
    replies = {}
    for group in lockstep_groups(selected, instructions, states, keeps_optimizer=not recipe.reset_optimizer):
        results = run_lockstep(recipe, theta, [clients[i] for i in group], [states[i] for i in group],
                               instructions[group[0]])
        replies.update(zip(group, results))
    return {i: replies[i] for i in selected}
