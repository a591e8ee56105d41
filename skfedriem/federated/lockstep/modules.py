"""Which torch modules K clients can run as one, stacked along a client axis, and the stacked copy.

A module can be stacked when every submodule is a container
(``nn.Sequential``, ``nn.Identity``), an ``nn.Linear`` (replaced by
:class:`StackedLinear`), or its class itself declares
``supports_client_stacking = True`` (a subclass does not inherit the claim):
its forward, and its per-record rule if it has one, apply parameters of shape
``(K, *shape)`` to inputs of shape ``(K, B, ...)``; and no submodule has hooks.
The claim is checked once per stack (:meth:`~skfedriem.federated.lockstep.ClientStack.verify`): each client's
forward and per-record gradient norms must be those of a lone copy at that
client's parameters. Per-record gradients then come from the model's closed
form or its layers' rules, as for one client. Any other module (e.g. EEGNet's
convolutions) is differentiated by ``torch.func``: a ``vmap`` over the clients
of the ``vmap`` over the records that a lone client runs.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from ...manifolds import ManifoldParameter
from ...privacy.layerwise import supports_layerwise
from ..optimizers import is_elementwise

__all__ = ["StackedLinear", "lockstep_eligible", "stacked_gradients_available", "stacked_module", "stacked_parameter",
           "supports_stacking"]

_CONTAINERS = (nn.Sequential, nn.Identity, nn.ModuleList, nn.ModuleDict)


def lockstep_eligible(module: nn.Module, optimizer, sampling: str, privacy_unit: str = "record",
                      records_per_subject: int | None = None) -> bool:
    """Whether clients of this model, optimiser and sampling may take their steps in lockstep: the one rule.

    Steps that sample records (record-level, or subject-level with
    ``records_per_subject``: each subject's k records of the round, sampled as
    records), on fixed-size or Poisson batches (a Poisson stack's width is
    computed from public sizes, :mod:`~skfedriem.federated.lockstep.widths`;
    a step that samples subjects whole holds its subjects' records, which no
    public width bounds), an element-wise optimiser (client k's slice of the
    stacked optimiser is its own) and a model whose per-record gradients a
    stack computes as a lone client does (:func:`stacked_gradients_available`).
    ``settings.lockstep`` asks for it; this says whether a round's clients may.

    Parameters
    ----------
    module : torch.nn.Module
        The model the clients train (for a model of fixed features, its trained part).
    optimizer : str or callable
        The clients' optimiser.
    sampling : {"fixed", "poisson"}
    privacy_unit : {"record", "subject"}, default="record"
    records_per_subject : int or None, default=None

    Returns
    -------
    bool
    """
    if sampling not in ("fixed", "poisson"):
        raise ValueError(f"The 'sampling' parameter must be one of ['fixed', 'poisson']. Got {sampling!r} instead.")
    samples_records = privacy_unit == "record" or records_per_subject is not None
    return samples_records and is_elementwise(optimizer) and stacked_gradients_available(module)


def supports_stacking(module: nn.Module) -> bool:
    """Whether every submodule of ``module`` applies stacked parameters to stacked records (module docstring).

    Parameters
    ----------
    module : torch.nn.Module

    Returns
    -------
    bool
    """
    return all((type(sub) in _CONTAINERS or type(sub) is nn.Linear
                or vars(type(sub)).get("supports_client_stacking", False)) and not _has_hooks(sub)
               for sub in module.modules())


def _has_hooks(module: nn.Module) -> bool:
    return any(getattr(module, name, None) for name in (
        "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks"))


def stacked_gradients_available(module: nn.Module) -> bool:
    """Whether :class:`~skfedriem.federated.lockstep.ClientStack` computes ``module``'s per-record gradients as a lone client does.

    True when the module can be stacked, or when a lone client itself uses
    ``torch.func`` (no closed form, no complete set of layer rules): a
    module whose own per-record rules exist for a reason ``vmap`` may not
    share is never run another way. False for a module with tied parameters
    (one parameter under two names) or with hooks on any submodule.

    Parameters
    ----------
    module : torch.nn.Module

    Returns
    -------
    bool
    """
    if _tied(module) or any(_has_hooks(sub) for sub in module.modules()):  # run one by one, as before lockstep
        return False
    if supports_stacking(module):
        return True
    return not callable(getattr(module, "per_sample_tangent_gradients", None)) and not supports_layerwise(module)


def _tied(module: nn.Module) -> bool:
    return len(list(module.named_parameters(remove_duplicate=False))) != len(list(module.named_parameters()))


class StackedLinear(nn.Module):
    """``nn.Linear``'s map for one weight ``(out, in)`` or K stacked weights ``(K, out, in)`` on ``(K, B, in)``.

    Holds the same ``weight`` and ``bias`` parameters as the layer it replaces,
    and the same per-record rule (∂ℓ_z/∂W = g_z x_zᵀ, ∂ℓ_z/∂b = g_z).

    Parameters
    ----------
    linear : torch.nn.Linear
    """

    supports_client_stacking = True
    #: The per-record rule needs inputs of shape ``(*records, in_features)`` (else the layer-wise path stands aside).
    rule_input_dims = 1

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        between = [1] * (X.dim() - 2)  # the record axis and any others between the client axis and the features
        if weight.dim() == 3 and bias is not None and bias.dim() == 2 and X.dim() == 3:  # client k's on its records
            return torch.baddbmm(bias.unsqueeze(-2), X, weight.transpose(-1, -2))
        if weight.dim() == 3:
            out = X @ weight.transpose(-1, -2).reshape(weight.shape[0], *between[1:], *weight.shape[:0:-1])
        else:
            out = F.linear(X, weight)
        if bias is None:
            return out
        return out + (bias.view(bias.shape[0], *between, bias.shape[1]) if bias.dim() == 2 else bias)

    def per_sample_parameter_gradients(self, X: torch.Tensor, grad_output: torch.Tensor) -> dict[str, torch.Tensor]:
        """g_z x_zᵀ and g_z for every record z (any leading axes)."""
        grads = {"weight": grad_output.unsqueeze(-1) * X.unsqueeze(-2)}
        if self.bias is not None:
            grads["bias"] = grad_output
        return grads


def stacked_parameter(param: nn.Parameter, n_clients: int) -> nn.Parameter:
    """``param`` copied ``n_clients`` times along a new leading axis (a ManifoldParameter keeps its manifold)."""
    data = param.detach().unsqueeze(0).expand(n_clients, *param.shape).clone()
    if isinstance(param, ManifoldParameter):
        return ManifoldParameter(data, param.manifold)
    return nn.Parameter(data)


def stacked_module(module: nn.Module, n_clients: int) -> nn.Module:
    """A copy of ``module`` whose Linear layers are :class:`StackedLinear` and whose trainable blocks are stacked.

    Parameters
    ----------
    module : torch.nn.Module
        One that :func:`supports_stacking`.
    n_clients : int
        K.

    Returns
    -------
    torch.nn.Module
        Every trainable block θ_t copied K times along a new leading axis (a
        :class:`~skfedriem.manifolds.ManifoldParameter` keeps its manifold).
    """
    twin = StackedLinear(copy.deepcopy(module)) if type(module) is nn.Linear else copy.deepcopy(module)
    for sub in list(twin.modules()):
        for name, child in list(sub.named_children()):
            if type(child) is nn.Linear:
                setattr(sub, name, StackedLinear(child))
    for sub in twin.modules():
        for name, param in list(sub._parameters.items()):
            if param is not None and param.requires_grad:
                sub._parameters[name] = stacked_parameter(param, n_clients)
    return twin
