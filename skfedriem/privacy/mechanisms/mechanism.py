"""The Gaussian mechanism of one private local step, once, for K clients (a lone client is K = 1).

Per-record ambient gradients are projected onto the tangent space of their
manifold block and clipped as one vector over all blocks; their sum divided
by the batch size B gets Gaussian noise ξ ~ N(0, σ² I) in each block's
*ambient* space, and only then is the result projected: g̃ = P_θ(ḡ + ξ).

Written this way the release is post-processing (by P_θ, with θ public) of an
ambient Gaussian mechanism whose sensitivity is Δ C / B under substitution of
one record (Δ the model's diameter, 2 for gradients that may point anywhere),
for *any* θ the server sends, on the manifold or not: every clipped per-record
vector has ambient norm at most C, whatever P_θ did to it. When θ is on the
manifold, P_θ(ḡ + ξ) = ḡ + P_θ(ξ) (ḡ is tangent), the paper's step.
Projecting the noise alone would not be safe off the manifold: there P_θ can
shrink the noise in a direction where a clipped gradient keeps its full norm.

:func:`private_step` is the step, for the K clients of any
:class:`~skfedriem.privacy.per_record.copies.ClientCopies`; each client's records,
clipping, sum, noise (drawn by :func:`draw_noise`, from its own secret
randomness) and projection are its own, so client k's release is what it
releases alone. :func:`private_gradient` is a lone client's step on its own model.

A record whose gradient norm is not finite (an overflow, a NaN from an extreme
input) contributes zero and the sum is still divided by B: one such record
cannot make a release NaN. A record on which the model's forward itself fails
fails the step (an error, not a release); the estimators refuse non-finite
records before a fit, and SPDNet's eigendecompositions give a non-finite
matrix a NaN output rather than failing (:mod:`skfedriem.models.spectral`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

from ..per_record.capabilities import capabilities_of
from ..per_record.apart import check_records_apart
from ..per_record.copies import PRIVATE_DTYPES, ClientCopies, LoneClient
from ..per_record.gradients import PerRecordGradients, subject_means
from ..per_record.per_sample import LossFn
from .randomness import SecretRandomness, SeededRandomness

__all__ = ["check_count", "clip_factors", "clip_margin", "clipped_gradient_diameter", "clipped_records", "clipped_sums",
           "draw_noise",
           "noisy_clipped_count", "noisy_release", "private_gradient", "private_step", "real_records"]

#: One pass of a step: K clients' records ``(K, W, ...)`` and which are real, ``(K, W)`` (None: all of them).
Pass = tuple[tuple[torch.Tensor, ...], "torch.Tensor | None"]


def clipped_gradient_diameter(module: nn.Module) -> float:
    """The largest ‖clip_C(g_z) − clip_C(g_z')‖ over two records z, z', in units of C: what a step's sensitivity is.

    Replacing one record moves a step's clipped sum by at most this times C,
    hence its mean by ``diameter · C / B``: the model's
    :attr:`~skfedriem.privacy.ModelCapabilities.diameter` (2, the diameter of
    the clip ball, unless it declares a smaller set).

    Parameters
    ----------
    module : torch.nn.Module

    Returns
    -------
    float
        In (0, 2].
    """
    return capabilities_of(module).diameter


def clip_margin(dtypes) -> float:
    """How much below C a scaled record's float64 norm is aimed, so that it stays within C in the blocks' dtypes.

    A record scaled by c = C (1 − m) / ‖g‖ (‖g‖ computed in float64,
    relatively exact to D·2⁻⁵³ for dense rows, to a few ulps of the blocks'
    dtype for a closed form's formula of norms, e.g. PCA's) is rounded twice
    in a block's dtype: c cast to it, then each entry c·g_i, or a closed form's
    product of factors. Each rounding grows the norm by at most a factor 1 + u
    (u its unit roundoff), so m = 16 ε = 32u of the narrowest dtype keeps the
    rounded record within C (measured over random dense, PCA and
    second-moment records: at most 1 − 1.8e-6 in float32 and 1 − 3e-15 in
    float64, where a margin of 4u still let closed forms reach 1 + 4e-16).

    Parameters
    ----------
    dtypes : iterable of torch.dtype
        The blocks' dtypes (float32 or float64).

    Returns
    -------
    float
    """
    return 16 * max((torch.finfo(d).eps for d in dtypes if d.is_floating_point), default=0.0)


def clip_factors(norms: torch.Tensor, clip: float, margin: float = 0.0, dtypes=()) -> torch.Tensor:
    """min(1, C (1 − m) / ‖g_z‖) per record (clip_C(g) = g · min(1, C / ‖g‖)), and 0 where ‖g_z‖ is not finite.

    A factor that would be subnormal (‖g_z‖ > C / the smallest normal, of the
    norms' dtype or of the narrowest of ``dtypes``, the blocks' the factor
    scales) is 0 too: a subnormal keeps only a few significant bits, and
    rounding could scale g_z to nearly 2C.

    Parameters
    ----------
    norms : torch.Tensor of shape (..., B)
        Each record's gradient norm over all blocks.
    clip : float
        C; ``inf`` keeps every finite record whole.
    margin : float, default=0.0
        m (:func:`clip_margin`): a record is scaled to C (1 − m), so that its
        rounding in the blocks' dtype keeps it within C.
    dtypes : iterable of torch.dtype, default=()
        The dtypes of the blocks the factors scale (float64 norms scale
        float32 blocks: a factor normal in float64 may be subnormal there).

    Returns
    -------
    torch.Tensor of shape (..., B)
    """
    finite = torch.isfinite(norms)
    if math.isinf(clip):
        return finite.to(norms.dtype)
    target = clip * (1.0 - margin)
    tiny = torch.finfo(norms.dtype).tiny
    factors = torch.where(norms > target, target / norms.clamp_min(tiny), 1.0)
    # C / ‖g‖ below the smallest normal is subnormal, a few bits wide: rounded up, it could scale g to twice C
    smallest = max([tiny, *(torch.finfo(d).tiny for d in dtypes if d.is_floating_point)])
    return torch.where(finite & (factors >= smallest), factors, 0.0)


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


def draw_noise(randomness: SecretRandomness, points: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One client's N(0, I) of a step, a draw per block in the ambient shape and dtype of ``points``, in their order.

    The only place a step's Gaussian noise is drawn (the adaptive clip's
    count aside): drawn on the CPU from the client's own secret randomness, so
    a seeded client draws the same numbers alone and in a stack, and an
    unseeded one keeps its full OS entropy on any device.

    Parameters
    ----------
    randomness : SecretRandomness
    points : dict of str to torch.Tensor
        One client's iterate of every block (its shapes and dtypes).

    Returns
    -------
    dict of str to torch.Tensor
    """
    return {name: randomness.standard_normal(tuple(point.shape), point.dtype) for name, point in points.items()}


def clipped_sums(copies: ClientCopies, loss_fn: LossFn, passes: list[Pass], clip: float,
                 segments: torch.Tensor | None = None) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """Σ_z clip_C(g_kz) over each client's records, ``(K, *shape)`` per block, and every client's records' norms.

    Parameters
    ----------
    copies : ClientCopies
    loss_fn : callable
    passes : list of (batch, real)
        The step's records, ``(K, W, ...)`` a pass, and which are real
        (padding adds exactly 0 and is not counted).
    clip : float
        C.
    segments : torch.Tensor of int, shape (B,), optional
        A subject-level step (one pass): record j belongs to the step's subject
        ``segments[j]``; each subject's mean gradient is clipped as a record's.

    Returns
    -------
    sums : dict of str to torch.Tensor
    norms : list of torch.Tensor
        Client k's real records' (or subjects') norms, in order.
    """
    totals, kept = None, []
    for batch, real in passes:
        gradients, norms, factors = clipped_records(copies, loss_fn, batch, clip, segments, real)
        totals = _accumulate(totals, gradients.weighted_sum(factors), real)
        kept.append(real_records(norms, real))
    return totals, [torch.cat(own) for own in zip(*kept)]


def clipped_records(copies: ClientCopies, loss_fn: LossFn, batch: tuple[torch.Tensor, ...], clip: float,
                    segments: torch.Tensor | None = None, real: torch.Tensor | None = None,
                    ) -> tuple[PerRecordGradients, torch.Tensor, torch.Tensor]:
    """A pass's records (or subjects) as both placements of the noise clip them: gradients, norms, clip factors.

    The one routine every release starts from: each record's tangent
    gradient at its client's θ (lone or stacked clients), each sampled
    subject's mean instead under subject-level privacy, and the factor
    min(1, C (1 − m) / ‖g‖) that scales it within C in its blocks' dtype.
    Local noise sums the scaled records (:func:`clipped_sums`); distributed
    noise rounds each of them (:func:`~skfedriem.privacy.mechanisms.distributed.distributed_release`).

    Parameters
    ----------
    copies : ClientCopies
    loss_fn : callable
    batch : tuple of torch.Tensor
        ``(K, W, ...)`` records.
    clip : float
        C.
    segments : torch.Tensor of int, shape (W,), optional
        Each record's subject among the step's (subject level).
    real : torch.Tensor of bool, shape (K, W), optional
        Which records are real: padding gets factor 0 (it adds exactly 0).

    Returns
    -------
    gradients : PerRecordGradients
    norms : torch.Tensor of shape (K, W')
    factors : torch.Tensor of shape (K, W')
    """
    dtypes = [block.dtype for block in copies.blocks.values()]
    floor = math.sqrt(max((torch.finfo(d).tiny for d in dtypes if d.is_floating_point), default=0.0))
    if not clip >= floor:  # below it a clip factor is subnormal in the blocks' dtype: a record could exceed C
        raise ValueError(f"The clip must be at least {floor:.3g} (the square root of the smallest normal number "
                         f"of the model's dtype), so that every clipped record stays within it. Got clip={clip!r}.")
    gradients = copies.per_record_gradients(loss_fn, batch)
    if segments is not None and batch[0].shape[1] > 0:
        segments = segments.to(batch[0].device)  # where the records' gradients are (a GPU's, say)
        gradients = subject_means(gradients, segments, int(segments.max()) + 1)
    norms = gradients.norms()
    factors = clip_factors(norms, clip, clip_margin(dtypes), dtypes)
    if real is not None:  # a padded record adds exactly 0 (weighted_sum drops it)
        factors = torch.where(real, factors, 0.0)
    return gradients, norms, factors


def real_records(norms: torch.Tensor, real: torch.Tensor | None) -> list[torch.Tensor]:
    """Each client's norms of its real records in a pass (padding left out), in order.

    Parameters
    ----------
    norms : torch.Tensor of shape (K, W)
        A pass's per-record norms.
    real : torch.Tensor of bool, shape (K, W), or None
        Which records are real (None: all of them).

    Returns
    -------
    list of torch.Tensor
        Client k's real records' norms.
    """
    return list(norms) if real is None else [own[mask] for own, mask in zip(norms, real)]


def _accumulate(totals: dict[str, torch.Tensor] | None, sums: dict[str, torch.Tensor],
                real: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """Each client's running sums plus this pass's, where the pass holds any of its records (else its bits as they
    were: whether another client needed this pass never touches them)."""
    if totals is None:
        return sums
    present = real.any(dim=1)
    return {name: torch.where(present.view(-1, *[1] * (total.dim() - 1)), total + sums[name], total)
            for name, total in totals.items()}


def noisy_release(copies: ClientCopies, sums: dict[str, torch.Tensor], *, denominator: float, noise_std: float,
                  randomness: list[SecretRandomness]) -> dict[str, torch.Tensor]:
    """P_θk(Σ_z clip_C(g_kz) / B + ξ_k) per client and block, ξ_k ~ N(0, σ² I) in the block's ambient space.

    The noise is added before the projection, so the release is
    post-processing of an ambient Gaussian mechanism for any θ (module
    docstring). Euclidean blocks are not projected.

    Parameters
    ----------
    copies : ClientCopies
    sums : dict of str to torch.Tensor
        Σ_z clip_C(g_kz), ``(K, *shape)`` per block.
    denominator : float
        B.
    noise_std : float
        σ (0: no noise).
    randomness : list of SecretRandomness
        Client k's secret source of noise.

    Returns
    -------
    dict of str to torch.Tensor
        Every client's released tangent gradient g̃_k, ``(K, *shape)`` per block.
    """
    points = copies.points()
    released = {name: total / denominator for name, total in sums.items()}
    if noise_std > 0:
        drawn = [draw_noise(source, {name: point[k] for name, point in points.items()})
                 for k, source in enumerate(randomness)]
        released = {name: mean + noise_std * _stacked([d[name] for d in drawn]).to(mean.device)
                    for name, mean in released.items()}
    return {name: copies.manifolds[name].proju(points[name], g) for name, g in released.items()}


def _stacked(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The clients' tensors along a new client axis (one client's viewed, not copied)."""
    return tensors[0].unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)


def private_step(copies: ClientCopies, loss_fn: LossFn, passes: list[Pass], *, clip: float, noise_std: float,
                 denominator: float, randomness: list[SecretRandomness], count_noise_std: float = 0.0,
                 counts: list[list[float]] | None = None,
                 segments: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Every client's g̃_k = P_θk((1/B) Σ_z clip_C(g_kz) + ξ_k): the private step, for K clients at once.

    Parameters
    ----------
    copies : ClientCopies
        The K clients' models at their iterates.
    loss_fn : callable
        ``loss_fn(output, *targets)`` -> one loss per record, reading that
        record alone (:func:`~skfedriem.privacy.per_record.apart.check_records_apart`).
    passes : list of (batch, real)
        Client k's records of this step (usually one pass; clients that sample
        by Poisson in a stack, several of a public width, padded).
    clip, noise_std, denominator : float
        C (``inf``: no clipping), σ (0: no noise) and B (the expected batch
        under Poisson sampling).
    randomness : list of SecretRandomness
        Client k's secret source of noise.
    count_noise_std : float, default=0.0
        σ_b of the counts released into ``counts``.
    counts : list of list of float, optional
        Adaptive clipping: client k's :func:`noisy_clipped_count` of the step
        is appended to ``counts[k]``, drawn after its gradient's noise.
    segments : torch.Tensor of int, optional
        A subject-level step (:mod:`skfedriem.privacy.mechanisms.units`): each subject's
        z is the mean of its records' gradients, clipped, summed, counted and
        noised as a record's gradient is, and B counts subjects.

    Returns
    -------
    dict of str to torch.Tensor
        ``(K, *shape)`` per trainable block.

    Notes
    -----
    Without clipping and noise (``clip=inf``, ``noise_std=0``) per-record
    gradients are not needed: the projected gradient of the summed loss is
    the same quantity and costs one ordinary backward pass.
    """
    check_record_dtypes(passes[0][0])
    with full_precision():
        check_records_apart(copies, loss_fn, passes[0][0])
        if counts is not None:
            check_count(count_noise_std, clip)
        if math.isinf(clip) and noise_std == 0 and counts is None:
            return _summed_release(copies, loss_fn, passes, denominator, segments)
        sums, norms = clipped_sums(copies, loss_fn, passes, clip, segments)
        released = noisy_release(copies, sums, denominator=denominator, noise_std=noise_std, randomness=randomness)
        if counts is not None:
            for k, source in enumerate(randomness):
                counts[k].append(noisy_clipped_count(norms[k], clip, count_noise_std, source))
        return released


def check_record_dtypes(batch: tuple[torch.Tensor, ...]) -> None:
    """ValueError for records in half precision (their gradients would be formed, and clipped, in it)."""
    for x in batch:
        if x.is_floating_point() and x.dtype not in PRIVATE_DTYPES:
            raise ValueError(f"The step's records are {x.dtype}; private steps compute in torch.float32 or "
                             "torch.float64 (half precision rounds a clipped record past C). Convert them.")


@contextlib.contextmanager
def full_precision() -> Iterator[None]:
    """No autocast, and float32 matrix products in full precision, while a step runs, whatever the caller set.

    Under ``torch.autocast`` the clipped sum would be formed in bfloat16, whose
    rounding is a function of the other records (a release moved by 2.3 times
    its sensitivity was measured); TF32 products would do the same on a GPU.
    """
    precision = torch.get_float32_matmul_precision()
    devices = [device for device in ("cpu", "cuda") if torch.is_autocast_enabled(device)]
    with contextlib.ExitStack() as stack:
        for device in devices:
            stack.enter_context(torch.autocast(device, enabled=False))
        if precision != "highest":
            torch.set_float32_matmul_precision("highest")
            stack.callback(torch.set_float32_matmul_precision, precision)
        yield


def _summed_release(copies: ClientCopies, loss_fn: LossFn, passes: list[Pass], denominator: float,
                    segments: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """Without clipping or noise: P_θk of the gradient of each client's summed loss / B (subjects' mean losses)."""
    totals = None
    for batch, real in passes:
        weights = None if real is None else real.to(batch[0].dtype if batch[0].is_floating_point() else torch.float64)
        if segments is not None and batch[0].shape[1] > 0:
            sizes = torch.bincount(segments)
            weights = (1.0 / sizes[segments].double()).unsqueeze(0)
        totals = _accumulate(totals, copies.summed_gradients(loss_fn, batch, weights, denominator), real)
    points = copies.points()
    return {name: copies.manifolds[name].proju(points[name], g) for name, g in totals.items()}


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
    """The privatised tangent gradient g̃ = P_θ((1/B) Σ_z clip_C(g_z) + ξ) of one batch of a lone client.

    :func:`private_step` for one client on its own model.

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
        A subject-level step: record j belongs to the step's subject ``segments[j]``.

    Returns
    -------
    grads : dict of str to torch.Tensor
        One tangent vector per trainable parameter.
    """
    if randomness is None:
        randomness = SeededRandomness(np.random.SeedSequence())
    released = private_step(LoneClient(module), loss_fn, [(tuple(x.unsqueeze(0) for x in batch), None)], clip=clip,
                            noise_std=noise_std, denominator=denominator, randomness=[randomness],
                            count_noise_std=count_noise_std, counts=None if counts is None else [counts],
                            segments=segments)
    return {name: g[0] for name, g in released.items()}
