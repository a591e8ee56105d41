"""Per-sample gradients from one ordinary backward pass, layer by layer.

When no layer couples the records of a batch, the gradient of the summed loss
with respect to a layer's output Y is, row by row, the gradient of each
record's own loss: ∂(Σ_z ℓ_z)/∂Y_z = ∂ℓ_z/∂Y_z. A layer that knows how its
parameters' gradient follows from its input X_z and that output gradient
(Linear: g_z a_zᵀ; BiMap: 2 X_z W sym(G_z)) then yields every record's
gradient with a few batched products, after a single forward and backward
pass. This is the grad-sample idea of Opacus (Yousefpour et al., 2021), written
here because Opacus' hooks cannot be given rules for our manifold layers and
its GradSampleModule wraps the model in ways the federated engine does not
need. ``torch.func.vmap`` remains the general fallback
(:func:`skfedriem.privacy.per_sample_gradients`), and tests check the two agree.

A layer supports this path when its :class:`~skfedriem.privacy.ModelCapabilities`
declare a ``per_record_rule(layer, X, grad_output) -> {local name: (B, *shape)}``
(``nn.Linear``'s is registered; SPDNet's BiMap declares its own), and, for a
rule that holds only for inputs of shape ``(*records, features)``, how many
trailing axes it expects (``rule_input_dims``). The path stands aside (returns
None, and ``torch.func`` runs) for a module with hooks, whose recorded outputs
would not be what the next layer reads, and for a forward that changes a
recorded output in place.
"""

from __future__ import annotations

import torch
from torch import nn

from .capabilities import capabilities_of
from .hooks import has_hooks
from .per_sample import LossFn

__all__ = ["layerwise_per_sample_gradients", "supports_layerwise"]


def _owners(module: nn.Module) -> dict[str, nn.Module]:
    """The submodules that directly own a trainable parameter, by prefix."""
    # sub._parameters is what sub.parameters(recurse=False) walks, without its per-call generator
    # machinery (run at every step: 80 µs of an SPDNet step)
    return {
        prefix: sub
        for prefix, sub in module.named_modules()
        if any(p is not None and p.requires_grad for p in sub._parameters.values())
    }


def supports_layerwise(module: nn.Module) -> bool:
    """Whether every trainable parameter of ``module`` has a per-layer rule (see the module docstring).

    Parameters
    ----------
    module : torch.nn.Module

    Returns
    -------
    bool
    """
    return all(capabilities_of(sub).per_record_rule is not None for sub in _owners(module).values())


def layerwise_per_sample_gradients(
    module: nn.Module, loss_fn: LossFn, batch: tuple[torch.Tensor, ...], *, record_dims: int = 1
) -> dict[str, torch.Tensor] | None:
    """Ambient per-record gradients by layer rules, or None when they do not apply.

    Parameters
    ----------
    module : torch.nn.Module
        No layer may mix records (e.g. training-mode batch normalisation).
    loss_fn : callable
        ``loss_fn(output, *targets) -> Tensor (B,)``.
    batch : tuple of torch.Tensor
        ``(inputs, *targets)``.
    record_dims : int, default=1
        How many leading axes index the records: 2 for clients in lockstep,
        whose inputs are (K, B, ...) and whose ``loss_fn`` returns (K, B)
        (:mod:`skfedriem.federated.lockstep`).

    Returns
    -------
    grads : dict of str to torch.Tensor or None
        Same keys and shapes as :func:`~skfedriem.privacy.per_sample_gradients`
        (``(*records, *param.shape)``); None if a trainable layer has no rule,
        is called more than once per forward pass, or (Linear) receives inputs
        that are not (B, features).
    """
    owners = _owners(module)
    capabilities = {prefix: capabilities_of(sub) for prefix, sub in owners.items()}
    if any(c.per_record_rule is None for c in capabilities.values()) or has_hooks(module):
        return None
    loss, calls = _recorded_forward(module, loss_fn, batch, owners)
    records = batch[0].shape[:record_dims]
    if not all(_rule_applies(calls[prefix], capabilities[prefix].rule_input_dims, records) for prefix in owners):
        return None
    outputs_grads = torch.autograd.grad(loss, [calls[prefix][0][1] for prefix in owners])
    grads: dict[str, torch.Tensor] = {}
    for (prefix, layer), G in zip(owners.items(), outputs_grads):
        grads.update(_own_gradients(prefix, layer, capabilities[prefix].per_record_rule(layer, calls[prefix][0][0], G)))
    return {name: grads[name] for name in _trained_names(module)}


def _own_gradients(prefix: str, layer: nn.Module, rule: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A layer's rule's gradients of its own trainable parameters, by their names in the whole module."""
    local = {n for n, p in layer.named_parameters(recurse=False) if p.requires_grad}
    return {f"{prefix}.{name}" if prefix else name: g for name, g in rule.items() if name in local}


def _trained_names(module: nn.Module) -> list[str]:
    return [name for name, p in module.named_parameters() if p.requires_grad]


def _recorded_forward(module: nn.Module, loss_fn: LossFn, batch: tuple[torch.Tensor, ...],
                      owners: dict[str, nn.Module]) -> tuple[torch.Tensor, dict[str, list]]:
    """The batch's summed loss, and every call of each owner: (its input, its output, the output's version)."""
    calls: dict[str, list] = {prefix: [] for prefix in owners}

    def recorder(prefix: str):
        def hook(_layer, inputs, output):
            calls[prefix].append((inputs[0].detach(), output, output._version))

        return hook

    handles = [sub.register_forward_hook(recorder(prefix)) for prefix, sub in owners.items()]
    try:
        loss = loss_fn(module(batch[0]), *batch[1:]).sum()
    finally:
        for handle in handles:
            handle.remove()
    return loss, calls


def _rule_applies(calls: list, feature_dims: int | None, records: torch.Size) -> bool:
    """Whether a layer's rule applies to its calls: one call, on inputs ``(*records, features)`` of the rule's
    width, whose output nothing changed in place afterwards (an in-place activation would have)."""
    if len(calls) != 1:
        return False
    X, output, version = calls[0]
    record_dims = len(records)
    if X.shape[:record_dims] != records or (feature_dims is not None and X.dim() != record_dims + feature_dims):
        return False
    return output._version == version
