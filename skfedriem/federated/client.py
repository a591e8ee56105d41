"""A client's own side of a run: its state between rounds, its recipe of the model, its records of a round.

The same code runs in-process (the ``"local"`` backend) and inside a Flower
ClientApp: everything a client keeps between rounds (its secret randomness
and, optionally, its optimiser state) is in :class:`ClientState`, which is
never part of a reply. A deployed Flower site keeps none of its randomness:
it draws afresh for every message (:mod:`skfedriem.flower.protocol.client_app`).
The round itself is :func:`~skfedriem.federated.client_round.run_round`.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ..privacy.per_record.copies import ClientCopies, LoneClient
from ..privacy.per_record.per_sample import LossFn
from ..privacy.mechanisms.randomness import SecretRandomness, SecureRandomness, SeededRandomness
from ..privacy.mechanisms.units import RECORD, PrivacyUnit, SubjectIndex, split_units, unit_count
from .lockstep import ClientStack

__all__ = ["ClientRecipe", "ClientState", "round_units"]


@dataclass(frozen=True)
class ClientRecipe:
    """What a client needs of the model, besides its records: all public, the same for every client.

    Parameters
    ----------
    module : torch.nn.Module
        A working copy of the model (its values are overwritten with θ_t each round).
    loss_fn : callable
        ``loss_fn(module(batch[0]), *batch[1:])`` -> per-record losses (B,).
    optimizer : str or callable, default="sgd"
        ``"sgd"``, ``"adam"``, or ``optimizer(params, lr)`` -> a ``torch.optim.Optimizer``.
    reset_optimizer : bool, default=True
        Start each round from a fresh optimiser state (else the client keeps
        its state, e.g. Adam's moments, in its :class:`ClientState`).
    lockstep : bool, default=False
        Simulated clients on one machine with the same instructions take
        their steps together (:mod:`skfedriem.federated.lockstep`), where
        :func:`~skfedriem.federated.lockstep.lockstep_eligible` allows it.
    unit : PrivacyUnit, default=RECORD
        What the client's steps protect (:mod:`skfedriem.privacy.mechanisms.units`): for
        a subject, its records are ``(inputs, *targets, subjects)`` and it
        samples subjects whole, or with ``records_per_subject`` k, every round
        takes exactly k records of each subject and its steps sample them as
        records (:func:`round_units`). The client's own choice: it refuses
        instructions planned for another unit or k.
    """

    module: nn.Module
    loss_fn: LossFn
    optimizer: str | Callable = "sgd"
    reset_optimizer: bool = True
    lockstep: bool = False
    unit: PrivacyUnit = RECORD
    #: The clients' copies of the model, by K (:meth:`copies`).
    _copies: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.unit, PrivacyUnit):
            raise TypeError(f"ClientRecipe's 'unit' must be a PrivacyUnit. Got {self.unit!r} instead.")
        if self.unit.samples_subjects_whole and self.lockstep:
            raise ValueError("Clients that sample subjects whole cannot run in lockstep (a step's number of records "
                             "is its subjects'): build the recipe with lockstep=False, or records_per_subject.")

    def n_units(self, data: tuple[torch.Tensor, ...]) -> int:
        """m_i of a client holding ``data``: what its sampler draws from (:func:`~skfedriem.privacy.mechanisms.units.unit_count`)."""
        return unit_count(data, self.unit)

    def copies(self, n_clients: int) -> ClientCopies:
        """The model as ``n_clients`` clients' copies: a stack of K when the clients run in lockstep (one client
        too: a group's clients then compute alike whatever its size), else the recipe's module itself for one
        (made once per K, then reused: a stack's check and the loss's run once).

        Parameters
        ----------
        n_clients : int

        Returns
        -------
        ClientCopies
        """
        if n_clients not in self._copies:
            if not self.lockstep and n_clients != 1:
                raise ValueError(f"Clients that do not run in lockstep run one by one; got a group of {n_clients}.")
            self._copies[n_clients] = ClientStack(self.module, n_clients) if self.lockstep else LoneClient(self.module)
        return self._copies[n_clients]


@dataclass
class ClientState:
    """What a client carries from one round to the next; it never leaves the client.

    Parameters
    ----------
    randomness : SecretRandomness
        Draws the batches and the noise.
    optimizer_state : dict or None, default=None
        Kept only when the optimiser is not reset between rounds.
    """

    randomness: SecretRandomness
    optimizer_state: dict | None = None

    @classmethod
    def fresh(cls, seed: np.random.SeedSequence | None = None, *, secure_mode: bool = False) -> ClientState:
        """A new client's state.

        Parameters
        ----------
        seed : numpy.random.SeedSequence, optional
            Seeds the batches and noise (reproducible, and replayable by anyone
            who knows the seed). None: 128 bits of fresh OS entropy.
        secure_mode : bool, default=False
            The OS's cryptographically secure generator instead (``seed`` must be None).
        """
        if secure_mode:
            if seed is not None:
                raise ValueError("secure_mode draws from the OS's secure generator and cannot be seeded.")
            return cls(SecureRandomness())
        return cls(SeededRandomness(seed if seed is not None else np.random.SeedSequence()))

    def to_bytes(self) -> bytes:
        """Serialise (for a Flower node's private context, or a worker process): JSON, or torch's tensors-only
        format when there is an optimiser state; never a pickle, so reading it back runs no code."""
        randomness = self.randomness.to_bytes()
        if self.optimizer_state is None:
            return _RANDOMNESS_ONLY + randomness
        buffer = io.BytesIO()
        torch.save({"randomness": randomness, "optimizer_state": self.optimizer_state}, buffer)
        return _WITH_OPTIMIZER + buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> ClientState:
        """Inverse of :meth:`to_bytes`; ValueError for anything else."""
        kind, payload = data[:1], data[1:]
        if kind == _RANDOMNESS_ONLY:
            return cls(SecretRandomness.from_bytes(payload))
        if kind == _WITH_OPTIMIZER:
            try:
                state = torch.load(io.BytesIO(payload), weights_only=True)
            except Exception as error:  # noqa: BLE001 - whatever the bytes, a ValueError
                raise ValueError(f"Not a saved ClientState: {error}") from None
            return cls(SecretRandomness.from_bytes(state["randomness"]), state["optimizer_state"])
        raise ValueError("Not a saved ClientState.")


_RANDOMNESS_ONLY, _WITH_OPTIMIZER = b"R", b"T"


def round_units(data: tuple[torch.Tensor, ...], unit: PrivacyUnit,
                randomness: SecretRandomness) -> tuple[tuple[torch.Tensor, ...], SubjectIndex | None]:
    """A client's records as one round samples them, and their subjects when its steps sample subjects whole.

    With ``records_per_subject`` k the records are every subject's k slots
    for this round (:meth:`~skfedriem.privacy.mechanisms.units.SubjectIndex.slots`, drawn
    by the client's secret ``randomness``), sampled as records.

    Parameters
    ----------
    data : tuple of torch.Tensor
        ``(inputs, *targets)``, or with ``privacy_unit="subject"`` ``(inputs, *targets, subjects)``.
    unit : PrivacyUnit
    randomness : SecretRandomness

    Returns
    -------
    records : tuple of torch.Tensor
    subjects : SubjectIndex or None
    """
    records, subjects = split_units(data, unit)
    if subjects is None or unit.records_per_subject is None:
        return records, subjects
    idx = torch.from_numpy(subjects.slots(unit.records_per_subject, randomness))
    return tuple(x.index_select(0, idx.to(x.device)) for x in records), None
