"""The Gaussian mechanism of one private local step.

Per-sample ambient gradients are projected onto the tangent space of their
manifold block and clipped as one vector over all blocks; their sum divided
by the batch size B gets Gaussian noise ξ ~ N(0, σ² I) in each block's
*ambient* space, and only then is the result projected: g̃ = P_θ(ḡ + ξ).

Written this way the release is post-processing (by P_θ, with θ public) of an
ambient Gaussian mechanism whose sensitivity is 2C / B under substitution of
one record, for *any* θ the server sends, on the manifold or not: every
clipped per-record vector has ambient norm at most C, whatever P_θ did to it.
When θ is on the manifold, P_θ(ḡ + ξ) = ḡ + P_θ(ξ) (ḡ is tangent), the
paper's step. Projecting the noise alone would not be safe off the manifold:
there P_θ can shrink the noise in a direction where a clipped gradient keeps
its full norm.

A record whose gradient norm is not finite (an overflow, a NaN from an
extreme input) contributes zero and the sum is still divided by B, so one
record cannot make a release NaN.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from ..manifolds import manifold_of
from .layerwise import layerwise_per_sample_gradients
from .per_sample import LossFn, per_sample_gradients, trainable_parameters
from .randomness import SecretRandomness, SeededRandomness

__all__ = [
    "DenseGradients",
    "check_count",
    "noisy_clipped_count",
    "PerRecordGradients",
    "clip_factors",
    "clipped_gradient_diameter",
    "record_norms",
    "subject_means",
    "noisy_mean",
    "per_record_gradients",
    "private_gradient",
    "project_per_sample",
]


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


def record_norms(rows: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """The Euclidean norm of every row, without underflow or overflow of its squares.

    ``torch.linalg.vector_norm`` squares the entries as they are: a gradient
    whose entries are all below √(smallest normal) (1e-19 in float32) comes
    out with norm 0 and would escape clipping, and one above √(largest)
    with norm inf. So a row's plain norm is kept only where it is finite and
    large enough that squares lost to underflow (each below the smallest
    normal) cannot move it by more than rounding (‖g‖² ≥ 4 D · tiny / ε for D
    entries); every other row is computed again with its entries divided by
    its largest first, which gives its true norm (a row with an inf or NaN
    entry still gets a non-finite norm). The usual row costs one pass over
    memory.

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
    # blocks of several dtypes are squared in the widest (exact casts): a narrower block's squares would underflow
    # below the threshold the widest dtype's rows are checked against
    dtype = functools.reduce(torch.promote_types, (block.dtype for block in blocks))
    blocks = [block.to(dtype) for block in blocks]
    squares = None
    for block in blocks:
        square = torch.linalg.vector_norm(block, dim=-1).square()
        squares = square if squares is None else squares + square
    norms = squares.sqrt()
    info = torch.finfo(norms.dtype)
    width = sum(block.shape[-1] for block in blocks)
    trusted = torch.isfinite(norms) & (norms >= math.sqrt(4 * width * info.tiny / info.eps))
    if not bool(trusted.all()):
        redo = ~trusted
        norms[redo] = _scaled_norms(torch.cat([block[redo] for block in blocks], -1))
    return norms


def _scaled_norms(rows: torch.Tensor) -> torch.Tensor:
    """‖row‖ computed on the row divided by its largest entry (no square underflows or overflows)."""
    scale = rows.abs().amax(dim=-1)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.linalg.vector_norm(rows / safe.unsqueeze(-1), dim=-1) * scale


