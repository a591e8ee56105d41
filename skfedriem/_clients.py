"""Turning client-group and subject arrays into per-client index sets and subject codes (shared by estimators)."""

from __future__ import annotations

import numpy as np

__all__ = ["client_indices", "client_subjects"]


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


def client_subjects(indices: list[np.ndarray], names: list, subjects, *, n_records: int
                    ) -> tuple[list[np.ndarray], list[int]]:
    """Each client's subject codes (0 to n_i − 1, by record) and its number of subjects, for subject-level privacy.

    Parameters
    ----------
    indices : list of ndarray
        Each client's records (:func:`client_indices`).
    names : list
        The clients' labels, for messages.
    subjects : array-like of shape (n_records,) or None
        The subject of each record. None: each client is one subject (client-level privacy).
    n_records : int

    Returns
    -------
    codes : list of ndarray of int64
    sizes : list of int

    Raises
    ------
    ValueError
        For an array of the wrong length or with NaN, and for a subject whose
        records sit at two clients (neither could protect all of them).
    """
    if subjects is None:
        return [np.zeros(len(idx), dtype=np.int64) for idx in indices], [1] * len(indices)
    subjects = np.asarray(subjects)
    if subjects.ndim != 1 or subjects.shape[0] != n_records:
        raise ValueError(f"The 'subjects' array must have one label per sample, shape ({n_records},). "
                         f"Got shape {subjects.shape} instead.")
    if subjects.dtype.kind == "f" and not np.isfinite(subjects).all():
        raise ValueError("The 'subjects' array contains NaN or inf.")
    owner: dict = {}
    codes, sizes = [], []
    for name, idx in zip(names, indices):
        labels, inverse = np.unique(subjects[idx], return_inverse=True)
        for label in labels.tolist():
            if label in owner:
                raise ValueError(f"Subject {label!r} has records at clients {owner[label]!r} and {name!r}: with "
                                 "privacy_unit='subject' each subject's records must sit at one client (neither "
                                 "client could protect all of them). Merge the subject's records at one client.")
            owner[label] = name
        codes.append(inverse.astype(np.int64))
        sizes.append(len(labels))
    return codes, sizes
