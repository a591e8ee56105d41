"""The private step with distributed noise: every client's clipped records encoded, summed and given its noise share.

:func:`distributed_release` is :func:`~skfedriem.privacy.mechanism.private_step`'s
counterpart for ``noise="distributed"``, for the same K clients: the same
per-record gradients, the same clip factors (:func:`~skfedriem.privacy.mechanism.clip_factors`),
then each client's clipped records rounded one by one on the round's public
grid and summed, plus the client's Skellam share drawn from its own secret
randomness (:func:`~skfedriem.privacy.discrete.encode_records`). What client
k releases depends only on its own records and randomness, whatever K is.
"""

from __future__ import annotations

import numpy as np
import torch

from .apart import check_records_apart
from .copies import ClientCopies
from .discrete import DistributedEncoding, encode_clients
from .gradients import PerRecordGradients, dense_rows, subject_means
from .mechanism import Pass, check_record_dtypes, clip_factors, clip_margin, full_precision
from .per_sample import LossFn
from .randomness import SecretRandomness

__all__ = ["distributed_release", "flat_rows"]


def flat_rows(gradients: PerRecordGradients, names: list[str]) -> torch.Tensor:
    """Every record's gradient over the blocks ``names``, flattened in that order: ``(K, B, d)``.

    Dense gradients are read as they are; structured ones (a closed form's)
    are materialised record by record from their weighted sums.

    Parameters
    ----------
    gradients : PerRecordGradients
        With a client axis.
    names : list of str
        The blocks, in the model's order.

    Returns
    -------
    torch.Tensor
    """
    dense = dense_rows(gradients)
    if dense is not None:
        return torch.cat([dense[name].flatten(2) for name in names], dim=2)
    n_clients, batch = gradients.norms().shape
    rows = []
    for j in range(batch):
        weights = torch.zeros(n_clients, batch, dtype=torch.float64)
        weights[:, j] = 1.0
        sums = gradients.weighted_sum(weights)
        rows.append(torch.cat([sums[name].reshape(n_clients, -1) for name in names], dim=1))
    return torch.stack(rows, dim=1)


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
        Client k's release, ``(n,)``, in [0, 2^bits).
    """
    check_record_dtypes(passes[0][0])
    kept: list[list[torch.Tensor]] = [[] for _ in range(copies.n_clients)]  # each client's real records
    with full_precision():
        check_records_apart(copies, loss_fn, passes[0][0])
        for batch, real in passes:
            clipped = _clipped_rows(copies, loss_fn, batch, clip, segments)
            for k in range(copies.n_clients):  # padding left out: a client rounds (and draws for) its own records
                kept[k].append(clipped[k] if real is None else clipped[k][real[k].to(clipped.device)])
    own = [torch.cat(rows) for rows in kept]
    if len({rows.shape[0] for rows in own}) == 1:  # equal batches: every client's records rotated at once
        return encode_clients(torch.stack(own), encoding, clip, randomness)
    return [encode_clients(rows.unsqueeze(0), encoding, clip, [source])[0] for rows, source in zip(own, randomness)]


def _clipped_rows(copies: ClientCopies, loss_fn: LossFn, batch: tuple[torch.Tensor, ...], clip: float,
                  segments: torch.Tensor | None) -> torch.Tensor:
    """A pass's clipped records (or subjects' means), flattened: ``(K, W, d)`` float64, each of norm at most C."""
    dtypes = [block.dtype for block in copies.blocks.values()]
    gradients = copies.per_record_gradients(loss_fn, batch)
    if segments is not None and batch[0].shape[1] > 0:
        segments = segments.to(batch[0].device)
        gradients = subject_means(gradients, segments, int(segments.max()) + 1)
    factors = clip_factors(gradients.norms(), clip, clip_margin(dtypes), dtypes)
    rows = flat_rows(gradients, list(copies.blocks)).double()
    factors = factors.to(rows.device, torch.float64).unsqueeze(-1)
    # a record of factor 0 (a non-finite norm) is a row of exact zeros, never 0 · inf
    return torch.where(factors > 0, rows * factors, 0.0)
