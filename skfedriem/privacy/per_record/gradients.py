"""Every record's tangent gradient of a batch, as the private step needs it: norms and weighted sums.

The step needs only each record's norm over all blocks and weighted sums over
records (:class:`PerRecordGradients`). A lone client's gradients come from the
first route that applies to its model (:func:`per_record_gradients`): the
model's closed form (:attr:`~skfedriem.privacy.ModelCapabilities.tangent_gradients`),
per-layer rules after one backward pass (:mod:`skfedriem.privacy.per_record.layerwise`),
or ``torch.func`` for any module. Every container here may carry a leading
client axis (K clients in lockstep, :mod:`skfedriem.federated.lockstep`), and
:func:`with_client_axis` gives a lone client's gradients one of size 1, so the
step reads both alike.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import torch
from torch import nn

from ...manifolds import manifold_of
from .capabilities import capabilities_of
from .layerwise import layerwise_per_sample_gradients
from .per_sample import LossFn, per_sample_gradients, trainable_parameters

__all__ = ["DenseGradients", "PerRecordGradients", "StackedDenseGradients", "dense_rows", "first_route",
           "per_record_gradients",
           "project_per_sample", "record_norms", "subject_means", "with_client_axis"]


def record_norms(rows: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """The Euclidean norm of every row, in float64 at least, without underflow or overflow of its squares.

    Rows are normed in the widest of their dtypes and float64: float32 and
    narrower entries then square without underflow or overflow, and the norm's
    rounding (relative, about D·2⁻⁵³ for D entries) stays far below what the
    clip factor's margin covers (:func:`~skfedriem.privacy.mechanisms.mechanism.clip_factors`).
    In float64 a row's plain norm is kept only where it is finite and large
    enough that squares lost to underflow cannot move it by more than rounding
    (‖g‖² ≥ 4 D · tiny / ε); every other row is computed again with its entries
    divided by its largest first, which gives its true norm (a row with an inf
    or NaN entry still gets a non-finite norm).

    Parameters
    ----------
    rows : torch.Tensor of shape (..., B, D), or a sequence of them
        Any leading axes (e.g. clients in lockstep) are kept. A sequence is
        the blocks of each row, ``(..., B, D_b)``, as if concatenated along the
        last axis (per-record gradients of several parameters), without the copy.

    Returns
    -------
    torch.Tensor of shape (..., B)
    """
    blocks = [rows] if torch.is_tensor(rows) else list(rows)
    dtype = functools.reduce(torch.promote_types, (block.dtype for block in blocks), torch.float64)
    squares = None
    for block in blocks:
        square = torch.linalg.vector_norm(block, dim=-1, dtype=dtype).square()
        squares = square if squares is None else squares + square
    norms = squares.sqrt()
    info = torch.finfo(norms.dtype)
    width = sum(block.shape[-1] for block in blocks)
    trusted = torch.isfinite(norms) & (norms >= math.sqrt(4 * width * info.tiny / info.eps))
    if not bool(trusted.all()):
        redo = ~trusted
        norms[redo] = _scaled_norms(torch.cat([block[redo].to(dtype) for block in blocks], -1))
    return norms


def _scaled_norms(rows: torch.Tensor) -> torch.Tensor:
    """‖row‖ computed on the row divided by its largest entry (no square underflows or overflows)."""
    scale = rows.abs().amax(dim=-1)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.linalg.vector_norm(rows / safe.unsqueeze(-1), dim=-1) * scale


def _rows(g: torch.Tensor, axes: int) -> torch.Tensor:
    """``g`` with its first ``axes`` axes (clients, records) kept and the rest flattened (a 0-d block's into one
    entry; an empty batch's into its block's size)."""
    return g.reshape(*g.shape[:axes], math.prod(g.shape[axes:]))


class PerRecordGradients(ABC):
    """The per-record tangent gradients of a batch, as the private step needs them.

    The step only needs each record's norm over all blocks and weighted sums
    over records. :class:`DenseGradients` stores them as tensors; a model with
    structured gradients (e.g. rank-2 PCA gradients) computes both without
    materialising B full matrices. Records of K clients carry a leading client
    axis: norms ``(K, B)``, weights ``(K, B)``, sums ``(K, *shape)``.
    """

    @abstractmethod
    def norms(self) -> torch.Tensor:
        """‖g_z‖ over all blocks together, shape ``(..., B)``."""

    @abstractmethod
    def weighted_sum(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """Σ_z w_z g_z for every block; a record of weight 0 adds exactly 0, even if its g_z is not finite."""

    def scaled(self, factors: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every record's f_z g_z, ``(..., B, *shape)`` per block, in the block's dtype: 0 where f_z is 0.

        What distributed noise rounds record by record. Here from B weighted
        sums of one record each (any structured gradient has them); a
        structured gradient with a cheaper formula overrides it.
        """
        shape = factors.shape
        rows = []
        for j in range(shape[-1]):
            weights = torch.zeros_like(factors)
            weights[..., j] = factors[..., j]
            rows.append(self.weighted_sum(weights))
        return {name: torch.stack([row[name] for row in rows], dim=len(shape) - 1) for name in rows[0]}


