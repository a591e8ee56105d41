"""The one check a stack needs: that its layers compute each client's per-record gradients as a lone copy does.

Clipping, counting, noise and the projection are the private step's, the same
code for a lone client and a stack
(:func:`~skfedriem.privacy.mechanisms.mechanism.private_step`); what the construction
cannot guarantee is what a layer's stacked forward and its rule compute. A
layer that declares it stacks (:class:`~skfedriem.privacy.ModelCapabilities`)
is taken at its word only after :func:`check_stack`: each client's outputs,
per-record gradients, their norms and sums against a lone copy, up to rounding
at the dtype's resolution (a layer that computes something else); and, bit for
bit, the other clients' results when one client's records and blocks change (a
layer that mixes clients, however little: a share of 1e-6 of another client's
value changes the bits). What it cannot see: a layer that behaves on these
records and blocks and not on others.
"""

from __future__ import annotations

import copy
import functools
import math
import torch

from ...privacy.per_record.apart import check_records_apart
from ...privacy.per_record.copies import ClientCopies
from ...privacy.per_record.gradients import per_record_gradients
from ...privacy.per_record.per_sample import LossFn, trainable_parameters

__all__ = ["CHECK_WIDTH", "check_stack"]

#: How many of each client's records :func:`check_stack` checks (with K ≥ 6 clients; K + 1 below).
CHECK_WIDTH = 6

_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
         torch.float64: torch.int64}


def _close(stacked: torch.Tensor, alone: torch.Tensor, scale: float | None = None) -> bool:
    """Equal up to rounding at the dtype's resolution (√ε relative to ``scale``, by default the largest finite
    entry), with the same inf and NaN entries. A sum whose terms cancel is compared at its terms' scale: rounding
    is relative to them, not to what is left of their sum."""
    finite = torch.isfinite(alone)
    if stacked.shape != alone.shape or not torch.equal(finite, torch.isfinite(stacked)):
        return False
    if not (torch.equal(alone.isnan(), stacked.isnan()) and torch.equal(alone.isposinf(), stacked.isposinf())):
        return False
    if scale is None:
        scale = float(alone[finite].abs().max()) if bool(finite.any()) else 1.0
    resolution = math.sqrt(torch.finfo(alone.dtype).eps) if alone.dtype.is_floating_point else 0.0
    return torch.allclose(stacked[finite], alone[finite], rtol=resolution, atol=resolution * scale)


def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit the same (their bit patterns: -0.0 is not 0.0, inf is not the largest float)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    bits = _BITS.get(a.dtype)
    if bits is None:
        return torch.equal(a, b)
    return torch.equal(a.contiguous().view(bits), b.contiguous().view(bits))


def _one_hot(width: int, record: int, like: torch.Tensor) -> torch.Tensor:
    """Weights selecting one record of a batch of ``width`` (for every client of a stack when ``like`` is (K, B))."""
    weights = torch.zeros_like(like)
    weights[..., record] = 1.0
    return weights


def _refuse(stack: ClientCopies, what: str) -> ValueError:
    return ValueError(f"{type(stack.module).__name__} cannot run its clients in lockstep: {what} (a layer that "
                      "declares it stacks mixes clients or records, or computes something else stacked). "
                      "Use lockstep=False.")


def _results(stack: ClientCopies, loss_fn: LossFn, batch: tuple[torch.Tensor, ...]) -> tuple:
    """The stack's outputs, per-record gradients, their norms, sums and each record's row on ``batch``."""
    with torch.no_grad():
        outputs = stack.outputs(batch[0])
    gradients = stack.per_record_gradients(loss_fn, batch)
    norms = gradients.norms()
    width = norms.shape[1]
    rows = [gradients.weighted_sum(_one_hot(width, z, norms)) for z in range(width)]
    return outputs, norms, gradients.weighted_sum(torch.ones_like(norms)), rows


def _lone_checks(stack: ClientCopies, loss_fn: LossFn, batch: tuple[torch.Tensor, ...], k: int, results: tuple):
    """(what, stacked, alone, scale) for client k: its outputs, norms, sums and rows against a lone copy's."""
    outputs, norms, sums, rows = results
    width = norms.shape[1]
    lone = copy.deepcopy(stack.module)
    with torch.no_grad():
        for name, param in trainable_parameters(lone).items():
            param.copy_(stack.blocks[name][k])
        lone_outputs = lone(batch[0][k])
    gradients = per_record_gradients(lone, loss_fn, tuple(x[k] for x in batch))
    lone_sums = gradients.weighted_sum(torch.ones(width, dtype=norms.dtype, device=norms.device))
    lone_rows = [gradients.weighted_sum(_one_hot(width, z, norms[k])) for z in range(width)]
    # norms are float64 whatever the model's dtype: compared at the resolution of the gradients they measure
    dtype = functools.reduce(torch.promote_types, (block.dtype for block in stack.blocks.values()))
    checks = [("forward", outputs[k], lone_outputs, None),
              ("gradient norms", norms[k].to(dtype), gradients.norms().to(dtype), None)]
    for name in lone_sums:
        # a sum whose terms cancel is compared at its terms' scale, block by block: |Σ g_z| ≤ Σ ‖g_z‖
        terms = sum(float(torch.linalg.vector_norm(row[name])) for row in lone_rows
                    if bool(torch.isfinite(row[name]).all()))
        checks.append((f"gradient sum of {name!r}", sums[name][k], lone_sums[name], terms))
        checks += [(f"record {z}'s gradient of {name!r}", rows[z][name][k], lone_rows[z][name], None)
                   for z in range(width)]
    return checks


