"""Continuing a run from its checkpoint: the same plan, or a refusal naming what changed.

A resumed run sends and charges what its checkpoint planned: the server
refuses a checkpoint taken by a run with other settings, sizes or plan
(:func:`check_resume`), and a checkpoint taken at a round's start re-sends
that round as it was charged, without charging it again
(:meth:`~skfedriem.federated.FederatedTrainer.serve`).
"""

from __future__ import annotations

from .checkpoint import TrainingState

__all__ = ["check_resume", "remaining_from"]


def check_resume(resume: TrainingState, record: dict) -> None:
    """ValueError unless the checkpoint was taken by a run whose plan record is ``record``.

    Parameters
    ----------
    resume : TrainingState
        The checkpoint.
    record : dict
        This run's :meth:`~skfedriem.federated.RoundPricing.record`.
    """
    if resume.plan == record:
        return
    then = resume.plan or {}
    changed = sorted(k for k in set(record) | set(then) if then.get(k) != record.get(k))
    raise ValueError(
        f"Cannot resume: the checkpoint was taken by a run with other settings ({', '.join(changed)}: "
        f"{ {k: then.get(k) for k in changed} } then, now { {k: record.get(k) for k in changed} }). A resumed run "
        "sends and charges what its checkpoint planned; start a new run instead."
    )


def remaining_from(start: int, resume: TrainingState | None) -> int:
    """The first round still to charge: ``start``, or the one after it when the checkpoint was taken as round
    ``start`` began (it was charged then)."""
    return start + int(resume is not None and resume.started)
