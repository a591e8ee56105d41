"""Turning a client-group array into per-client index sets (shared by estimators)."""

from __future__ import annotations

import numpy as np

__all__ = ["client_indices"]


def client_indices(
    n_samples: int,
    groups,
    *,
    n_clients: int,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], list]:
    """Indices of each client's records and the client labels.

    Parameters
    ----------
    n_samples : int
    groups : array-like of shape (n_samples,) or None
        The client of each record; clients are the sorted unique labels.
        None splits the records at random into ``n_clients`` clients of equal
        size. The split depends on the records' positions only, never on
        their values or labels: substituting one record moves no other record
        to another client, which the per-client privacy proof assumes.
    n_clients : int
        Used only when ``groups`` is None.
    rng : numpy.random.Generator
        Public randomness of the split.

    Returns
    -------
    indices : list of ndarray
    names : list
    """
    if groups is None:
        if n_samples < 2 * n_clients:
            raise ValueError(
                f"n_clients={n_clients} needs at least {2 * n_clients} samples (2 per client); got {n_samples}."
            )
        order = rng.permutation(n_samples)
        assignment = np.empty(n_samples, dtype=int)
        assignment[order] = np.arange(n_samples) % n_clients
        return [np.flatnonzero(assignment == c) for c in range(n_clients)], list(range(n_clients))
    groups = np.asarray(groups)
    if groups.ndim != 1 or groups.shape[0] != n_samples:
        raise ValueError(
            f"The 'groups' array must have one label per sample, shape ({n_samples},). "
            f"Got shape {groups.shape} instead."
        )
    if groups.dtype.kind == "f" and not np.isfinite(groups).all():
        raise ValueError("The 'groups' array contains NaN or inf.")
    names, inverse = np.unique(groups, return_inverse=True)
    return [np.flatnonzero(inverse == c) for c in range(len(names))], names.tolist()
