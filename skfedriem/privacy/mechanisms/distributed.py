"""The private step with distributed noise: every client's clipped records encoded, summed and given its noise share.

:func:`distributed_release` is :func:`~skfedriem.privacy.mechanisms.mechanism.private_step`'s
counterpart for ``noise="distributed"``, for the same K clients: the same
per-record gradients and clip factors (:func:`~skfedriem.privacy.mechanisms.mechanism.clipped_records`),
then each client's clipped records rounded one by one on the round's public
grid and summed, plus the client's Skellam share drawn from its own secret
randomness (:func:`~skfedriem.privacy.mechanisms.discrete.encode_records`). What client
k releases depends only on its own records and randomness, whatever K is.
"""

from __future__ import annotations

import numpy as np
import torch

from ..per_record.apart import check_records_apart
from ..per_record.copies import ClientCopies
from .discrete import DistributedEncoding, encode_clients
from .mechanism import Pass, check_record_dtypes, clipped_records, full_precision, real_records
from ..per_record.per_sample import LossFn
from .randomness import SecretRandomness

__all__ = ["distributed_release"]


def distributed_release(copies: ClientCopies, loss_fn: LossFn, passes: list[Pass], *, clip: float,
                        encoding: DistributedEncoding, randomness: list[SecretRandomness],
                        segments: torch.Tensor | None = None) -> list[np.ndarray]:
    """Every client's encoded release Σ_z round(s · rotate(clip_C(g_kz))) + Sk(λ, λ), modulo 2^bits.

    Parameters
    ----------
    copies : ClientCopies
        The K clients' models at θ_t.
    loss_fn : callable
        One loss per record, reading that record alone.
    passes : list of (batch, real)
        Client k's records of the step, ``(K, W, ...)`` a pass (padding, if
        any, adds exactly 0).
    clip : float
        C (finite).
    encoding : DistributedEncoding
        The round's public grid, modulus, share and rotation.
    randomness : list of SecretRandomness
        Client k's secret randomness (rounding and share).
    segments : torch.Tensor of int, optional
        A subject-level step: record j belongs to the step's subject
        ``segments[j]``; each subject's mean gradient is the clipped unit.

    Returns
    -------
    list of ndarray of int64
        Client k's release, ``(length,)``, in [0, 2^bits); with the
        encoding's count (adaptive clipping), its last coordinate carries
        the client's count of records whose norm is at most C. With excess
        components (a dropout allowance, nothing announced) ``(1 + d,
        length)``: the release, then the components it keeps apart
        (:func:`~skfedriem.privacy.mechanisms.discrete.encode_clients`).
    """
    check_record_dtypes(passes[0][0])
    with full_precision():
        check_records_apart(copies, loss_fn, passes[0][0])
        own, counts = _own_records(copies, loss_fn, passes, clip, segments)
    counted = counts if encoding.count_scale else None
    if len({rows.shape[0] for rows in own}) == 1:  # equal batches: every client's records rotated at once
        return encode_clients(torch.stack(own), encoding, clip, randomness, counted)
    return [encode_clients(rows.unsqueeze(0), encoding, clip, [source], None if counted is None else [counted[k]])[0]
            for k, (rows, source) in enumerate(zip(own, randomness))]


def _own_records(copies: ClientCopies, loss_fn: LossFn, passes: list[Pass], clip: float,
                 segments: torch.Tensor | None) -> tuple[list[torch.Tensor], list[int]]:
    """Each client's clipped real records ``(B_k, d)`` (padding left out: a client rounds, and draws for, its own
    records alone) and its count of them within the clip (a norm that is not finite is not)."""
    kept: list[list[torch.Tensor]] = [[] for _ in range(copies.n_clients)]
    counts = [0] * copies.n_clients
    for batch, real in passes:
        clipped, norms = _clipped_rows(copies, loss_fn, batch, clip, segments)
        for k, own_norms in enumerate(real_records(norms, real)):
            counts[k] += int((torch.isfinite(own_norms) & (own_norms <= clip)).sum())
            kept[k].append(clipped[k] if real is None else clipped[k][real[k].to(clipped.device)])
    return [torch.cat(rows) for rows in kept], counts


def _clipped_rows(copies: ClientCopies, loss_fn: LossFn, batch: tuple[torch.Tensor, ...], clip: float,
                  segments: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """A pass's clipped records (or subjects' means), flattened over the blocks in order: ``(K, W, d)`` float64,
    each of norm at most C (scaled in its blocks' dtype, as the local noise's sums are), and their norms before
    clipping ``(K, W)``."""
    gradients, norms, factors = clipped_records(copies, loss_fn, batch, clip, segments)
    rows = gradients.scaled(factors)
    return torch.cat([rows[name].flatten(2) for name in copies.blocks], dim=2).double(), norms
