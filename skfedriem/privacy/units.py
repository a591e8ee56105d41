"""What one private step protects: a record, or a subject with all its records (docs: what is protected).

With ``privacy_unit="record"`` a step samples records and clips each record's
gradient. With ``privacy_unit="subject"`` (user-level sampling, Charles et al.
2024, "Fine-Tuning Large Language Models with User-Level Differential
Privacy") a step samples B of the client's subjects; each sampled subject
contributes the mean of the per-record gradients of **all** its records,
clipped to C as one vector; their sum is noised with σ and divided by B, as
records' are. Substituting one subject, whatever its number of records, then
moves one clipped vector of the step: the sensitivity, the sampler's rate
q = B / (subjects at the client) and every charge are the record mode's with
"subject" in place of "record". All of a subject's records enter its mean
(rather than a sample of them) because that adds no randomness to account for
and gives the least noisy mean; a subject's gradient costs its number of
records in per-record gradients.

The mean is :func:`~skfedriem.privacy.mechanism.subject_means`. A client's records then carry their subject: the last tensor of its
``(inputs, *targets, subjects)`` holds each record's subject code, 0 to n−1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from torch import nn

from .mechanism import clipped_gradient_diameter

__all__ = ["PRIVACY_UNITS", "SubjectIndex", "check_privacy_unit", "split_units", "step_diameter", "subject_reason",
           "unit_count"]

#: What a step can protect: one record, or one subject (all its records).
PRIVACY_UNITS = ("record", "subject")


def check_privacy_unit(privacy_unit) -> str:
    """``privacy_unit`` if it is one of :data:`PRIVACY_UNITS`, else a ValueError naming it.

    Parameters
    ----------
    privacy_unit : object

    Returns
    -------
    str
    """
    if not isinstance(privacy_unit, str) or privacy_unit not in PRIVACY_UNITS:
        raise ValueError(f"The 'privacy_unit' parameter must be one of {list(PRIVACY_UNITS)}. "
                         f"Got {privacy_unit!r} instead.")
    return privacy_unit


def step_diameter(module: nn.Module, privacy_unit: str) -> float:
    """Δ of a step, in units of C: the model's :func:`~skfedriem.privacy.clipped_gradient_diameter` for records; 2
    (the clip ball's) for subjects.

    A model that confines its records' clipped gradients to a smaller set
    declares it for single records; a subject's mean of several need not lie
    in that set, so a subject-level step is charged, by the server and by the
    client alike, for gradients that may point anywhere.

    Parameters
    ----------
    module : torch.nn.Module
    privacy_unit : {"record", "subject"}

    Returns
    -------
    float
    """
    return clipped_gradient_diameter(module) if check_privacy_unit(privacy_unit) == "record" else 2.0


def subject_reason(batch_size: int | None, smallest: int) -> str:
    """A plan's reason for a subject-level run: which unit it protects, and at what rate.

    Parameters
    ----------
    batch_size : int or None
        B, subjects per step (None: every subject at every step).
    smallest : int
        The smallest client's number of subjects.

    Returns
    -------
    str
    """
    b = smallest if batch_size is None else min(batch_size, smallest)
    return (f"privacy_unit='subject': every step samples B = {b} of the smallest client's {smallest} subjects "
            f"(q = {b / smallest:.3g}), each contributing the mean gradient of all its trials, clipped to C, so (ε, δ) "
            "is for substituting one subject")


@dataclass(frozen=True, eq=False)
class SubjectIndex:
    """Which records belong to each of a client's subjects.

    Parameters
    ----------
    codes : numpy.ndarray of int, shape (n_records,)
        Each record's subject, 0 to n−1; every subject holds at least one record.

    Examples
    --------
    >>> index = SubjectIndex(np.array([1, 0, 1, 2]))
    >>> index.n_subjects
    3
    >>> records, segments = index.records_of(np.array([2, 1]))
    >>> records.tolist(), segments.tolist()
    ([3, 0, 2], [0, 1, 1])
    """

    codes: np.ndarray

    def __post_init__(self) -> None:
        codes = np.asarray(self.codes)
        if codes.ndim != 1 or codes.dtype.kind not in "iu" or codes.size == 0:
            raise ValueError(f"A client's subject codes must be a non-empty 1-D integer array. Got {codes!r}.")
        counts = np.bincount(codes, minlength=0) if codes.min() >= 0 else np.array([0])
        if codes.min() < 0 or (counts == 0).any():
            raise ValueError("A client's subject codes must number its subjects 0 to n−1, each holding a record.")
        order = np.argsort(codes, kind="stable")
        object.__setattr__(self, "codes", codes)
        object.__setattr__(self, "_order", order)
        object.__setattr__(self, "_counts", counts)
        object.__setattr__(self, "_starts", np.concatenate([[0], np.cumsum(counts)[:-1]]))

    @property
    def n_subjects(self) -> int:
        """The client's number of subjects (public, as a client's number of records is)."""
        return int(self._counts.size)

    def records_of(self, subjects: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every record of the sampled ``subjects``, and the position in ``subjects`` of each record's subject.

        Parameters
        ----------
        subjects : numpy.ndarray of int
            The subjects a sampler drew for a step.

        Returns
        -------
        records : numpy.ndarray of int
        segments : numpy.ndarray of int
            ``segments[j]`` is the position of ``records[j]``'s subject in ``subjects``.
        """
        subjects = np.asarray(subjects, dtype=np.int64)
        counts = self._counts[subjects]
        records = np.concatenate([self._order[s:s + c] for s, c in zip(self._starts[subjects], counts)]) \
            if subjects.size else np.zeros(0, dtype=np.int64)
        return records, np.repeat(np.arange(subjects.size), counts)


def split_units(data: tuple[torch.Tensor, ...], privacy_unit: str) -> tuple[tuple[torch.Tensor, ...],
                                                                               SubjectIndex | None]:
    """A client's records and, with ``privacy_unit="subject"``, its :class:`SubjectIndex` (the data's last tensor).

    Parameters
    ----------
    data : tuple of torch.Tensor
        ``(inputs, *targets)``, or ``(inputs, *targets, subjects)`` with subjects.
    privacy_unit : {"record", "subject"}

    Returns
    -------
    records : tuple of torch.Tensor
    subjects : SubjectIndex or None
    """
    if check_privacy_unit(privacy_unit) == "record":
        return data, None
    if len(data) < 2 or data[-1].dim() != 1 or data[-1].shape[0] != data[0].shape[0]:
        raise ValueError("privacy_unit='subject' needs each client's records as (inputs, *targets, subjects), the "
                         "last tensor holding each record's subject.")
    return data[:-1], SubjectIndex(data[-1].cpu().numpy())


def unit_count(data: tuple[torch.Tensor, ...], privacy_unit: str) -> int:
    """The client's number of privacy units: its records, or its subjects (what its sampler draws from).

    Parameters
    ----------
    data : tuple of torch.Tensor
    privacy_unit : {"record", "subject"}

    Returns
    -------
    int
    """
    records, subjects = split_units(data, privacy_unit)
    return int(records[0].shape[0]) if subjects is None else subjects.n_subjects
