"""Every record's tangent gradient of an SPDNet in closed form: one forward, one hand-written backward, no autograd graph.

The private step needs each record's gradient, not their sum. The layer-wise
route (:mod:`skfedriem.privacy.layerwise`) gets them from one autograd pass
with forward hooks, then projects each onto the tangent space; for SPDNet
that costs about as much again as the eigendecompositions it cannot avoid
(the autograd engine, the hooks, the Stiefel projection's products with W
copied once per record). Here the chain rule of TraceNormalize → (BiMap →
ReEig)ᴸ → LogEig → Vech → Linear is written out, per record and batched over
records and clients:

* the loss's gradient g_z = ∂ℓ_z/∂logits_z is the only autograd call, on
  the logits alone (so any per-record loss works);
* Linear: ∂ℓ_z/∂A = g_z v_zᵀ, ∂ℓ_z/∂b = g_z, and ∂ℓ_z/∂v_z = Aᵀ g_z;
* each spectral layer X ↦ U f(Λ) Uᵀ by the Daleckii–Krein formula
  (:func:`~skfedriem.models.spectral.loewner_matrix`), as its own backward does;
* BiMap Y = WᵀXW: ∂ℓ_z/∂W = 2 X_z W G_z with G_z = ∂ℓ_z/∂Y_z symmetric, and
  ∂ℓ_z/∂X_z = W G_z Wᵀ for the block before;
* the Stiefel tangent projection P_W(Z) = Z − W sym(WᵀZ) of Z = 2 T_z G_z
  (T_z = X_z W, kept from the forward) reads WᵀZ = 2 Y_z G_z from the
  forward's Y_z = Wᵀ T_z, 16 × 16 products instead of W's 22 × 16 once per record.

It is the same function as the layer-wise route up to rounding (tests check
both against ``torch.func``). It applies to an :class:`~skfedriem.models.SPDNet`
exactly as built (its own class, its own layers in their order, no hooks, W
on the Stiefel manifold, square inputs); anything else returns None and the
private step takes the generic route.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..manifolds import Stiefel, manifold_of
from .spectral import _values, loewner_matrix

__all__ = ["spdnet_tangent_gradients"]

LossFn = Callable[..., torch.Tensor]


def _per_client(W: torch.Tensor, records: int) -> torch.Tensor:
    """W (n_in, n_out), or K stacked ones (K, n_in, n_out) viewed to meet K clients' records (K, B, ..., n, n)."""
    return W if W.dim() == 2 else W.view(W.shape[0], *[1] * (records - 1), *W.shape[1:])


def _times_weight(X: torch.Tensor, W: torch.Tensor, records: int) -> torch.Tensor:
    """X_z W for every record: one product per client, its records' rows stacked (no copy of W per record)."""
    n_in, n_out = W.shape[-2:]
    if W.dim() == 2:
        return (X.reshape(-1, n_in) @ W).view(*X.shape[:-1], n_out)
    return torch.bmm(X.reshape(W.shape[0], -1, n_in), W).view(*X.shape[:-1], n_out)


def _stiefel_tangent(W: torch.Tensor, T: torch.Tensor, Y: torch.Tensor, G: torch.Tensor,
                     records: int) -> torch.Tensor:
    """P_W(2 T G) = 2 T G − W (Y G + G Y) for every record: WᵀT = Y and G symmetric give sym(Wᵀ 2TG) = YG + GY."""
    M = Y @ G
    return 2 * (T @ G) - _per_client(W, records) @ (M + M.transpose(-1, -2))


def _structure(net: nn.Module):
    """(normalize, [(BiMap's name, spectral kind, floor)], Vech) of an SPDNet as built, else None."""
    from .spdnet import SPDNet, BiMap, LogReEig, ReEig, TraceNormalize, Vech

    if type(net) is not SPDNet or type(net.classifier) is not nn.Linear or net.classifier.bias is None:
        return None
    if any(_hooked(sub) for sub in net.modules()):
        return None
    layers = list(net.features.named_children())
    normalize = bool(layers) and type(layers[0][1]) is TraceNormalize
    layers = layers[1:] if normalize else layers
    if len(layers) < 3 or len(layers) % 2 != 1 or type(layers[-1][1]) is not Vech:
        return None
    blocks = []
    for position, ((name, bimap), (_, spectral)) in enumerate(zip(layers[:-1:2], layers[1:-1:2])):
        last = position == len(layers) // 2 - 1
        if type(bimap) is not BiMap or type(spectral) is not (LogReEig if last else ReEig):
            return None
        if not isinstance(manifold_of(bimap.weight), Stiefel):
            return None
        blocks.append((f"features.{name}.weight", "log_reeig" if last else "reeig", float(spectral.eps)))
    if any(getattr(p, "manifold", None) is not None for p in net.classifier.parameters()):
        return None
    return normalize, blocks, layers[-1][1]


