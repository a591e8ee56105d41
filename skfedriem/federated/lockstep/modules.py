"""Which torch modules K clients can run as one, stacked along a client axis, and the stacked copy.

A module can be stacked when every submodule's
:class:`~skfedriem.privacy.ModelCapabilities` say it stacks (its forward, and
its per-record rule if it has one, apply parameters of shape ``(K, *shape)``
to inputs of shape ``(K, B, ...)``: torch's containers and element-wise
activations, SPDNet's layers...) or give a stacked copy (``nn.Linear``'s
:class:`~skfedriem.privacy.per_record.torch_layers.StackedLinear`), and nothing is hooked.
The claim is checked once per stack (:func:`~skfedriem.federated.lockstep.check.check_stack`):
each client's per-record gradients must be a lone copy's at that client's
parameters. Any other module (e.g. EEGNet's convolutions) is differentiated by
``torch.func``: a ``vmap`` over the clients of the ``vmap`` over the records
that a lone client runs. :func:`stacking_obstacle` names what keeps a model's
clients from running in lockstep, and the estimators say it once.
"""

from __future__ import annotations

import copy

from torch import nn

from ...manifolds import ManifoldParameter
from ...privacy.per_record.capabilities import capabilities_of
from ...privacy.per_record.hooks import has_hooks
from ...privacy.per_record.layerwise import supports_layerwise
from ...privacy.mechanisms.units import RECORD, PrivacyUnit
from ..optimizers import is_elementwise

__all__ = ["lockstep_eligible", "stacked_gradients_available", "stacked_module", "stacked_parameter",
           "stacking_obstacle", "supports_stacking"]


def lockstep_eligible(module: nn.Module, optimizer, sampling: str, unit: PrivacyUnit = RECORD) -> bool:
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
    unit : PrivacyUnit, default=RECORD

    Returns
    -------
    bool
    """
    if sampling not in ("fixed", "poisson"):
        raise ValueError(f"The 'sampling' parameter must be one of ['fixed', 'poisson']. Got {sampling!r} instead.")
    return not unit.samples_subjects_whole and is_elementwise(optimizer) and stacked_gradients_available(module)


def _unstackable_layer(module: nn.Module) -> tuple[str, nn.Module] | None:
    """The first submodule (name, layer) that neither stacks nor has a stacked copy; None when every one does."""
    for name, sub in module.named_modules():
        if not capabilities_of(sub).can_stack:
            return name, sub
    return None


def supports_stacking(module: nn.Module) -> bool:
    """Whether every submodule of ``module`` applies stacked parameters to stacked records (module docstring).

    Parameters
    ----------
    module : torch.nn.Module

    Returns
    -------
    bool
    """
    return _unstackable_layer(module) is None and not has_hooks(module)


def stacked_gradients_available(module: nn.Module) -> bool:
    """Whether :class:`~skfedriem.federated.lockstep.ClientStack` computes ``module``'s per-record gradients as a lone client does.

    True when the module can be stacked, or when a lone client itself uses
    ``torch.func`` (no closed form, no complete set of layer rules): a
    module whose own per-record rules exist for a reason ``vmap`` may not
    share is never run another way. False for a module with tied parameters
    (one parameter under two names) or with hooks.

    Parameters
    ----------
    module : torch.nn.Module

    Returns
    -------
    bool
    """
    return stacking_obstacle(module) is None


def stacking_obstacle(module: nn.Module) -> str | None:
    """Why the clients of ``module`` cannot run in lockstep, in words naming the layer; None when they can.

    Parameters
    ----------
    module : torch.nn.Module

    Returns
    -------
    str or None
    """
    kind = type(module).__name__
    if len(list(module.named_parameters(remove_duplicate=False))) != len(list(module.named_parameters())):
        return f"{kind} ties one parameter to two names"
    if has_hooks(module):
        return f"{kind} has hooks (on a layer, or on every module)"
    blocker = _unstackable_layer(module)
    if blocker is None:
        return None
    if capabilities_of(module).tangent_gradients is None and not supports_layerwise(module):
        return None  # differentiated by torch.func, lone or stacked
    name, layer = blocker
    return (f"{kind}'s layer {name or '(the model)'!r} ({type(layer).__name__}) declares no stacking (its "
            "ModelCapabilities, or register_capabilities for a class one cannot edit)")


def stacked_parameter(param: nn.Parameter, n_clients: int) -> nn.Parameter:
    """``param`` copied ``n_clients`` times along a new leading axis (a ManifoldParameter keeps its manifold)."""
    data = param.detach().unsqueeze(0).expand(n_clients, *param.shape).clone()
    if isinstance(param, ManifoldParameter):
        return ManifoldParameter(data, param.manifold)
    return nn.Parameter(data)


def stacked_module(module: nn.Module, n_clients: int) -> nn.Module:
    """A copy of ``module`` whose layers stack (each replaced by its stacked copy where it declares one) and whose
    trainable blocks are stacked.

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
    replace = capabilities_of(module).stacked
    twin = replace(copy.deepcopy(module)) if replace is not None else copy.deepcopy(module)
    for sub in list(twin.modules()):
        for name, child in list(sub.named_children()):
            replace = capabilities_of(child).stacked
            if replace is not None:
                setattr(sub, name, replace(child))
    for sub in twin.modules():
        for name, param in list(sub._parameters.items()):
            if param is not None and param.requires_grad:
                sub._parameters[name] = stacked_parameter(param, n_clients)
    return twin
