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
    calls: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {prefix: [] for prefix in owners}

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
    if any(len(c) != 1 for c in calls.values()):
        return None
    records = batch[0].shape[:record_dims]
    for prefix, [(X, output, version)] in calls.items():
        # a rule for inputs (*records, features) on anything else, or an output changed in place after the layer
        # (an in-place activation): the vmap path stands in
        feature_dims = capabilities[prefix].rule_input_dims
        if X.shape[:record_dims] != records or (feature_dims is not None and X.dim() != record_dims + feature_dims):
            return None
        if output._version != version:
            return None
    prefixes = list(calls)
    outputs_grads = torch.autograd.grad(loss, [calls[p][0][1] for p in prefixes])
    grads: dict[str, torch.Tensor] = {}
    for prefix, G in zip(prefixes, outputs_grads):
        X = calls[prefix][0][0]
        local = {n for n, p in owners[prefix].named_parameters(recurse=False) if p.requires_grad}
        for name, g in capabilities[prefix].per_record_rule(owners[prefix], X, G).items():
            if name in local:
                grads[f"{prefix}.{name}" if prefix else name] = g
    order = [name for name, p in module.named_parameters() if p.requires_grad]
    return {name: grads[name] for name in order}
