"""Per-sample gradients of a per-record loss, vectorised over the batch.

We use ``torch.func`` (``vmap`` of ``grad`` over ``functional_call``) rather
than expanded weights or Opacus' grad-sample hooks: those only know the
weights of standard layers (Linear, Conv, norms), whereas our models use raw
parameters inside custom maps (SPDNet's BiMap Wᵀ X W, the PCA projector).
``torch.func`` differentiates any composition of torch ops, including custom
autograd Functions that declare a vmap rule. The cost relative to a plain
backward pass is measured in ``benchmarks/private_step.py``.

A module may provide closed-form per-record *tangent* gradients instead (see
:func:`skfedriem.privacy.private_gradient`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

__all__ = ["LossFn", "per_sample_gradients", "trainable_parameters"]

#: ``loss_fn(module(batch[0]), *batch[1:])`` returns one loss per record, shape (B,).
LossFn = Callable[..., torch.Tensor]


def trainable_parameters(module: nn.Module) -> dict[str, nn.Parameter]:
    """Named parameters with ``requires_grad`` (the blocks that are trained).

    Parameters
    ----------
    module : torch.nn.Module

    Returns
    -------
    dict of str to torch.nn.Parameter
    """
    return {name: p for name, p in module.named_parameters() if p.requires_grad}


def per_sample_gradients(
    module: nn.Module, loss_fn: LossFn, batch: tuple[torch.Tensor, ...], *,
    stacked: dict[str, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """Ambient gradient of every record's loss for every trainable parameter.

    Parameters
    ----------
    module : torch.nn.Module
    loss_fn : callable
        ``loss_fn(output, *targets) -> Tensor (B,)``, the per-record losses of
        a batch (e.g. ``F.cross_entropy(..., reduction="none")``).
    batch : tuple of torch.Tensor
        ``(inputs, *targets)``, each with the records along dim 0.
    stacked : dict of str to torch.Tensor, optional
        K clients in lockstep: every trainable block stacked as
        ``(K, *param.shape)`` and the batch as ``(K, B, ...)``; client k's
        records are differentiated at client k's parameters (a ``vmap`` over
        the clients of the ``vmap`` over the records).

    Returns
    -------
    grads : dict of str to torch.Tensor
        ``grads[name]`` has shape ``(B, *param.shape)``, or ``(K, B, *param.shape)`` when ``stacked``.
    """
    params = trainable_parameters(module) if stacked is None else stacked
    record_axis = 0 if stacked is None else 1
    if batch[0].shape[record_axis] == 0:
        return {name: p.new_zeros((*batch[0].shape[:record_axis + 1], *p.shape[record_axis:]))
                for name, p in params.items()}
    detached = {name: p.detach() for name, p in params.items()}
    buffers = {name: b.detach() for name, b in module.named_buffers()}

    def record_loss(weights: dict[str, torch.Tensor], *record: torch.Tensor) -> torch.Tensor:
        one = tuple(t.unsqueeze(0) for t in record)
        output = functional_call(module, (weights, buffers), (one[0],))
        return loss_fn(output, *one[1:]).sum()

    per_record = vmap(grad(record_loss), in_dims=(None,) + (0,) * len(batch))
    if stacked is None:
        return per_record(detached, *batch)
    return vmap(per_record, in_dims=(0,) + (0,) * len(batch))(detached, *batch)