def _hooked(module: nn.Module) -> bool:
    return any(getattr(module, name, None) for name in (
        "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"))


def _logits(features: torch.Tensor, A: torch.Tensor, b: torch.Tensor, records: int) -> torch.Tensor:
    """v_z Aᵀ + b for every record, with A and b each one client's or stacked over clients."""
    out = torch.bmm(features, A.transpose(-1, -2)) if A.dim() == 3 else features @ A.transpose(-1, -2)
    return out + (b.view(b.shape[0], *[1] * (records - 1), b.shape[1]) if b.dim() == 2 else b)


def spdnet_tangent_gradients(net: nn.Module, loss_fn: LossFn, batch: tuple[torch.Tensor, ...], *,
                             record_dims: int = 1,
                             parameters: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor] | None:
    """Every record's tangent gradient P_θ ∇ℓ(θ; z) of an SPDNet, in closed form (module docstring).

    Parameters
    ----------
    net : SPDNet
        The model: its layers, and which of its parameters are trained.
    loss_fn : callable
        ``loss_fn(logits, *targets)`` -> the per-record losses, for logits of
        shape ``(n_records, n_classes)``.
    batch : tuple of torch.Tensor
        ``(inputs, *targets)``; inputs ``(*records, C, C)``.
    record_dims : int, default=1
        How many leading axes index the records (2 for clients in lockstep:
        ``(K, B, C, C)``).
    parameters : dict of str to torch.Tensor, optional
        Values to use instead of ``net``'s own, by name; K clients' stacked
        blocks have shape ``(K, *shape)`` (:mod:`skfedriem.federated.lockstep`).

    Returns
    -------
    dict of str to torch.Tensor or None
        ``(*records, *shape)`` per trainable block, in the order of
        ``net.named_parameters()``; None when ``net`` is not an SPDNet as built,
        its inputs are not ``(*records, C, C)`` or the loss is not one value per record.
    """
    from .spdnet import _upper_triangle

    structure = _structure(net)
    X, targets = batch[0], batch[1:]
    if structure is None or X.dim() != record_dims + 2 or X.shape[-1] != X.shape[-2]:
        return None
    normalize, blocks, vech = structure
    values = {name: p.detach() for name, p in net.named_parameters()}
    values.update({name: p.detach() for name, p in (parameters or {}).items()})
    trained = {name for name, p in net.named_parameters() if p.requires_grad}
    records = X.shape[:record_dims]
    with torch.no_grad():
        if normalize:
            X = X * (X.shape[-1] / X.diagonal(dim1=-2, dim2=-1).sum(-1))[..., None, None]
        kept = []
        for name, kind, floor in blocks:
            W = values[name]
            T = _times_weight(X, W, record_dims)
            Y = _per_client(W, record_dims).transpose(-1, -2) @ T
            eigenvalues, U = torch.linalg.eigh(Y)
            kept.append((W, T, Y, eigenvalues, U))
            X = (U * _values(kind, eigenvalues, floor).unsqueeze(-2)) @ U.transpose(-1, -2)
        features = vech(X)
        A, b = values["classifier.weight"], values["classifier.bias"]
        logits = _logits(features, A, b, record_dims)
    logits.requires_grad_(True)
    with torch.enable_grad():
        losses = loss_fn(logits.flatten(0, record_dims - 1), *(t.flatten(0, record_dims - 1) for t in targets))
        if losses.shape != (records.numel(),):
            return None
        (g,) = torch.autograd.grad(losses.sum(), logits)
    grads: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        if "classifier.weight" in trained:
            grads["classifier.weight"] = g.unsqueeze(-1) * features.unsqueeze(-2)
        if "classifier.bias" in trained:
            grads["classifier.bias"] = g
        G = torch.bmm(g, A) if A.dim() == 3 else g @ A  # ∂ℓ_z/∂v_z
        n = X.shape[-1]
        G = torch.zeros(*records, n * n, dtype=G.dtype, device=G.device).index_copy_(
            -1, _upper_triangle(n, G.device), G).view(*records, n, n)  # Vech's backward
        for position in reversed(range(len(blocks))):
            name, kind, floor = blocks[position]
            W, T, Y, eigenvalues, U = kept[position]
            G = (G + G.transpose(-1, -2)) / 2
            G = U @ (loewner_matrix(kind, eigenvalues, floor) * (U.transpose(-1, -2) @ G @ U)) @ U.transpose(-1, -2)
            if name in trained:
                grads[name] = _stiefel_tangent(W, T, Y, G, record_dims)
            if position > 0:
                Wk = _per_client(W, record_dims)
                G = Wk @ G @ Wk.transpose(-1, -2)
    return {name: grads[name] for name in values if name in trained}
