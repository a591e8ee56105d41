"""A Flower ClientApp around the engine's client round."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn

from ..federated.client import ClientState, run_client_round
from ..privacy.per_sample import LossFn
from ._protocol import decode_arrays, decode_instructions, encode_arrays

__all__ = ["ClientSetup", "make_client_app"]

_STATE_KEY = "skfedriem"


@dataclass
class ClientSetup:
    """Everything one client needs, built where the client runs.

    Attributes
    ----------
    name : str
        The client's name (unique in the federation).
    data : tuple of Tensor
        Its records ``(inputs, *targets)``.
    module : torch.nn.Module
        A working copy of the model (its values are overwritten with θ_t).
    loss_fn : callable
    seed : numpy.random.SeedSequence
        Seeds the client's batches and noise; it never leaves the client.
    optimizer : str or callable
    reset_optimizer : bool
    """

    name: str
    data: tuple[torch.Tensor, ...]
    module: nn.Module
    loss_fn: LossFn
    seed: np.random.SeedSequence
    optimizer: str | Callable = "sgd"
    reset_optimizer: bool = True


def make_client_app(setup: Callable[[Context], ClientSetup]) -> ClientApp:
    """A ClientApp answering ``query`` and ``train`` messages.

    Parameters
    ----------
    setup : callable
        ``setup(context) -> ClientSetup``, called where the client runs (read
        the node's data there; cache it if loading is slow).

    Returns
    -------
    flwr.clientapp.ClientApp

    Notes
    -----
    The client's random streams and optimiser state are kept in the node's
    ``context.state`` between rounds; they are never part of a reply. A reply
    to ``train`` holds only Sub(θ_t, θ_i) and the time Sub took.
    """
    app = ClientApp()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        client = setup(context)
        info = ConfigRecord({"name": str(client.name), "n_records": int(client.data[0].shape[0])})
        return Message(RecordDict({"client": info}), reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        client = setup(context)
        stored = context.state.config_records.get(_STATE_KEY)
        state = ClientState.from_bytes(stored["state"]) if stored is not None else ClientState.from_seed(client.seed)
        submission, seconds = run_client_round(
            client.module, decode_arrays(msg.content["theta"]), client.data, state,
            decode_instructions(msg.content["instructions"]), loss_fn=client.loss_fn, optimizer=client.optimizer,
            reset_optimizer=client.reset_optimizer,
        )
        context.state.config_records[_STATE_KEY] = ConfigRecord({"state": state.to_bytes()})
        content = RecordDict({"submission": encode_arrays(submission),
                              "metrics": MetricRecord({"submission_seconds": seconds})})
        return Message(content, reply_to=msg)

    return app
