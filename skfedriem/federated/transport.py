"""How the server reaches its clients: the transport protocol, and the clients in this process.

The round loop (:meth:`~skfedriem.federated.FederatedTrainer.serve`) only
calls ``run_round`` on a :class:`Transport`. :class:`LocalTransport` runs the
clients here; the Flower backends (:mod:`skfedriem.flower`) move the same
messages between processes and hosts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch

from .client import ClientRecipe, ClientState
from .client_round import run_clients
from .instructions import RoundInstructions

__all__ = ["LocalTransport", "Transport"]

#: What a round returns: for each client that replied, its submission and the time its Sub took.
Replies = dict[int, tuple[dict[str, torch.Tensor], float]]


@runtime_checkable
class Transport(Protocol):
    """Anything that can run a round's selected clients from θ_t.

    A :class:`typing.Protocol`: any object with a ``run_round`` method of this
    signature is a transport (:class:`LocalTransport`,
    :class:`~skfedriem.flower.FlowerTransport`).
    """

    def run_round(self, t: int, selected: list[int], theta: dict[str, torch.Tensor],
                  instructions: dict[int, RoundInstructions]) -> Replies:
        """Send θ_t and each selected client's instructions; return the submissions that came back."""


class LocalTransport:
    """The clients in this process, in lockstep groups (:mod:`~skfedriem.federated.lockstep`) or one by one.

    Parameters
    ----------
    recipe : ClientRecipe
        Shared by the clients (one working copy of the model, overwritten by θ_t each round).
    clients : sequence of tuple of Tensor
        Client i's records.
    states : list of ClientState
        Client i's secret randomness and optimiser state.
    """

    def __init__(self, recipe: ClientRecipe, clients: Sequence[tuple[torch.Tensor, ...]],
                 states: list[ClientState]) -> None:
        self.recipe = recipe
        self.clients = clients
        self.states = states

    def run_round(self, t: int, selected: list[int], theta: dict[str, torch.Tensor],
                  instructions: dict[int, RoundInstructions]) -> Replies:
        """Run the selected clients from θ_t (in lockstep when the recipe says so); every one replies."""
        return run_clients(self.recipe, theta, self.clients, self.states, selected, instructions)
