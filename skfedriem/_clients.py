"""Turning client-group and subject arrays into per-client index sets and subject codes (shared by estimators)."""

from __future__ import annotations

import numpy as np

__all__ = ["check_labels", "client_indices", "client_subjects", "subject_clients"]


def check_labels(labels, name: str, n_samples: int) -> np.ndarray:
    """``labels`` as a 1-d array of one sortable label per sample; ValueError or TypeError naming ``name`` otherwise.

    Parameters
    ----------
    labels : array-like of shape (n_samples,)
        Client or subject labels: numbers or strings, not both, and no None.
    name : str
        The parameter's name, for messages (``"groups"``, ``"subjects"``).
    n_samples : int

    Returns
    -------
    ndarray of shape (n_samples,)
    """
    array = np.asarray(labels)
    if array.ndim != 1 or array.shape[0] != n_samples:
        raise ValueError(f"The '{name}' array must have one label per sample, shape ({n_samples},). "
                         f"Got shape {array.shape} instead.")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ValueError(f"The '{name}' array contains NaN or inf.")
    if array.dtype == object:
        _check_object_labels(array.tolist(), name)
        try:
            np.unique(array)
        except TypeError as error:
            raise TypeError(f"The '{name}' array holds labels that have no common order ({error}). Convert them to "
                            f"one type, e.g. {name}.astype(str).") from None
    return array


def _check_object_labels(values: list, name: str) -> None:
    """NaN, None or strings mixed with other labels in an object array: refused by name (numpy cannot sort them)."""
    kinds = [_kind(v) for v in values]
    if "nan" in kinds:
        raise ValueError(f"The '{name}' array contains NaN or inf.")
    if "none" in kinds:
        first = kinds.index("none")
        raise TypeError(f"The '{name}' array holds {values[first]!r} at index {first} ({kinds.count('none')} of "
                        f"{len(values)}): every sample needs a label.")
    if "str" in kinds and "other" in kinds:
        text, other = values[kinds.index("str")], values[kinds.index("other")]
        raise TypeError(f"The '{name}' array mixes strings and other labels (e.g. {text!r} and {other!r}), which have "
                        f"no common order. Convert them to one type, e.g. {name}.astype(str).")


def _kind(label) -> str:
    """'none' (None, pandas' NA), 'nan' (a non-finite float), 'str' or 'other'."""
    if label is None or type(label).__name__ == "NAType":  # pd.NA, without importing pandas
        return "none"
    if isinstance(label, str):
        return "str"
    if isinstance(label, (float, np.floating)) and not np.isfinite(label):
        return "nan"
    return "other"


def subject_clients(subjects: np.ndarray, n_groups: int | str) -> np.ndarray:
    """The client of each record when the clients are made of whole subjects.

    A client is never a chunk of some subject's trials: ``"each"`` makes
    every subject a client; an int G deals the sorted subjects into G
    contiguous, nearly equal blocks (``numpy.array_split``), a public rule
    that reads only the subjects' labels (the paper's fixed groups of subjects).

    Parameters
    ----------
    subjects : ndarray of shape (n_samples,)
        Checked by :func:`check_labels`.
    n_groups : "each" or int
        The number of clients (at most the number of subjects).

    Returns
    -------
    ndarray of int of shape (n_samples,)

    Examples
    --------
    >>> subject_clients(np.array([3, 1, 2, 2, 4, 1]), 2).tolist()
    [1, 0, 0, 0, 1, 0]
    """
    names, inverse = np.unique(subjects, return_inverse=True)
    if n_groups == "each":
        return inverse
    if n_groups > len(names):
        raise ValueError(f"The 'subject_clients' parameter asks for {n_groups} clients of whole subjects, but fit got "
                         f"{len(names)} subjects. Set subject_clients='each' or at most {len(names)}.")
    block = np.concatenate([np.full(len(part), g) for g, part in enumerate(np.array_split(np.arange(len(names)),
                                                                                          n_groups))])
    return block[inverse]


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
    groups = check_labels(groups, "groups", n_samples)
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
    subjects = check_labels(subjects, "subjects", n_records)
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
