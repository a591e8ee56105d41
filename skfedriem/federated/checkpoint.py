"""A server's state between rounds: what a checkpoint holds, a resume continues and a warm start builds on."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .._utils.files import write_atomically

__all__ = ["TrainingState"]


@dataclass
class TrainingState:
    """The server's side of a run after some rounds (or as a round starts).

    Everything here is post-processing of what the server saw, plus the
    public client-selection stream: a checkpoint leaks nothing a fitted model
    does not.

    Parameters
    ----------
    round : int
        Rounds completed (``started``: the index of the round that started).
    theta : dict of str to Tensor
        θ at that point.
    ledger : dict
        :meth:`~skfedriem.privacy.PrivacyAccountant.state_dict` of every step charged
        (a started round included).
    history : list of dict
        ``history_`` so far.
    server_rng : dict or None
        The client-selection generator's state (before the started round's draw).
    started : bool
        True when the round ``round`` had started (charged, sent) and not ended.
    plan : dict or None
        The run's target and plan (:meth:`FederatedTrainer.serve` refuses to
        resume a checkpoint of a run planned otherwise).
    round_cost : dict or None
        The started round's charge, as a ledger state: a resume that re-sends
        the round at that cost does not charge it again.
    local_ledger : dict or None
        What every client's own releases guarantee alone (distributed noise:
        its shares), as a ledger state; None: the same as ``ledger``.
    deviating_ledger : dict or None
        What the run guarantees against a server that deviates from the
        protocol with t colluding clients (distributed noise: the K − 2t honest
        shares it can leave), as a ledger state; None: the same as ``local_ledger`` (which bounds it).
    """

    round: int
    theta: dict[str, torch.Tensor]
    ledger: dict = field(default_factory=lambda: {"history": []})
    history: list[dict] = field(default_factory=list)
    server_rng: dict | None = None
    started: bool = False
    plan: dict | None = None
    round_cost: dict | None = None
    local_ledger: dict | None = None
    deviating_ledger: dict | None = None

    @classmethod
    def empty(cls) -> TrainingState:
        """No rounds, no steps."""
        return cls(0, {})

    def save(self, path: str | Path) -> None:
        """Write atomically (a crash leaves the previous checkpoint)."""
        write_atomically(path, lambda f: torch.save(dataclasses.asdict(self), f))

    @classmethod
    def load(cls, path: str | Path) -> TrainingState:
        """Inverse of :meth:`save` (tensors, numbers, strings and lists only: ``weights_only``)."""
        return cls(**torch.load(path, weights_only=True))