class DenseGradients(PerRecordGradients):
    """Per-record tangent gradients of one client, stored densely.

    Parameters
    ----------
    grads : dict of str to torch.Tensor
        ``grads[name]`` has shape ``(B, *shape)``, the B records' gradients of that block.
    """

    def __init__(self, grads: dict[str, torch.Tensor]) -> None:
        self.grads = grads

    def norms(self) -> torch.Tensor:
        return record_norms([_rows(g, 1) for g in self.grads.values()])

    def weighted_sum(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        grads = self.grads
        kept = weights != 0
        if not bool(kept.all()):
            weights = weights[kept]
            grads = {name: g[kept] for name, g in grads.items()}
        return {name: (_weights_in(weights, g.dtype) @ _rows(g, 1)).view(g.shape[1:])
                for name, g in grads.items()}

    def scaled(self, factors: torch.Tensor) -> dict[str, torch.Tensor]:
        return _scaled_dense(self.grads, factors)


class StackedDenseGradients(PerRecordGradients):
    """Per-record tangent gradients of K clients, ``(K, B, *shape)`` per block; each client reduced on its own.

    Parameters
    ----------
    grads : dict of str to torch.Tensor
        ``grads[name]`` has shape ``(K, B, *shape)``.
    """

    def __init__(self, grads: dict[str, torch.Tensor]) -> None:
        self.grads = grads

    def norms(self) -> torch.Tensor:
        """‖g_z‖ over all blocks, shape (K, B)."""
        return record_norms([_rows(g, 2) for g in self.grads.values()])

    def weighted_sum(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """Σ_z w_kz g_kz per client, shape ``(K, *shape)``: client k's sum is the lone client's sum of its records."""
        sums = [DenseGradients({name: g[k] for name, g in self.grads.items()}).weighted_sum(weights[k])
                for k in range(weights.shape[0])]
        if len(sums) == 1:  # a lone client: its sum, viewed with a client axis (no copy)
            return {name: total.unsqueeze(0) for name, total in sums[0].items()}
        return {name: torch.stack([s[name] for s in sums]) for name in self.grads}

    def scaled(self, factors: torch.Tensor) -> dict[str, torch.Tensor]:
        return _scaled_dense(self.grads, factors)


class _OneClient(PerRecordGradients):
    """A lone client's gradients seen with a client axis of size 1."""

    def __init__(self, gradients: PerRecordGradients) -> None:
        self.gradients = gradients

    def norms(self) -> torch.Tensor:
        return self.gradients.norms().unsqueeze(0)

    def weighted_sum(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        return {name: total.unsqueeze(0) for name, total in self.gradients.weighted_sum(weights[0]).items()}

    def scaled(self, factors: torch.Tensor) -> dict[str, torch.Tensor]:
        return {name: rows.unsqueeze(0) for name, rows in self.gradients.scaled(factors[0]).items()}


def _scaled_dense(grads: dict[str, torch.Tensor], factors: torch.Tensor) -> dict[str, torch.Tensor]:
    """f_z g_z of dense rows ``(..., B, *shape)``: f cast to each block's dtype (a subnormal cast 0), a factor of 0
    an exact row of zeros even where g_z is not finite."""
    out = {}
    for name, g in grads.items():
        f = _weights_in(factors, g.dtype).view(*factors.shape, *[1] * (g.dim() - factors.dim()))
        out[name] = torch.where(f != 0, g * f, torch.zeros((), dtype=g.dtype, device=g.device))
    return out


def dense_rows(gradients: PerRecordGradients) -> dict[str, torch.Tensor] | None:
    """Every record's gradient of every block, ``(K, B, *shape)``, when ``gradients`` are stored densely; else None.

    Parameters
    ----------
    gradients : PerRecordGradients
        With a client axis.

    Returns
    -------
    dict of str to torch.Tensor or None
    """
    if isinstance(gradients, StackedDenseGradients):
        return gradients.grads
    if isinstance(gradients, _OneClient) and isinstance(gradients.gradients, DenseGradients):
        return {name: g.unsqueeze(0) for name, g in gradients.gradients.grads.items()}
    return None


def with_client_axis(gradients: PerRecordGradients) -> PerRecordGradients:
    """A lone client's gradients (norms (B,)) as one client of a stack (norms (1, B)), without a copy.

    Parameters
    ----------
    gradients : PerRecordGradients

    Returns
    -------
    PerRecordGradients
    """
    return _OneClient(gradients)


def _weights_in(weights: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``weights`` in a block's dtype, a weight that would be subnormal there 0 (a clip factor from float64 norms,
    cast to a narrower block's, must not become a few-bit subnormal: see :func:`~skfedriem.privacy.mechanisms.mechanism.clip_factors`)."""
    cast = weights.to(dtype)
    return torch.where(cast.abs() < torch.finfo(dtype).tiny, 0.0, cast) if dtype.is_floating_point else cast


def subject_means(grads: PerRecordGradients, segments: torch.Tensor, n_subjects: int) -> PerRecordGradients:
    """Each sampled subject's gradient: the mean of its records' tangent gradients in the step.

    A record whose gradient is not finite makes its subject's mean not finite:
    the step then clips that subject to zero, as it does such a record.

    Parameters
    ----------
    grads : PerRecordGradients
        The step's records' gradients, with a client axis (K, B) or without (B).
    segments : torch.Tensor of int, shape (B,)
        The position of each record's subject among the step's subjects
        (the same for every client of a stack).
    n_subjects : int
        The step's number of subjects (at least 1).

    Returns
    -------
    PerRecordGradients
        ``n_subjects`` rows (per client).
    """
    if isinstance(grads, _OneClient):
        return _OneClient(subject_means(grads.gradients, segments, n_subjects))
    counts = torch.bincount(segments, minlength=n_subjects)
    if isinstance(grads, DenseGradients):
        return DenseGradients(_dense_means(grads.grads, segments, counts, 0))
    if isinstance(grads, StackedDenseGradients):
        return StackedDenseGradients(_dense_means(grads.grads, segments, counts, 1))
    # a structured gradient (e.g. a closed form that never holds B matrices) gives each subject's mean as a weighting
    shape = grads.norms().shape
    rows = [grads.weighted_sum(((segments == s).double() / float(counts[s])).expand(shape)) for s in range(n_subjects)]
    axis = len(shape) - 1
    means = {name: torch.stack([row[name] for row in rows], axis) for name in rows[0]}
    return StackedDenseGradients(means) if axis else DenseGradients(means)


def _dense_means(grads: dict[str, torch.Tensor], segments: torch.Tensor, counts: torch.Tensor,
                 axis: int) -> dict[str, torch.Tensor]:
    """Each subject's mean of its records' rows along the record ``axis`` of every block."""
    out = {}
    for name, g in grads.items():
        shape = (*g.shape[:axis], counts.numel(), *g.shape[axis + 1:])
        total = g.new_zeros(shape).index_add_(axis, segments.to(g.device), g)
        out[name] = total / counts.to(g.device, g.dtype).view(-1, *([1] * (g.dim() - axis - 1)))
    return out


def project_per_sample(
    grads: dict[str, torch.Tensor], params: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """g_z = P_θ ∇f(θ; z) for every record z (Euclidean blocks unchanged).

    Parameters
    ----------
    grads : dict of str to torch.Tensor
        Per-record ambient gradients, ``(B, *shape)`` per block.
    params : dict of str to torch.Tensor
        The parameters θ, by the same names.

    Returns
    -------
    dict of str to torch.Tensor
        The tangent gradients, same shapes.
    """
    return {name: manifold_of(params[name]).proju(params[name].detach(), g) for name, g in grads.items()}


def per_record_gradients(module: nn.Module, loss_fn: LossFn, batch: tuple[torch.Tensor, ...]) -> PerRecordGradients:
    """Every record's tangent gradient P_θ ∇f(θ; z) of a lone client's batch, by the first route that applies.

    In order: the module's closed form (its
    :attr:`~skfedriem.privacy.ModelCapabilities.tangent_gradients`, where it
    returns gradients); per-layer rules after one backward pass
    (:func:`~skfedriem.privacy.layerwise_per_sample_gradients`);
    ``torch.func.vmap`` for any other module.

    Parameters
    ----------
    module : torch.nn.Module
    loss_fn : callable
        ``loss_fn(module(batch[0]), *batch[1:])`` -> per-record losses (B,).
    batch : tuple of torch.Tensor
        The records, along dim 0.

    Returns
    -------
    PerRecordGradients
        Norms of shape (B,).
    """
    closed_form = capabilities_of(module).tangent_gradients
    records = batch[0].shape[0] > 0
    return first_route(
        None if closed_form is None or not records else
        lambda: closed_form(module, loss_fn, batch, record_dims=1, parameters=None),
        (lambda: layerwise_per_sample_gradients(module, loss_fn, batch)) if records else None,
        lambda: per_sample_gradients(module, loss_fn, batch),
        lambda ambient: DenseGradients(project_per_sample(ambient, trainable_parameters(module))))


def first_route(closed_form: Callable[[], PerRecordGradients | None] | None,
                layer_rules: Callable[[], dict[str, torch.Tensor] | None] | None,
                generic: Callable[[], dict[str, torch.Tensor]],
                tangent: Callable[[dict[str, torch.Tensor]], PerRecordGradients]) -> PerRecordGradients:
    """Every record's tangent gradient by the first route that applies: the one order, for lone and stacked clients.

    The model's closed form (None where it does not apply), then per-layer
    rules after one backward pass (None where a layer has none), then
    ``torch.func`` for any module; the ambient gradients of the last two made
    tangent by ``tangent``.

    Parameters
    ----------
    closed_form : callable or None
        ``() -> PerRecordGradients or None``.
    layer_rules : callable or None
        ``() -> ambient gradients or None``.
    generic : callable
        ``() -> ambient gradients``.
    tangent : callable
        Ambient gradients to the route's :class:`PerRecordGradients`.

    Returns
    -------
    PerRecordGradients
    """
    if closed_form is not None:
        found = closed_form()
        if found is not None:
            return found
    ambient = layer_rules() if layer_rules is not None else None
    return tangent(generic() if ambient is None else ambient)