def _moved(stack: ClientCopies, loss_fn: LossFn, batch: tuple[torch.Tensor, ...], changed: int) -> tuple:
    """The stack's results with client ``changed``'s records reversed and its blocks scaled by 1.5 (then put back)."""
    moved = tuple(x.clone() for x in batch)
    for x in moved:
        x[changed] = x[changed].flip(0)
    saved = {name: block.detach().clone() for name, block in stack.blocks.items()}
    with torch.no_grad():
        for block in stack.blocks.values():
            block[changed].mul_(1.5)
    try:
        return _results(stack, loss_fn, moved)
    finally:
        stack.load(saved)


def _check_no_cross_talk(stack: ClientCopies, loss_fn: LossFn, batch: tuple[torch.Tensor, ...],
                         results: tuple) -> None:
    """ValueError unless every other client's results stay bit for bit the same when one client's change."""
    outputs, norms, sums, _ = results
    for changed in sorted({0, stack.n_clients - 1}) if stack.n_clients > 1 else ():
        new_outputs, new_norms, new_sums, _ = _moved(stack, loss_fn, batch, changed)
        others = [k for k in range(stack.n_clients) if k != changed]
        pairs = [("forward", outputs, new_outputs), ("gradient norms", norms, new_norms)]
        pairs += [(f"gradient sum of {name!r}", sums[name], new_sums[name]) for name in sums]
        mixed = next((what for what, before, after in pairs if not _identical(before[others], after[others])), None)
        if mixed is not None:
            raise _refuse(stack, f"the other clients' {mixed} change when client {changed}'s records and "
                                 "parameters do")


def check_stack(stack: ClientCopies, loss_fn: LossFn, clients: list[tuple[torch.Tensor, ...]]) -> None:
    """ValueError unless each client's per-record gradients in ``stack`` are a lone copy's and independent of the
    other clients' (module docstring).

    The check runs on :data:`CHECK_WIDTH` of each client's records (K + 1 for
    fewer clients: a width that is never K, so that a layer broadcasting one
    client's parameters over the record axis shows; and a fixed one, so that
    the check's cost grows with K, not K²), with each client's blocks moved
    apart by a fixed, public offset. It leaves the blocks as they were and
    draws no randomness.

    Parameters
    ----------
    stack : ClientStack
    loss_fn : callable
    clients : list of tuple of torch.Tensor
        Each client's records (``(inputs, *targets)``).
    """
    width = stack.n_clients + 1 if stack.n_clients < CHECK_WIDTH else CHECK_WIDTH
    batch = tuple(torch.stack([data[j][torch.arange(width) % data[j].shape[0]] for data in clients])
                  for j in range(len(clients[0])))
    saved = {name: block.detach().clone() for name, block in stack.blocks.items()}
    try:
        _move_apart(stack)
        try:
            check_records_apart(stack, loss_fn, batch)
            results = _results(stack, loss_fn, batch)
        except RuntimeError as error:  # a layer that cannot take stacked parameters at all
            raise ValueError(f"{type(stack.module).__name__} cannot run its clients in lockstep: its stacked "
                             f"forward fails ({error}). Use lockstep=False.") from error
        for k in range(stack.n_clients):
            differs = next((what for what, stacked, alone, scale in _lone_checks(stack, loss_fn, batch, k, results)
                            if not _close(stacked, alone, scale)), None)
            if differs is not None:
                raise _refuse(stack, f"client {k}'s {differs} in the stack differs from a lone copy's")
        _check_no_cross_talk(stack, loss_fn, batch, results)
    finally:
        stack.load(saved)


@torch.no_grad()
def _move_apart(stack: ClientCopies) -> None:
    """Each client's blocks moved by a fixed, public offset: client k's by 0.01 (k + 1) along a ramp."""
    for block in stack.blocks.values():
        pattern = torch.linspace(-1, 1, block[0].numel(), dtype=block.dtype).view(block.shape[1:])
        for k in range(stack.n_clients):
            block[k].add_(0.01 * (k + 1) * pattern.to(block.device))
