"""Every record's tangent gradient of an SPDNet in closed form: one forward, a hand-written backward, no autograd graph.

The private step needs each record's gradient, not their sum. The layer-wise
route (:mod:`skfedriem.privacy.per_record.layerwise`) gets them from one autograd pass
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
both against ``torch.func``). This module is the arithmetic only;
:meth:`~skfedriem.models.SPDNet.per_record_tangent_gradients` decides whether a
model is an SPDNet as built (anything else takes the generic route) and calls it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import torch

from ..privacy.per_record.per_sample import LossFn
from .spectral import _values, finite_eigh, loewner_matrix

__all__ = ["bire_tangent_gradients", "upper_triangle"]


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


def _logits(features: torch.Tensor, A: torch.Tensor, b: torch.Tensor, records: int) -> torch.Tensor:
    """v_z Aᵀ + b for every record, with A and b each one client's or stacked over clients."""
    out = torch.bmm(features, A.transpose(-1, -2)) if A.dim() == 3 else features @ A.transpose(-1, -2)
    return out + (b.view(b.shape[0], *[1] * (records - 1), b.shape[1]) if b.dim() == 2 else b)


@lru_cache(maxsize=32)
def upper_triangle(n: int, device: torch.device) -> torch.Tensor:
    """Flat indices of the upper triangle of an n×n matrix, row by row (what :class:`~skfedriem.models.Vech` keeps).

    Parameters
    ----------
    n : int
    device : torch.device

    Returns
    -------
    torch.Tensor of int64, shape (n (n + 1) / 2,)
    """
    rows, cols = torch.triu_indices(n, n, device=device)
    return rows * n + cols


def bire_tangent_gradients(loss_fn: LossFn, batch: tuple[torch.Tensor, ...], *, normalize: bool,
                           blocks: Sequence[tuple[str, str, float]], values: dict[str, torch.Tensor],
                           trained: Sequence[str], record_dims: int = 1,
                           whitener: torch.Tensor | None = None) -> dict[str, torch.Tensor] | None:
    """Every record's tangent gradient of [Recentre] [TraceNormalize] (BiMap → spectral)ᴸ → Vech → Linear (module
    docstring).

    Parameters
    ----------
    loss_fn : callable
        ``loss_fn(logits, *targets)`` -> the per-record losses, for logits of
        shape ``(n_records, n_classes)``.
    batch : tuple of torch.Tensor
        ``(inputs, *targets)``; inputs ``(*records, C, C)``.
    normalize : bool
        Whether each input is first divided by its trace / C.
    blocks : sequence of (str, str, float)
        Each BiMap's weight name, then its spectral layer's kind
        (``"reeig"``, or ``"log_reeig"`` for the last) and floor ε_R.
    values : dict of str to torch.Tensor
        Every parameter by name (the blocks' W on the Stiefel manifold,
        ``"classifier.weight"`` and ``"classifier.bias"``), one model's or K
        clients' stacked along a leading axis, ``(K, *shape)``.
    trained : sequence of str
        The names to return a gradient for, in order.
    record_dims : int, default=1
        How many leading axes index the records (2 for clients in lockstep:
        ``(K, B, C, C)``).
    whitener : torch.Tensor of shape (C, C), optional
        R^{-1/2} of a public reference point R: each input is first mapped to
        R^{-1/2} X R^{-1/2} (:class:`~skfedriem.models.recentring.Recentre`).

    Returns
    -------
    dict of str to torch.Tensor or None
        ``(*records, *shape)`` per name of ``trained``; None when the inputs are
        not ``(*records, C, C)`` or the loss is not one value per record.
    """
    X, targets = batch[0], batch[1:]
    if X.dim() != record_dims + 2 or X.shape[-1] != X.shape[-2]:
        return None
    records = X.shape[:record_dims]
    with torch.no_grad():
        if whitener is not None:
            X = whitener @ X @ whitener
        if normalize:
            X = X * (X.shape[-1] / X.diagonal(dim1=-2, dim2=-1).sum(-1))[..., None, None]
        kept = []
        for name, kind, floor in blocks:
            W = values[name]
            T = _times_weight(X, W, record_dims)
            Y = _per_client(W, record_dims).transpose(-1, -2) @ T
            eigenvalues, U = finite_eigh(Y)
            kept.append((W, T, Y, eigenvalues, U))
            X = (U * _values(kind, eigenvalues, floor).unsqueeze(-2)) @ U.transpose(-1, -2)
        features = X.flatten(start_dim=-2).index_select(-1, upper_triangle(X.shape[-1], X.device))  # Vech
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
            -1, upper_triangle(n, G.device), G).view(*records, n, n)  # Vech's backward
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
    return {name: grads[name] for name in trained}
