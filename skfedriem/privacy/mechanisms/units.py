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

The mean is :func:`~skfedriem.privacy.mechanisms.mechanism.subject_means`. A client's records then carry their subject: the last tensor of its
``(inputs, *targets, subjects)`` holds each record's subject code, 0 to n−1.

With ``records_per_subject=k`` (example-level sampling charged per subject,
Charles et al. 2024) a round instead gives every subject exactly k slots
(:meth:`SubjectIndex.slots`: k of its records drawn afresh by the client's
secret randomness, its own records repeated when it holds fewer), and the
steps sample and clip the k n slots as records. Substituting a subject then
substitutes k records of every step, so each charge is for a group of k
records (group privacy over the composition, Dong, Roth & Su 2022, Theorem
2.14; :class:`~skfedriem.privacy.PrivacyAccountant`'s ``group_size``): an
upper bound, not the tight accountant of sampled groups, which is known for
adding or removing a group but not for substituting one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from torch import nn

from .mechanism import clipped_gradient_diameter
from .randomness import SecretRandomness

__all__ = ["PRIVACY_UNITS", "RECORD", "PrivacyUnit", "SubjectIndex", "check_privacy_unit", "check_records_per_subject",
           "split_units", "step_diameter", "subject_reason", "unit_count"]

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


def check_records_per_subject(privacy_unit: str, records_per_subject) -> int | None:
    """``records_per_subject`` if it fits ``privacy_unit`` (None, or an int >= 1 with ``"subject"``), else a
    ValueError naming both.

    Parameters
    ----------
    privacy_unit : {"record", "subject"}
    records_per_subject : object

    Returns
    -------
    int or None
    """
    if records_per_subject is None:
        return None
    if check_privacy_unit(privacy_unit) != "subject":
        raise ValueError(f"records_per_subject={records_per_subject!r} caps each subject's records for a guarantee per "
                         "subject; it needs privacy_unit='subject' (got 'record').")
    if isinstance(records_per_subject, bool) or not isinstance(records_per_subject, (int, np.integer)) \
            or records_per_subject < 1:
        raise ValueError(f"The 'records_per_subject' parameter must be an int >= 1 or None. "
                         f"Got {records_per_subject!r} instead.")
    return int(records_per_subject)


@dataclass(frozen=True)
class PrivacyUnit:
    """What a step protects, one value from the settings to the plan, the client and every ledger entry.

    Parameters
    ----------
    kind : {"record", "subject"}, default="record"
        A record, or a subject with all its records.
    records_per_subject : int or None, default=None
        With ``kind="subject"``: None, the steps sample subjects whole; k,
        every round takes exactly k records of each subject and the steps
        sample them as records, charged for groups of k.

    Examples
    --------
    >>> PrivacyUnit("subject", 4).group_size, str(PrivacyUnit("subject", 4))
    (4, 'subject (4 records a round)')
    >>> PrivacyUnit().samples_subjects_whole, PrivacyUnit("subject").samples_subjects_whole
    (False, True)
    """

    kind: str = "record"
    records_per_subject: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", check_privacy_unit(self.kind))
        object.__setattr__(self, "records_per_subject", check_records_per_subject(self.kind,
                                                                                  self.records_per_subject))

    @property
    def group_size(self) -> int:
        """How many of a step's records one protected unit may own: k with ``records_per_subject``, else 1."""
        return 1 if self.records_per_subject is None else self.records_per_subject

    @property
    def samples_subjects_whole(self) -> bool:
        """Whether a step samples subjects, each with all its records (else it samples records)."""
        return self.kind == "subject" and self.records_per_subject is None

    def __str__(self) -> str:
        if self.records_per_subject is None:
            return self.kind
        return f"subject ({self.records_per_subject} records a round)"


#: The record-level unit (the default).
RECORD = PrivacyUnit()


def step_diameter(module: nn.Module, unit: PrivacyUnit) -> float:
    """Δ of a step, in units of C: the model's :func:`~skfedriem.privacy.clipped_gradient_diameter` for a step that
    clips records (record-level, or subject-level with ``records_per_subject``); 2 (the clip ball's) for one that
    clips subjects' means.

    A model that confines its records' clipped gradients to a smaller set
    declares it for single records; a subject's mean of several need not lie
    in that set, so a step that samples subjects whole is charged, by the
    server and by the client alike, for gradients that may point anywhere.

    Parameters
    ----------
    module : torch.nn.Module
    unit : PrivacyUnit

    Returns
    -------
    float
    """
    return 2.0 if unit.samples_subjects_whole else clipped_gradient_diameter(module)


def subject_reason(batch_size: int | None, smallest: int, unit: PrivacyUnit) -> str:
    """A plan's reason for a subject-level run: which unit it protects, and at what rate.

    Parameters
    ----------
    batch_size : int or None
        B, units per step (None: every unit at every step).
    smallest : int
        The smallest client's number of units: subjects, or with
        ``records_per_subject`` its k n slots.
    unit : PrivacyUnit
        A subject-level unit.

    Returns
    -------
    str
    """
    b = smallest if batch_size is None else min(batch_size, smallest)
    records_per_subject = unit.records_per_subject
    if records_per_subject is not None:
        return (f"privacy_unit='subject', records_per_subject={records_per_subject}: every subject gives exactly "
                f"{records_per_subject} of its trials each round and every step samples B = {b} of the smallest "
                f"client's {smallest} such trials (q = {b / smallest:.3g}), each clipped to C; (ε, δ) is for "
                f"substituting one subject, by group privacy over its {records_per_subject} trials")
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

    def slots(self, records_per_subject: int, randomness: SecretRandomness) -> np.ndarray:
        """Exactly k records of every subject, subject by subject: a uniformly random k of its records, or, when it
        holds fewer, each of them ⌊k / n_s⌋ times and a random k mod n_s of them once more.

        Drawn by the client's secret ``randomness`` (which of a subject's
        records take part is its own secret, as its batches are).

        Parameters
        ----------
        records_per_subject : int
            k >= 1.
        randomness : SecretRandomness

        Returns
        -------
        numpy.ndarray of int, shape (k n_subjects,)
            Record indices; entries j k .. (j + 1) k − 1 are subject j's.
        """
        k = int(records_per_subject)
        picks = []
        for start, count in zip(self._starts, self._counts):
            own = self._order[start:start + count]
            whole, extra = divmod(k, int(count))
            chosen = np.tile(own, whole)
            if extra:
                chosen = np.concatenate([chosen, own[np.sort(randomness.subset(int(count), extra))]])
            picks.append(chosen)
        return np.concatenate(picks).astype(np.int64)

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


def split_units(data: tuple[torch.Tensor, ...], unit: PrivacyUnit) -> tuple[tuple[torch.Tensor, ...],
                                                                           SubjectIndex | None]:
    """A client's records and, for a subject-level unit, its :class:`SubjectIndex` (the data's last tensor).

    Parameters
    ----------
    data : tuple of torch.Tensor
        ``(inputs, *targets)``, or ``(inputs, *targets, subjects)`` with subjects.
    unit : PrivacyUnit

    Returns
    -------
    records : tuple of torch.Tensor
    subjects : SubjectIndex or None
    """
    if unit.kind == "record":
        return data, None
    if len(data) < 2 or data[-1].dim() != 1 or data[-1].shape[0] != data[0].shape[0]:
        raise ValueError("privacy_unit='subject' needs each client's records as (inputs, *targets, subjects), the "
                         "last tensor holding each record's subject.")
    return data[:-1], SubjectIndex(data[-1].cpu().numpy())


def unit_count(data: tuple[torch.Tensor, ...], unit: PrivacyUnit) -> int:
    """What the client's sampler draws from: its records, its subjects, or with ``records_per_subject`` k its k n
    subjects' slots.

    Parameters
    ----------
    data : tuple of torch.Tensor
    unit : PrivacyUnit

    Returns
    -------
    int
    """
    records, subjects = split_units(data, unit)
    if subjects is None:
        return int(records[0].shape[0])
    return unit.group_size * subjects.n_subjects
