"""K simulated clients' copies of a model stacked along a leading client axis: the private step's copies for lockstep.

A round's simulated clients start from the same θ_t with the same
instructions; only their records, batches, noise and iterates differ. With
every trainable block stacked along a new leading client axis, ``(K, *shape)``,
their K forward and backward passes become one: a batch of shape
``(K, B, ...)`` goes through a model whose layers apply client k's
parameters to client k's records (one batched ``eigh`` for SPDNet instead of
K). The stack is a :class:`~skfedriem.privacy.per_record.copies.ClientCopies`: the one
private step (:func:`~skfedriem.privacy.mechanisms.mechanism.private_step`) clips,
counts, noises and projects for it as for a lone client, so what is left to
the stack is to compute every record's gradient as a lone copy would:

* every record's gradient, and so its norm and clip factor, is the one the
  client computes alone (no layer couples records, nor clients: checked once,
  :func:`~skfedriem.federated.lockstep.check.check_stack`);
* each client's clipped sum is reduced on its own, with the code a lone
  client runs (:class:`~skfedriem.privacy.StackedDenseGradients`);
* the tangent projections, the optimiser (element-wise, so client k's slice
  of a stacked SGD or Adam is client k's own optimiser) and the projection
  onto the manifold act per client.

Which modules can be stacked, and their stacked copy, is :mod:`skfedriem.federated.lockstep.modules`.
"""

from __future__ import annotations

import torch
from torch import nn

from ...manifolds import ManifoldParameter, manifold_of
from ...privacy.per_record.capabilities import capabilities_of
from ...privacy.per_record.copies import ClientCopies, check_private_dtypes
from ...privacy.per_record.gradients import PerRecordGradients, StackedDenseGradients, first_route
from ...privacy.per_record.layerwise import layerwise_per_sample_gradients
from ...privacy.per_record.per_sample import LossFn, per_sample_gradients, trainable_parameters
from .check import check_stack
from .modules import stacked_module, stacked_parameter, stacking_obstacle, supports_stacking

__all__ = ["ClientStack"]


def _stacked_losses(loss_fn: LossFn):
    """``loss_fn`` for outputs and targets of shape (K, B, ...): the (K, B) per-record losses."""

    def losses(output: torch.Tensor, *targets: torch.Tensor) -> torch.Tensor:
        records = output.shape[:2]
        return loss_fn(output.flatten(0, 1), *(t.flatten(0, 1) for t in targets)).view(records)

    return losses


