"""That a model and its loss keep the records of a batch apart: checked before a first private step.

The per-record routes (a closed form, the layer rules) differentiate the
batch's summed loss and read record z's row as record z's gradient, and a
stack puts K clients' records through one forward. Both are record z's own
only if record z's output reads its input alone (no batch normalisation in
training mode, say) and its loss reads its output alone (no logits centred on
the batch mean, no loss scaled by the batch size). Otherwise one record would
move another's clipped gradient, or another client's. So, once per copies and
loss, :func:`check_records_apart` computes every record's loss and output
gradient alone and a few records' outputs alone, and compares them with their
rows in the batch, up to rounding at the dtype's resolution.

Outputs and output gradients do not show a layer that couples records only
with autograd on, or only in its backward pass. So a few records' parameter
gradients are also computed alone, by the route the step takes, and compared
with their rows of the batch's.

A check run once sees one draw of a model that draws randomness in its
forward pass: a layer that mixes a record with a random partner now and then
passes a comparison of a few records alone most of the time. So, before any
comparison, its forward pass may not draw from torch's default generators
(their states are compared around it), and the same batch put through it
again (:data:`REPEATS` times) must give the same outputs. Randomness that
touches neither (a generator of the layer's own that draws once per call, or
state kept from call to call) can still pass: a layer that couples the whole
batch with probability p per call escapes with probability about
(1 − p)^(REPEATS + 1). Such layers are the model author's to declare or avoid.
"""

from __future__ import annotations

import math
import weakref

import torch
from torch.func import grad, vmap

from .copies import ClientCopies, LoneClient
from .per_sample import LossFn

__all__ = ["check_records_apart"]

#: How many records, spread over the batch, :func:`check_records_apart` puts through the model alone.
OUTPUT_CHECKS = 8
#: How many more times the batch goes through the model, to compare its outputs with the first pass's.
REPEATS = 2

