"""A Flower ClientApp around the engine's client round."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn

from ..federated.client import ClientState, run_client_round
from ..privacy import PrivacyAccountant
from ..privacy.accounting import DISCRETIZATION
from ..privacy.per_sample import LossFn
from ._protocol import decode_arrays, decode_instructions, encode_arrays

__all__ = ["ClientSetup", "PrivacyBudgetExceeded", "make_client_app"]

_STATE_KEY = "skfedriem"
# Refused without accounting, because the PLD of a larger mu0 is slow to build. mu0 = 10 is a noise
# multiplier B*sigma/(2C) of 0.1: one step at q = 0.01 already costs epsilon = 75 (fixed) or 23
# (Poisson) at delta = 1e-5 (tests/flower/test_client_app.py measures it with our accountant).
_MU0_CEILING = 10.0


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
    max_epsilon : float, optional
        The site's own privacy budget: before each round the client charges
        the steps it is asked to take to its own ledger (μ0 = 2C/(Bσ) from the
        round's clip and noise, its own rate q_i = B/m_i, only the rounds it
        takes part in) and refuses the round, with an error reply, if its ε at
        ``delta`` would exceed this. A guard against a server that sends too
        little noise; None trusts the server's calibration.
    delta : float, default=1e-5
        δ of the site's ledger.
    """

    name: str
    data: tuple[torch.Tensor, ...]
    module: nn.Module
    loss_fn: LossFn
    seed: np.random.SeedSequence
    optimizer: str | Callable = "sgd"
    reset_optimizer: bool = True
    max_epsilon: float | None = None
    delta: float = 1e-5


class PrivacyBudgetExceeded(RuntimeError):
    """A site refuses a round that would take it past its own ε budget."""


def _charge_site_ledger(client: ClientSetup, ledger: PrivacyAccountant, instructions) -> PrivacyAccountant:
    """The site's ledger after this round, or PrivacyBudgetExceeded (the round is then not run)."""
    m = int(client.data[0].shape[0])
    noiseless = instructions.noise_std <= 0 or not math.isfinite(instructions.clip)
    if noiseless:
        raise PrivacyBudgetExceeded(f"Site {client.name!r} (max-epsilon={client.max_epsilon:g}) refuses a round "
                                    f"without noise or clipping (noise_std={instructions.noise_std}, "
                                    f"clip={instructions.clip}).")
    mu0 = 2 * instructions.clip / (instructions.batch_size * instructions.noise_std)
    if mu0 > _MU0_CEILING:
        raise PrivacyBudgetExceeded(f"Site {client.name!r} refuses a round with per-step mu0 = {mu0:.3g} > "
                                    f"{_MU0_CEILING:g} (a noise multiplier below {1 / _MU0_CEILING:g}).")
    after = PrivacyAccountant()
    after.load_state_dict(ledger.state_dict())
    after.step(mu0=mu0,
               sample_rate=min(1.0, instructions.batch_size / m), num_steps=instructions.local_steps,
               sampling=instructions.sampling)
    eps = after.get_epsilon(client.delta, discretization=10 * DISCRETIZATION)  # coarser: still an upper bound
    if eps > client.max_epsilon:
        raise PrivacyBudgetExceeded(f"Site {client.name!r} refuses the round: its epsilon would reach {eps:.4g} "
                                    f"> max-epsilon={client.max_epsilon:g} at delta={client.delta:g}.")
    return after


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
    The client's random streams, optimiser state and (with ``max_epsilon``)
    privacy ledger are kept in the node's ``context.state`` between rounds;
    they are never part of a reply. A reply to ``train`` holds only
    Sub(θ_t, θ_i) and the time Sub took.
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
        ledger = PrivacyAccountant()
        if stored is not None and "ledger" in stored:
            ledger.load_state_dict(json.loads(stored["ledger"]))
        instructions = decode_instructions(msg.content["instructions"])
        if client.max_epsilon is not None:
            ledger = _charge_site_ledger(client, ledger, instructions)
        submission, seconds = run_client_round(
            client.module, decode_arrays(msg.content["theta"]), client.data, state, instructions,
            loss_fn=client.loss_fn, optimizer=client.optimizer, reset_optimizer=client.reset_optimizer,
        )
        context.state.config_records[_STATE_KEY] = ConfigRecord(
            {"state": state.to_bytes(), "ledger": json.dumps(ledger.state_dict())})
        content = RecordDict({"submission": encode_arrays(submission),
                              "metrics": MetricRecord({"submission_seconds": seconds})})
        return Message(content, reply_to=msg)

    return app
