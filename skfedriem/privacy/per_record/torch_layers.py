"""torch's own layers as the private step knows them: containers, ``nn.Linear`` and element-wise activations.

Registered with :func:`~skfedriem.privacy.per_record.capabilities.register_capabilities`
when :mod:`skfedriem.privacy` is imported:

* containers (``nn.Sequential``, ``nn.Identity``, ``nn.ModuleList``,
  ``nn.ModuleDict``) stack: they only pass inputs on;
* ``nn.Linear`` has the per-record rule ∂ℓ_z/∂W = g_z x_zᵀ, ∂ℓ_z/∂b = g_z and
  is stacked by :class:`StackedLinear`;
* element-wise activations without parameters (ReLU, LeakyReLU, ELU, GELU,
  SiLU, Sigmoid, Tanh, Softplus) stack: they act on each entry alone, whatever
  the leading axes.

Dropout is not among them: in training mode it draws from torch's global
generator, which a client's secret randomness never is.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .capabilities import ModelCapabilities, register_capabilities

__all__ = ["StackedLinear", "linear_rule"]


def linear_rule(layer: nn.Module, X: torch.Tensor, grad_output: torch.Tensor) -> dict[str, torch.Tensor]:
    """g_z x_zᵀ and g_z for every record z (any leading axes): ``nn.Linear``'s per-record rule."""
    grads = {"weight": grad_output.unsqueeze(-1) * X.unsqueeze(-2)}
    if layer.bias is not None:
        grads["bias"] = grad_output
    return grads


class StackedLinear(nn.Module):
    """``nn.Linear``'s map for one weight ``(out, in)`` or K stacked weights ``(K, out, in)`` on ``(K, B, in)``.

    Holds the same ``weight`` and ``bias`` parameters as the layer it replaces,
    and the same per-record rule.

    Parameters
    ----------
    linear : torch.nn.Linear
    """

    capabilities = ModelCapabilities(per_record_rule=linear_rule, rule_input_dims=1, stacks=True)

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


_PASS_ON = ModelCapabilities(stacks=True)

for _container in (nn.Sequential, nn.Identity, nn.ModuleList, nn.ModuleDict):
    register_capabilities(_container, _PASS_ON)
for _activation in (nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Sigmoid, nn.Tanh, nn.Softplus):
    register_capabilities(_activation, _PASS_ON)
register_capabilities(nn.Linear, ModelCapabilities(per_record_rule=linear_rule, rule_input_dims=1,
                                                   stacked=StackedLinear))