# a lone model and the loss it passed with: a lone client's copies are made afresh for each step
# (private_gradient), and the check holds once per model and loss, as it does once per copies
_PASSED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _resolution(dtype: torch.dtype) -> float:
    return math.sqrt(torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0


def _alone(loss_fn: LossFn, flat: torch.Tensor, targets: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every record's loss and output gradient with the record alone (vmapped; a loop where the loss cannot be).
    A loss that fails on one record alone raises ValueError: it is not per record."""

    def one(output: torch.Tensor, *target: torch.Tensor) -> torch.Tensor:
        return loss_fn(output.unsqueeze(0), *(t.unsqueeze(0) for t in target)).sum()

    try:
        return vmap(one)(flat.detach(), *targets), vmap(grad(one))(flat.detach(), *targets)
    except Exception:  # noqa: BLE001 - a loss torch.func cannot trace is checked record by record
        values, gradients = [], []
        for z in range(flat.shape[0]):
            record = flat[z].detach().requires_grad_(True)
            try:
                value = one(record, *(t[z] for t in targets))
            except Exception as error:  # noqa: BLE001 - whatever it raises, the loss reads more than one record
                raise ValueError(f"The loss cannot be computed for record {z} alone ({error}): it is not per "
                                 "record, and the private step clips each record's gradient on its own.") from error
            values.append(value.detach())
            gradients.append(torch.autograd.grad(value, record)[0])
        return torch.stack(values), torch.stack(gradients)


def _coupled_loss(loss_fn: LossFn, flat: torch.Tensor, targets: list[torch.Tensor],
                  losses: torch.Tensor) -> int | None:
    """The first record whose loss or output gradient alone differs from its row in the batch; None."""
    n = flat.shape[0]
    rows = torch.autograd.grad(losses.sum(), flat)[0]
    losses = losses.detach()
    finite = torch.isfinite(rows.reshape(n, -1)).all(1) & torch.isfinite(losses)
    if not bool(finite.any()):
        return None
    values, gradients = _alone(loss_fn, flat, targets)
    resolution = _resolution(rows.dtype)
    value_tolerance = resolution * (losses[finite].abs().max() + losses.abs())
    row_tolerance = resolution * (rows[finite].abs().max() + rows.abs())
    differs = ((values - losses).abs() > value_tolerance) | ((gradients - rows).abs() > row_tolerance).reshape(
        n, -1).any(1)
    coupled = torch.nonzero(differs & finite).flatten()
    return int(coupled[0]) if coupled.numel() else None


def _coupled_output(copies: ClientCopies, inputs: torch.Tensor, outputs: torch.Tensor) -> int | None:
    """The first of a few records (spread over the batch) whose output alone differs from its row; None."""
    width = inputs.shape[1]
    resolution = _resolution(outputs.dtype)
    finite = torch.isfinite(outputs)
    scale = float(outputs[finite].abs().max()) if bool(finite.any()) else 1.0
    for z in _checked_records(width):
        try:
            with torch.no_grad():
                alone = copies.outputs(inputs[:, z:z + 1])[:, 0]
        except (RuntimeError, ValueError):  # a model that cannot take one record alone (batch norm in training mode)
            return z
        row = outputs[:, z]
        mask = torch.isfinite(row) & torch.isfinite(alone)
        if not torch.allclose(alone[mask], row[mask], rtol=resolution, atol=resolution * scale):
            return z
    return None


def _generator_states() -> list[torch.Tensor]:
    """The states of torch's default generators: the CPU's, and every CUDA device's once CUDA is in use."""
    states = [torch.random.get_rng_state()]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states.extend(torch.cuda.get_rng_state_all())
    return states


def _check_deterministic(copies: ClientCopies, inputs: torch.Tensor) -> torch.Tensor:
    """The outputs of ``inputs``; ValueError if the forward pass draws randomness (module docstring)."""
    before = _generator_states()
    with torch.no_grad():
        outputs = copies.outputs(inputs)
    after = _generator_states()
    drew = len(before) != len(after) or any(not torch.equal(a, b) for a, b in zip(before, after))
    scale = torch.nan_to_num(outputs, nan=0.0, posinf=0.0, neginf=0.0).abs().max() if outputs.numel() else 0.0
    tolerance = float(_resolution(outputs.dtype) * scale)
    for _ in range(REPEATS if not drew else 0):
        with torch.no_grad():
            again = copies.outputs(inputs)
        same = ((outputs - again).abs() <= tolerance) | (outputs.isnan() & again.isnan()) | (outputs == again)
        drew = drew or not bool(same.all())
    if drew:
        raise ValueError("The model draws randomness in its forward pass (torch's generator advanced, or the same "
                         "batch gave different outputs twice): a random layer (dropout, noise, a random mixing of "
                         "records) can couple the records of a batch in a way no check of one draw sees. The "
                         "private step needs a deterministic forward pass; put such layers in eval mode or remove "
                         "them.")
    return outputs


def check_records_apart(copies: ClientCopies, loss_fn: LossFn, batch: tuple[torch.Tensor, ...]) -> None:
    """ValueError unless the model gives each record an output of its input alone and ``loss_fn`` a loss of its
    output alone (module docstring); checked once per copies and loss.

    Parameters
    ----------
    copies : ClientCopies
    loss_fn : callable
    batch : tuple of torch.Tensor
        ``(K, B, ...)`` records the copies are about to step on.
    """
    lone = isinstance(copies, LoneClient)
    if _checked(copies, loss_fn, lone) or batch[0].shape[1] < 2:
        return
    outputs = _check_deterministic(copies, batch[0])
    record = _coupled_output(copies, batch[0], outputs)
    if record is not None:
        raise ValueError(f"The model couples the records of a batch: record {record}'s output differs when it is "
                         "alone (a layer that reads the batch, such as batch normalisation in training mode). The "
                         "private step clips each record's gradient on its own, which needs every record's output to "
                         "read its input only.")
    flat = outputs.flatten(0, 1).detach().requires_grad_(True)
    targets = [t.flatten(0, 1) for t in batch[1:]]
    losses = loss_fn(flat, *targets)
    n = flat.shape[0]
    if losses.shape != (n,):
        raise ValueError(f"The loss must return one value per record: shape ({n},) for {n} records. Got "
                         f"{tuple(losses.shape)}: the loss is not per record.")
    coupled = _coupled_loss(loss_fn, flat, targets, losses)
    if coupled is not None:
        raise ValueError(f"The loss couples the records of a batch: record {coupled}'s loss or its gradient "
                         "differs when the record is alone (a loss centred on the batch, or scaled by its size, is "
                         "not per record). The private step clips each record's gradient on its own, which needs "
                         "loss_fn(output, *targets)[z] to read record z's output and targets only.")
    record = _coupled_gradient(copies, loss_fn, batch)
    if record is not None:
        raise ValueError(f"The model couples the records of a batch: record {record}'s gradient differs when it is "
                         "alone (a layer that mixes records with autograd on, or in its backward pass). The private "
                         "step clips each record's gradient on its own, which needs every record's gradient to read "
                         "that record only.")
    copies._apart = loss_fn
    if lone:
        _PASSED[copies.module] = _passing(copies.module, loss_fn)


def _checked(copies: ClientCopies, loss_fn: LossFn, lone: bool) -> bool:
    """Whether these copies (or, for a lone client, its model as it is now) passed the check with ``loss_fn``."""
    return copies._apart is loss_fn or (lone and _PASSED.get(copies.module) == _passing(copies.module, loss_fn))


def _passing(module: torch.nn.Module, loss_fn: LossFn) -> tuple:
    """What a lone model passed the check with: the loss, and every layer, its class and its training mode (a layer
    replaced, or batch normalisation put in training mode, is checked again)."""
    return loss_fn, tuple((id(m), type(m), m.training) for m in module.modules())


def _checked_records(width: int) -> list[int]:
    """:data:`OUTPUT_CHECKS` records spread over a batch of ``width``."""
    return sorted({round(i * (width - 1) / (OUTPUT_CHECKS - 1)) for i in range(OUTPUT_CHECKS)})


def _coupled_gradient(copies: ClientCopies, loss_fn: LossFn, batch: tuple[torch.Tensor, ...]) -> int | None:
    """The first of a few records whose per-record gradient alone differs from its row of the batch's, by the route
    the step takes; None."""
    together = copies.per_record_gradients(loss_fn, batch)
    n_clients, width = together.norms().shape
    for z in _checked_records(width):
        # each record's own row, never a sum: nothing here is a step's clipped sum (a referee counts those)
        factors = torch.zeros(n_clients, width, dtype=torch.float64)
        factors[:, z] = 1.0
        row = {name: rows[:, z] for name, rows in together.scaled(factors).items()}
        alone = {name: rows[:, 0] for name, rows in copies.per_record_gradients(
            loss_fn, tuple(x[:, z:z + 1] for x in batch)).scaled(torch.ones(n_clients, 1, dtype=torch.float64)).items()}
        for name, value in row.items():
            mask = torch.isfinite(value) & torch.isfinite(alone[name])
            scale = float(torch.where(mask, value, 0.0).abs().max()) if bool(mask.any()) else 1.0
            resolution = _resolution(value.dtype)
            if not torch.allclose(alone[name][mask], value[mask], rtol=resolution, atol=resolution * scale):
                return z
    return None
