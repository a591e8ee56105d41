"""What the server does with a round's replies: a strategy that sees them all and moves the model.

The noise placement (:mod:`~skfedriem.federated.noise_placement`) chooses the
strategy, since it decides what the replies are:

* :class:`AverageSubmissions` (local noise): each reply is the client's
  submission Sub(θ_t, θ_i) under the run's aggregation rule; the server moves
  to Out(θ_t, their mean), block by block.
* :class:`StepOnSum` (distributed noise): the replies are encoded releases
  the server may only add up; it decodes their sum and takes one projected
  step on it (:class:`~skfedriem.federated.distributed_server.DistributedServer`),
  or discards the round (too few honest shares, or a sum that wrapped).

Each returns a :class:`RoundOutcome`: the seconds it took, why the round was
discarded (None: applied), what the server saw, for the transcript, and the
clients' noisy fraction of records within the clip that adaptive clipping
steers by (the mean of the submissions' under local noise, the decoded count
over the answering clients' batches under distributed noise).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ..manifolds import manifold_of
from ..privacy.per_record.per_sample import trainable_parameters
from .adaptive_clip import clipped_fraction, summed_fraction
from .aggregation import Aggregation
from .distributed_server import DistributedServer
from .instructions import ENCODED_RELEASE, EXCESS_NOISE

__all__ = ["AverageSubmissions", "RoundOutcome", "ServerStrategy", "StepOnSum"]


@dataclass(frozen=True)
class RoundOutcome:
    """What a strategy did with a round's replies.

    Parameters
    ----------
    seconds : float
        The time it took.
    discarded : str or None
        Why the model was left as it was (None: the round was applied).
    seen : dict
        What the server learnt (the transcript's entry, θ_t and the clients aside), when asked for.
    clipped_fraction : float or None, default=None
        b̄_t of adaptive clipping, clamped to ``FRACTION_RANGE``
        (:mod:`~skfedriem.federated.adaptive_clip`); None without a count (or
        from a discarded round).
    """

    seconds: float
    discarded: str | None
    seen: dict
    clipped_fraction: float | None = None


class ServerStrategy(ABC):
    """Moves the server's model from θ_t given every reply of a round."""

    @abstractmethod
    def apply(self, theta: dict[str, torch.Tensor], replies: dict, instructions: dict, lr: float, *,
              transcript: bool = False) -> RoundOutcome:
        """The round's update, in place on the server's model.

        Parameters
        ----------
        theta : dict of str to Tensor
            θ_t.
        replies : dict
            By client: ``(submission, seconds)``.
        instructions : dict
            By client: the round's instructions.
        lr : float
            η of the round.
        transcript : bool, default=False
            Fill :attr:`RoundOutcome.seen` (else it is empty).

        Returns
        -------
        RoundOutcome
        """


class AverageSubmissions(ServerStrategy):
    """θ_{t+1} = Out(θ_t, mean of the submissions that arrived), per block (θ stays when none did).

    Parameters
    ----------
    module : torch.nn.Module
        The server's model.
    aggregation : Aggregation
        The run's rule (its Out; each client applied its Sub).
    """

    def __init__(self, module: nn.Module, aggregation: Aggregation) -> None:
        self.params = trainable_parameters(module)
        self.aggregation = aggregation

    def apply(self, theta: dict[str, torch.Tensor], replies: dict, instructions: dict, lr: float, *,
              transcript: bool = False) -> RoundOutcome:
        replied = sorted(replies)
        started = time.perf_counter()
        submissions = None
        if replied:
            submissions = {name: torch.stack([replies[i][0][name] for i in replied]) for name in self.params}
            with torch.no_grad():
                for name, p in self.params.items():
                    p.copy_(self.aggregation.output(manifold_of(p), theta[name], submissions[name].mean(0)))
        return RoundOutcome(time.perf_counter() - started, None, {"submissions": submissions} if transcript else {},
                            clipped_fraction(sub for sub, _ in replies.values()))


class StepOnSum(ServerStrategy):
    """θ_{t+1} from the decoded sum of the releases that arrived: one projected step of the server's optimiser.

    Parameters
    ----------
    module : torch.nn.Module
        The server's model.
    optimizer : str or callable
        The run's optimiser (it runs at the server, on the decoded mean gradient).
    batch_size : callable
        ``batch_size(i)``: client i's public batch size (the denominator counts the clients that answered).
    """

    def __init__(self, module: nn.Module, optimizer, batch_size: Callable[[int], int]) -> None:
        self.server = DistributedServer(module, optimizer)
        self.batch_size = batch_size

    def apply(self, theta: dict[str, torch.Tensor], replies: dict, instructions: dict, lr: float, *,
              transcript: bool = False) -> RoundOutcome:
        replied = sorted(replies)
        started = time.perf_counter()
        encoding = next(iter(instructions.values())).encoding  # the round's, the same for every client
        releases = [replies[i][0][ENCODED_RELEASE] for i in replied]
        excess = _excess([replies[i][0] for i in replied])
        denominator = sum(self.batch_size(i) for i in replied)
        discarded, count = self.server.apply(theta, releases, denominator, encoding, lr, excess)
        fraction = None if count is None else summed_fraction(count, denominator)
        seconds = time.perf_counter() - started
        if not transcript:
            return RoundOutcome(seconds, discarded, {}, fraction)
        # the sum less the excess, what the server learns; secure aggregation with too few survivors reveals nothing
        total = self.server.summed(releases, encoding, excess)
        return RoundOutcome(seconds, discarded, {"sum": None if total is None else torch.from_numpy(total)}, fraction)


def _excess(submissions: list[dict]) -> list[torch.Tensor] | None:
    """The answering clients' excess components, when their releases came with them (all or none)."""
    kept = [s[EXCESS_NOISE] for s in submissions if EXCESS_NOISE in s]
    if kept and len(kept) != len(submissions):
        raise ValueError(f"{len(kept)} of {len(submissions)} releases came with their excess components.")
    return kept or None