class ClientStack(ClientCopies):
    """K clients' copies of a model's trainable blocks, stacked along a leading client axis.

    Parameters
    ----------
    module : torch.nn.Module
        The clients' model (every client's is the same, from the same θ_t).
    n_clients : int
        K.

    Attributes
    ----------
    blocks : dict of str to torch.nn.Parameter
        Every trainable block, ``(K, *shape)``, tagged with its manifold.
    parameters : list of torch.nn.Parameter
        What the stacked optimiser steps, aligned index for index with
        ``module.parameters()`` (a frozen parameter is the module's own), so
        a client's optimiser state moves between the two.
    verified : bool
        Whether :meth:`verify` has passed (the ``torch.func`` route needs no check).

    Examples
    --------
    >>> import torch
    >>> from skfedriem.models import SPDNet
    >>> stack = ClientStack(SPDNet(6, 2, dims=(4,)), n_clients=3)
    >>> tuple(stack.blocks["features.1.weight"].shape)
    (3, 6, 4)
    """

    def __init__(self, module: nn.Module, n_clients: int) -> None:
        check_private_dtypes(module)
        obstacle = stacking_obstacle(module)
        if obstacle is not None:
            raise ValueError(f"{obstacle}: its clients run one by one.")
        self.module = module
        self.n_clients = int(n_clients)
        self.manifolds = {name: manifold_of(p) for name, p in trainable_parameters(module).items()}
        self.twin = stacked_module(module, n_clients) if supports_stacking(module) else None
        self.verified = self.twin is None
        if self.twin is not None:
            self.blocks = trainable_parameters(self.twin)
            self.parameters = list(self.twin.parameters())
        else:
            self.blocks = {name: stacked_parameter(p, n_clients) for name, p in trainable_parameters(module).items()}
            names = {id(p): name for name, p in module.named_parameters()}
            self.parameters = [self.blocks.get(names[id(p)], p) for p in module.parameters()]

    def points(self) -> dict[str, torch.Tensor]:
        return {name: block.detach() for name, block in self.blocks.items()}

    @torch.no_grad()
    def load(self, theta: dict[str, torch.Tensor]) -> None:
        for name, block in self.blocks.items():
            block.copy_(theta[name].expand_as(block))

    def step_(self, optimizer: torch.optim.Optimizer, released: dict[str, torch.Tensor]) -> None:
        for name, block in self.blocks.items():
            # contiguous: torch's fused Adam misreads a gradient whose strides differ from its parameter's
            block.grad = released[name].to(block.dtype).contiguous()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self.project_()

    @torch.no_grad()
    def project_(self) -> None:
        """Every client's manifold blocks := Π of themselves."""
        for block in self.blocks.values():
            if isinstance(block, ManifoldParameter):
                block.copy_(block.manifold.proj(block))

    def verify(self, loss_fn: LossFn, clients: list[tuple[torch.Tensor, ...]]) -> None:
        """Check, once, that each client's per-record gradients are a lone copy's and no client's depend on
        another's (:func:`~skfedriem.federated.lockstep.check.check_stack`); else ValueError.

        Parameters
        ----------
        loss_fn : callable
        clients : list of tuple of torch.Tensor
            Each client's records (``(inputs, *targets)``).
        """
        if not self.verified:
            check_stack(self, loss_fn, clients)
            self.verified = True

    def _stacked_indices(self) -> set[int]:
        """The optimiser's indices of the stacked blocks (a frozen parameter is shared, not stacked)."""
        return {i for i, p in enumerate(self.parameters) if any(p is b for b in self.blocks.values())}

    def merged_optimizer_state(self, states: list[dict]) -> dict:
        stacked_at = self._stacked_indices()
        merged = {"param_groups": states[0]["param_groups"], "state": {}}
        for index, entry in states[0]["state"].items():
            merged["state"][index] = {
                key: torch.stack([s["state"][index][key] for s in states])
                if index in stacked_at and torch.is_tensor(value) and value.dim() > 0 else value
                for key, value in entry.items()}
        return merged

    def client_optimizer_states(self, merged: dict) -> list[dict]:
        stacked_at = self._stacked_indices()

        def own(value, index, k):
            if index in stacked_at and torch.is_tensor(value) and value.dim() > 0:
                return value[k].clone()
            return value.clone() if torch.is_tensor(value) else value

        return [{"state": {index: {key: own(value, index, k) for key, value in entry.items()}
                           for index, entry in merged["state"].items()},
                 "param_groups": [dict(g) for g in merged["param_groups"]]} for k in range(self.n_clients)]

    def outputs(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.twin is not None:
            return self.twin(inputs)
        buffers = {name: b.detach() for name, b in self.module.named_buffers()}
        return torch.func.vmap(lambda weights, X: torch.func.functional_call(self.module, (weights, buffers), (X,)))(
            self.blocks, inputs)

    def _tangent(self, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """P_θk of each of client k's per-record gradients, ``(K, B, *shape)``."""
        out = {}
        for name, g in grads.items():
            block = self.blocks[name].detach()
            out[name] = self.manifolds[name].proju(block.unsqueeze(1), g)
        return out

    def per_record_gradients(self, loss_fn: LossFn, batch: tuple[torch.Tensor, ...]) -> PerRecordGradients:
        """Every client's per-record tangent gradients, norms (K, B), by the route a lone client takes.

        Parameters
        ----------
        loss_fn : callable
        batch : tuple of torch.Tensor
            ``(K, B, ...)``: client k's records.

        Returns
        -------
        PerRecordGradients
            Norms of shape (K, B); weighted sums of shape ``(K, *shape)``.
        """
        closed_form = capabilities_of(self.module).tangent_gradients
        stacked = self.twin is not None  # else a model that cannot stack: torch.func over its stacked blocks only
        return first_route(
            (lambda: closed_form(self.module, loss_fn, batch, record_dims=2, parameters=self.blocks))
            if stacked and closed_form is not None else None,
            (lambda: layerwise_per_sample_gradients(self.twin, _stacked_losses(loss_fn), batch, record_dims=2))
            if stacked else None,
            lambda: per_sample_gradients(self.module, loss_fn, batch, stacked=self.blocks),
            lambda ambient: StackedDenseGradients(self._tangent(ambient)))

    def summed_gradients(self, loss_fn: LossFn, batch: tuple[torch.Tensor, ...],
                         weights: torch.Tensor | None, denominator: float) -> dict[str, torch.Tensor]:
        losses = _stacked_losses(loss_fn)(self.outputs(batch[0]), *batch[1:])
        if weights is not None:
            losses = torch.where(weights != 0, losses * weights.to(losses.device, losses.dtype), 0.0)
        grads = torch.autograd.grad(losses.sum() / denominator, list(self.blocks.values()))
        return dict(zip(self.blocks, grads))