class PerRecordGradients(ABC):
    """The per-record tangent gradients of a batch, as the mechanism needs them.

    The mechanism only needs each record's norm over all blocks and weighted
    sums over records. :class:`DenseGradients` stores them as tensors; a model
    with structured gradients (e.g. rank-2 PCA gradients) can compute both
    without materialising B full matrices.
    """

    @abstractmethod
    def norms(self) -> torch.Tensor:
        """‖g_z‖ over all blocks together, shape (B,)."""

    @abstractmethod
    def weighted_sum(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """Σ_z w_z g_z for every block; a record of weight 0 adds exactly 0, even if its g_z is not finite."""


class DenseGradients(PerRecordGradients):
    """Per-record tangent gradients stored densely.

    Parameters
    ----------
    grads : dict of str to torch.Tensor
        ``grads[name]`` has shape ``(B, *shape)``, the B records' gradients of that block.
    """

    def __init__(self, grads: dict[str, torch.Tensor]) -> None:
        self.grads = grads

    def norms(self) -> torch.Tensor:
        return record_norms([g.flatten(start_dim=1) for g in self.grads.values()])

    def weighted_sum(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        grads = self.grads
        kept = weights != 0
        if not bool(kept.all()):
            weights = weights[kept]
            grads = {name: g[kept] for name, g in grads.items()}
        return {name: (_weights_in(weights, g.dtype) @ g.flatten(start_dim=1)).view(g.shape[1:])
                for name, g in grads.items()}


def _weights_in(weights: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``weights`` in a block's dtype, a weight that would be subnormal there 0 (a clip factor from norms of a wider
    dtype, cast to a narrower block's, must not become a few-bit subnormal: see :func:`clip_factors`)."""
    cast = weights.to(dtype)
    return torch.where(cast.abs() < torch.finfo(dtype).tiny, 0.0, cast) if dtype.is_floating_point else cast


def subject_means(grads: PerRecordGradients, segments: torch.Tensor, n_subjects: int) -> DenseGradients:
    """Each sampled subject's gradient: the mean of its records' tangent gradients in the step.

    A record whose gradient is not finite makes its subject's mean not finite:
    the mechanism then clips that subject to zero, as it does such a record.

    Parameters
    ----------
    grads : PerRecordGradients
        The step's records' gradients.
    segments : torch.Tensor of int, shape (n_records,)
        The position of each record's subject among the step's subjects.
    n_subjects : int
        The step's number of subjects (at least 1).

    Returns
    -------
    DenseGradients
        ``n_subjects`` rows.
    """
    counts = torch.bincount(segments, minlength=n_subjects)
    if isinstance(grads, DenseGradients):
        out = {}
        for name, g in grads.grads.items():
            total = g.new_zeros((n_subjects, *g.shape[1:])).index_add_(0, segments.to(g.device), g)
            out[name] = total / counts.to(g.device, g.dtype).view(-1, *([1] * (g.dim() - 1)))
        return DenseGradients(out)
    # a structured gradient (e.g. a closed form that never holds B matrices) gives each subject's mean as a weighting
    rows = [grads.weighted_sum((segments == s).double() / float(counts[s])) for s in range(n_subjects)]
    return DenseGradients({name: torch.stack([row[name] for row in rows]) for name in rows[0]})


def clipped_gradient_diameter(module: nn.Module) -> float:
    """The largest ‖clip_C(g_z) − clip_C(g_z')‖ over two records z, z', in units of C: what a step's sensitivity is.

    Replacing one record moves a step's clipped sum by at most this times C,
    hence its mean by ``diameter · C / B``. For gradients that may point
    anywhere it is 2, the diameter of the clip ball. A model whose clipped
    per-record gradients are confined to a smaller set says so with a class
    attribute ``clipped_gradient_diameter`` (e.g. the rank-one second moments
    of :class:`~skfedriem.models.SecondMoment`, √2); the mechanism's noise is
    calibrated, and every ledger charged, from this value.

    Parameters
    ----------
    module : torch.nn.Module

    Returns
    -------
    float
        In (0, 2].
    """
    diameter = float(getattr(module, "clipped_gradient_diameter", 2.0))
    if not 0 < diameter <= 2:
        raise ValueError(f"{type(module).__name__}.clipped_gradient_diameter must be in (0, 2]: two clipped "
                         f"gradients are at most 2C apart. Got {diameter!r}.")
    return diameter


def clip_factors(norms: torch.Tensor, clip: float) -> torch.Tensor:
    """min(1, C / ‖g_z‖) per record (clip_C(g) = g · min(1, C / ‖g‖)), and 0 where ‖g_z‖ is not finite.

    A factor that would be subnormal (‖g_z‖ > C / the smallest normal) is 0 too:
    a subnormal keeps only a few significant bits, and rounding could scale
    g_z to nearly 2C.

    Parameters
    ----------
    norms : torch.Tensor of shape (B,)
        Each record's gradient norm over all blocks.
    clip : float
        C; ``inf`` keeps every finite record whole.

    Returns
    -------
    torch.Tensor of shape (B,)
    """
    finite = torch.isfinite(norms)
    if math.isinf(clip):
        return finite.to(norms.dtype)
    tiny = torch.finfo(norms.dtype).tiny
    factors = torch.where(norms > clip, clip / norms.clamp_min(tiny), 1.0)
    # C / ‖g‖ below the smallest normal is subnormal, a few bits wide: rounded up, it could scale g to twice C
    return torch.where(finite & (factors >= tiny), factors, 0.0)


def check_count(count_noise_std: float, clip: float) -> None:
    """ValueError unless a count of the clipped records can be released: σ_b > 0 and a finite clip.

    Parameters
    ----------
    count_noise_std : float
        σ_b.
    clip : float
        C.
    """
    if not (count_noise_std > 0 and math.isfinite(clip)):
        raise ValueError("A count of the clipped records needs count_noise_std > 0 and a finite clip. "
                         f"Got count_noise_std={count_noise_std!r}, clip={clip!r}.")


def noisy_clipped_count(norms: torch.Tensor, clip: float, count_noise_std: float,
                        randomness: SecretRandomness) -> float:
    """Σ_z (1[‖g_z‖ ≤ C] − ½) + N(0, σ_b²): the noisy, centred count of a batch's unclipped records.

    What adaptive clipping (Andrew et al., 2021) releases at each step. A
    record whose norm is not finite counts as clipped. Centring by ½ makes one
    record's contribution ±½, so replacing a record moves the count by at most
    1 (:attr:`~skfedriem.privacy.StepPlan.mu0` charges μ = 1/σ_b for it).

    Parameters
    ----------
    norms : torch.Tensor of shape (B,)
        Each record's gradient norm over all blocks.
    clip : float
        C (finite).
    count_noise_std : float
        σ_b > 0.
    randomness : SecretRandomness
        The client's secret source of noise.

    Returns
    -------
    float
    """
    below = (torch.isfinite(norms) & (norms <= clip)).double()
    noise = float(randomness.standard_normal((1,), torch.float64)[0])
    return float((below - 0.5).sum()) + count_noise_std * noise


def noisy_mean(
    sums: dict[str, torch.Tensor],
    params: dict[str, torch.Tensor],
    *,
    denominator: float,
    noise_std: float,
    randomness: SecretRandomness | None,
) -> dict[str, torch.Tensor]:
    """P_θ(Σ_z clip_C(g_z) / B + ξ) per block, ξ ~ N(0, σ² I) in the block's ambient space.

    The noise is added before the projection, so the release is post-processing
    of an ambient Gaussian mechanism for any θ (see the module docstring).
    Euclidean blocks are not projected.

    Parameters
    ----------
    sums : dict of str to torch.Tensor
        Σ_z clip_C(g_z) per block.
    params : dict of str to torch.Tensor
        θ, by the same names.
    denominator : float
        B.
    noise_std : float
        σ (0: no noise).
    randomness : SecretRandomness or None
        The client's secret source of noise (needed when ``noise_std > 0``).

    Returns
    -------
    dict of str to torch.Tensor
        The released tangent gradient g̃ of each block.
    """
    if noise_std > 0 and randomness is None:
        raise ValueError("noise_std > 0 needs the client's secret randomness; got randomness=None.")
    out = {}
    for name, total in sums.items():
        param = params[name].detach()
        released = total / denominator
        if noise_std > 0:
            noise = randomness.standard_normal(tuple(param.shape), param.dtype).to(param.device)
            released = released + noise_std * noise
        out[name] = manifold_of(params[name]).proju(param, released)
    return out


def per_record_gradients(module: nn.Module, loss_fn: LossFn, batch: tuple[torch.Tensor, ...]) -> PerRecordGradients:
    """Every record's tangent gradient P_θ ∇f(θ; z) of a batch, by the route :func:`private_gradient` takes.

    In order of preference: the module's closed form
    ``per_sample_tangent_gradients(*batch)``; its closed form for a loss,
    ``per_record_tangent_gradients(loss_fn, batch)`` (SPDNet), where that
    returns gradients; per-layer rules after one
    backward pass (:func:`~skfedriem.privacy.layerwise_per_sample_gradients`);
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
    """
    closed_form = getattr(module, "per_sample_tangent_gradients", None)
    if callable(closed_form):
        return closed_form(*batch)
    of_loss = getattr(module, "per_record_tangent_gradients", None)
    tangent = of_loss(loss_fn, batch) if callable(of_loss) and batch[0].shape[0] > 0 else None
    if tangent is not None:
        return DenseGradients(tangent)
    ambient = None if batch[0].shape[0] == 0 else layerwise_per_sample_gradients(module, loss_fn, batch)
    if ambient is None:
        ambient = per_sample_gradients(module, loss_fn, batch)
    return DenseGradients(project_per_sample(ambient, trainable_parameters(module)))


def private_gradient(
    module: nn.Module,
    loss_fn: LossFn,
    batch: tuple[torch.Tensor, ...],
    *,
    clip: float,
    noise_std: float,
    denominator: float,
    randomness: SecretRandomness | None = None,
    count_noise_std: float = 0.0,
    counts: list[float] | None = None,
    segments: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The privatised tangent gradient g̃ = P_θ((1/B) Σ_z clip_C(g_z) + ξ) of one batch.

    Parameters
    ----------
    module : torch.nn.Module
        Parameters tagged :class:`~skfedriem.manifolds.ManifoldParameter` are
        treated on their manifold, the others as Euclidean.
    loss_fn : callable
        ``loss_fn(module(batch[0]), *batch[1:])`` -> per-record losses (B,).
    batch : tuple of torch.Tensor
        The sampled records.
    clip : float
        Clip norm C (``inf`` disables clipping).
    noise_std : float
        σ, the std of each ambient noise coordinate (0 disables noise).
    denominator : float
        B: the fixed batch size, or the expected one under Poisson sampling.
    randomness : SecretRandomness, optional
        The client's secret source of noise (never the global RNG). Default:
        fresh OS entropy (:class:`SeededRandomness` of ``SeedSequence()``).
    count_noise_std : float, default=0.0
        σ_b of the count released into ``counts``.
    counts : list of float, optional
        When given, the step also appends :func:`noisy_clipped_count` of its
        batch (drawn after the gradient's noise): adaptive clipping.
    segments : torch.Tensor of int, optional
        A subject-level step (:mod:`skfedriem.privacy.units`): record j
        belongs to the step's subject ``segments[j]`` (0 to S−1). Each subject's
        z is then the mean of its records' gradients, which is clipped, summed,
        counted and noised as a record's gradient is, and B counts subjects.

    Returns
    -------
    grads : dict of str to torch.Tensor
        One tangent vector per trainable parameter.

    Notes
    -----
    Per-record gradients come from :func:`per_record_gradients`: the module's
    ``per_sample_tangent_gradients(*batch) -> PerRecordGradients`` (closed
    form, e.g. the PCA loss); ``per_record_tangent_gradients(loss_fn, batch)``
    (closed form for the given loss, SPDNet); per-layer rules after one backward
    pass (:func:`~skfedriem.privacy.layerwise_per_sample_gradients`, e.g. a
    Linear network); ``torch.func.vmap`` for any other module.

    Without clipping and noise (``clip=inf``, ``noise_std=0``) per-sample
    gradients are not needed: the projected gradient of the summed loss is
    the same quantity and costs one ordinary backward pass.
    """
    params = trainable_parameters(module)
    if math.isinf(clip) and noise_std == 0:
        if batch[0].shape[0] == 0:
            return {name: torch.zeros_like(p) for name, p in params.items()}
        losses = loss_fn(module(batch[0]), *batch[1:])
        if segments is not None:  # each subject's mean loss
            sizes = torch.bincount(segments)
            losses = losses / sizes[segments].to(losses.device, losses.dtype)
        loss = losses.sum() / denominator
        grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
        return {name: manifold_of(params[name]).proju(params[name].detach(), g) for name, g in grads.items()}
    grads = per_record_gradients(module, loss_fn, batch)
    if segments is not None and batch[0].shape[0] > 0:
        segments = segments.to(batch[0].device)  # where the records' gradients are (a GPU's, say)
        grads = subject_means(grads, segments, int(segments.max()) + 1)
    norms = grads.norms()
    sums = grads.weighted_sum(clip_factors(norms, clip))
    if randomness is None and (noise_std > 0 or counts is not None):
        randomness = SeededRandomness(np.random.SeedSequence())
    released = noisy_mean(sums, params, denominator=denominator, noise_std=noise_std, randomness=randomness)
    if counts is not None:
        check_count(count_noise_std, clip)
        counts.append(noisy_clipped_count(norms, clip, count_noise_std, randomness))
    return released
