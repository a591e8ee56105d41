"""K clients' copies of a model, as the private step runs on them; a lone client is the case K = 1.

The private step (:func:`~skfedriem.privacy.mechanisms.mechanism.private_step`) reads
a model only through :class:`ClientCopies`: the clients' iterates, stacked
along a leading client axis ``(K, *shape)``, their outputs on their records
``(K, B, ...)``, every record's tangent gradient and, without privacy, the
gradient of their summed loss. :class:`LoneClient` is one client on its own
model (K = 1, the module's own parameters);
:class:`~skfedriem.federated.lockstep.ClientStack` is K simulated clients
stacked. Clipping, counting, noise and the projection are the step's, once,
for both.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod

import torch
from torch import nn

from ...manifolds import Manifold, manifold_of, project_parameters_
from .gradients import PerRecordGradients, per_record_gradients, with_client_axis
from .per_sample import LossFn, trainable_parameters

__all__ = ["PRIVATE_DTYPES", "ClientCopies", "LoneClient", "check_private_dtypes"]

#: The parameter dtypes a private step computes in: half precision rounds a clipped record past C (a bfloat16
#: entry keeps 8 bits) and its noise to a few bits.
PRIVATE_DTYPES = (torch.float32, torch.float64)


def check_private_dtypes(module: nn.Module) -> list[torch.dtype]:
    """The dtypes of ``module``'s trainable blocks, or a ValueError naming a block that is not in :data:`PRIVATE_DTYPES`.

    Parameters
    ----------
    module : torch.nn.Module

    Returns
    -------
    list of torch.dtype
    """
    params = trainable_parameters(module)
    for name, param in params.items():
        if param.dtype not in PRIVATE_DTYPES:
            raise ValueError(f"{type(module).__name__}'s parameter {name!r} is {param.dtype}; private steps compute in "
                             "torch.float32 or torch.float64 (half precision rounds a clipped record past C and its "
                             "noise to a few bits). Convert the model with .float() or .double().")
    return [p.dtype for p in params.values()]


class ClientCopies(ABC):
    """K clients' copies of one model at their own iterates: what the private step reads of a model.

    Attributes
    ----------
    module : torch.nn.Module
        The clients' model (a lone client's own, trained in place).
    n_clients : int
        K.
    blocks : dict of str to torch.nn.Parameter
        The trainable blocks the optimiser steps, by name (``(K, *shape)`` when stacked).
    manifolds : dict of str to Manifold
        The manifold of every trainable block, by name.
    parameters : list of torch.nn.Parameter
        What the clients' (stacked) optimiser steps.
    """

    module: nn.Module
    n_clients: int
    blocks: dict[str, nn.Parameter]
    manifolds: dict[str, Manifold]
    parameters: list[nn.Parameter]
    #: The loss :func:`~skfedriem.privacy.per_record.apart.check_records_apart` last passed these copies with.
    _apart: object = None

    @abstractmethod
    def points(self) -> dict[str, torch.Tensor]:
        """Every client's iterate θ_k of every trainable block, ``(K, *shape)``, detached."""

    @abstractmethod
    def outputs(self, inputs: torch.Tensor) -> torch.Tensor:
        """The model's outputs of client k's records at θ_k, ``(K, B, ...)`` for inputs ``(K, B, ...)``."""

    @abstractmethod
    def per_record_gradients(self, loss_fn: LossFn, batch: tuple[torch.Tensor, ...]) -> PerRecordGradients:
        """Every record's tangent gradient P_θk ∇f(θ_k; z), norms ``(K, B)``, for records ``(K, B, ...)``."""

    @abstractmethod
    def summed_gradients(self, loss_fn: LossFn, batch: tuple[torch.Tensor, ...],
                         weights: torch.Tensor | None, denominator: float) -> dict[str, torch.Tensor]:
        """The ambient gradient of Σ_z w_kz f(θ_k; z) / B for every client, ``(K, *shape)`` (weights None: 1)."""

    @abstractmethod
    def load(self, theta: dict[str, torch.Tensor]) -> None:
        """Every client's iterate := θ_t."""

    @abstractmethod
    def step_(self, optimizer: torch.optim.Optimizer, released: dict[str, torch.Tensor]) -> None:
        """One step of ``optimizer`` on the released gradients ``(K, *shape)``, then Π of every manifold block."""

    def verify(self, loss_fn: LossFn, clients: list[tuple[torch.Tensor, ...]]) -> None:
        """Check, before the first step, what the construction of these copies cannot guarantee (nothing here)."""

    def merged_optimizer_state(self, states: list[dict]) -> dict:
        """The clients' kept optimiser states as one state of the optimiser over :attr:`parameters`."""
        return states[0]

    def client_optimizer_states(self, merged: dict) -> list[dict]:
        """Each client's slice of the optimiser's state, as its own optimiser would hold it."""
        return [copy.deepcopy(merged)]


class LoneClient(ClientCopies):
    """One client on its own model: the private step's copies with K = 1, the module's own parameters.

    Parameters
    ----------
    module : torch.nn.Module
        Its trainable parameters are the client's iterate, stepped in place.

    Examples
    --------
    >>> import torch
    >>> client = LoneClient(torch.nn.Linear(3, 2))
    >>> {name: tuple(p.shape) for name, p in client.points().items()}
    {'weight': (1, 2, 3), 'bias': (1, 2)}
    """

    n_clients = 1

    def __init__(self, module: nn.Module) -> None:
        check_private_dtypes(module)
        self.module = module
        self.blocks = trainable_parameters(module)
        self.manifolds = {name: manifold_of(p) for name, p in self.blocks.items()}
        self.parameters = list(module.parameters())

    def points(self) -> dict[str, torch.Tensor]:
        return {name: p.detach().unsqueeze(0) for name, p in self.blocks.items()}

    def outputs(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.module(inputs[0]).unsqueeze(0)

    def per_record_gradients(self, loss_fn: LossFn, batch: tuple[torch.Tensor, ...]) -> PerRecordGradients:
        return with_client_axis(per_record_gradients(self.module, loss_fn, tuple(x[0] for x in batch)))

    def summed_gradients(self, loss_fn: LossFn, batch: tuple[torch.Tensor, ...],
                         weights: torch.Tensor | None, denominator: float) -> dict[str, torch.Tensor]:
        if batch[0].shape[1] == 0:
            return {name: torch.zeros_like(p).unsqueeze(0) for name, p in self.blocks.items()}
        losses = loss_fn(self.module(batch[0][0]), *(x[0] for x in batch[1:]))
        if weights is not None:
            losses = losses * weights[0].to(losses.device, losses.dtype)
        grads = torch.autograd.grad(losses.sum() / denominator, list(self.blocks.values()))
        return {name: g.unsqueeze(0) for name, g in zip(self.blocks, grads)}

    @torch.no_grad()
    def load(self, theta: dict[str, torch.Tensor]) -> None:
        for name, p in self.blocks.items():
            p.copy_(theta[name])

    def step_(self, optimizer: torch.optim.Optimizer, released: dict[str, torch.Tensor]) -> None:
        for name, param in self.blocks.items():
            # contiguous: torch's fused Adam misreads a gradient whose strides differ from its parameter's
            param.grad = released[name][0].to(param.dtype).contiguous()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        project_parameters_(self.module)
