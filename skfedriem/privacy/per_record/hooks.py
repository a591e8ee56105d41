"""Whether a module's forward runs anything besides its layers: hooks on it or on every module.

A hook can change what a layer returns or reads. A route to per-record
gradients that works from the layers' own maps (a closed form, the layer rules
of :mod:`skfedriem.privacy.per_record.layerwise`, a stacked copy) then computes something
other than the model; ``torch.func`` calls the module as it is, hooks
included, so it is the route such a module takes.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["has_hooks"]

_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                 "_state_dict_hooks")
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")


def has_hooks(module: nn.Module) -> bool:
    """Whether ``module`` or any submodule has hooks, or hooks are registered for every module.

    Torch keeps the global hooks (``torch.nn.modules.module.register_module_forward_hook``...)
    in private module globals; where a version of torch lacks one, none is assumed.

    Parameters
    ----------
    module : torch.nn.Module

    Returns
    -------
    bool
    """
    registry = torch.nn.modules.module
    if any(getattr(registry, name, None) for name in _GLOBAL_HOOKS):
        return True
    return any(getattr(sub, name, None) for sub in module.modules() for name in _MODULE_HOOKS)
