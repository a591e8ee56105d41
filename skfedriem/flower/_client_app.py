"""A Flower ClientApp around the engine's client round, with the site's own persistent privacy ledger."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from ..exceptions import PrivacyBudgetExceeded
from ..federated.client import ClientRecipe, ClientState, RoundInstructions, check_iterate
from ..privacy import PrivacyAccountant, PrivacyBudget
from ..privacy.accounting import DISCRETIZATION
from ._protocol import decode_arrays, decode_instructions, encode_arrays
from ._replies import ReplyCache

__all__ = ["ClientSetup", "PrivacyBudgetExceeded", "make_client_app"]

_STATE_KEY = "skfedriem"
# Refused without accounting, because the PLD of a larger mu0 is slow to build. mu0 = 10 is a noise
# multiplier B*sigma/(2C) of 0.1: one step at q = 0.01 already costs epsilon = 75 (fixed) or 23
# (Poisson) at delta = 1e-5 (tests/flower/test_client_app.py measures it with our accountant).
_MU0_CEILING = 10.0


@dataclass
class ClientSetup:
    """Everything one client needs, built where the client runs.

    Parameters
    ----------
    name : str
        The client's name (unique in the federation).
    data : tuple of Tensor
        Its records ``(inputs, *targets)``.
    recipe : ClientRecipe
        The model's working copy (overwritten with θ_t), loss and optimiser.
    seed : numpy.random.SeedSequence, optional
        Seeds the client's batches and noise for this run (reproducible, and
        replayable by anyone who knows it; the simulation backend passes the
        in-process backend's seeds). None (default): every run starts from
        128 bits of fresh OS entropy, so no two runs share noise. It never
        leaves the client.
    secure_mode : bool, default=False
        Batches and noise from the OS's cryptographically secure generator
        (``seed`` must then be None).
    max_epsilon : float, optional
        The site's own privacy budget over every round of every run on these
        records: before each round the client charges the steps it is asked to
        take (μ0 = 2C/(Bσ) from the round's clip and noise, its own rate
        q_i = B/m_i) to its ledger file and refuses the round, with an error
        reply, if the composition at ``delta`` would exceed this. A guard
        against a server that sends too little noise, or replays rounds; None
        trusts the server's calibration.
    delta : float, default=1e-5
        δ of the site's ledger.
    ledger_path : str, optional
        The site's ledger file (needed with ``max_epsilon``): it persists across
        runs and restarts, and is written, atomically, before the reply leaves.
        Its folder also keeps the site's last replies (``<ledger_path>.replies``):
        a request repeated bit for bit (a resumed server re-sending the round
        it crashed in) gets the same reply, neither a fresh release nor a charge.
    """

    name: str
    data: tuple[torch.Tensor, ...]
    recipe: ClientRecipe
    seed: np.random.SeedSequence | None = None
    secure_mode: bool = False
    max_epsilon: float | None = None
    delta: float = 1e-5
    ledger_path: str | None = None

    def __post_init__(self) -> None:
        if self.max_epsilon is not None and self.ledger_path is None:
            raise ValueError(f"Site {self.name!r}: max-epsilon needs a ledger-path, a file the site owns. A budget "
                             "kept in memory would start again from zero with every run and every restart.")
        if self.secure_mode and self.seed is not None:
            raise ValueError(f"Site {self.name!r}: secure-mode cannot be seeded; remove the seed.")

    def replies(self) -> ReplyCache | None:
        """The site's last replies (None without a ledger file)."""
        return None if self.ledger_path is None else ReplyCache(self.ledger_path + ".replies")

    def ledger(self) -> PrivacyBudget:
        """The site's persistent ledger (max_epsilon at delta, composed over every round charged to it)."""
        return PrivacyBudget(self.max_epsilon, self.delta, path=self.ledger_path,
                             discretization=10 * DISCRETIZATION)  # coarser: still an upper bound


def _round_release(client: ClientSetup, instructions: RoundInstructions) -> PrivacyAccountant:
    """The steps a round asks of this site, or PrivacyBudgetExceeded for a round no budget should take."""
    noiseless = instructions.noise_std <= 0 or not math.isfinite(instructions.clip)
    if noiseless:
        raise PrivacyBudgetExceeded(f"Site {client.name!r} (max-epsilon={client.max_epsilon:g}) refuses a round "
                                    f"without noise or clipping (noise_std={instructions.noise_std}, "
                                    f"clip={instructions.clip}).")
    mu0 = 2 * instructions.clip / (instructions.batch_size * instructions.noise_std)
    if mu0 > _MU0_CEILING:
        raise PrivacyBudgetExceeded(f"Site {client.name!r} refuses a round with per-step mu0 = {mu0:.3g} > "
                                    f"{_MU0_CEILING:g} (a noise multiplier below {1 / _MU0_CEILING:g}).")
    release = PrivacyAccountant()
    release.step(mu0=mu0, sample_rate=min(1.0, instructions.batch_size / int(client.data[0].shape[0])),
                 num_steps=instructions.local_steps, sampling=instructions.sampling)
    return release


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
    A ``train`` message is handled in this order: θ_t is checked
    (:func:`~skfedriem.federated.client.check_iterate`; an error reply if it is
    off the manifold, not finite or misshapen); a request identical to one
    already answered gets that answer again; otherwise the round is charged
    to the site's ledger file (with ``max_epsilon``; an error reply if
    refused), the private local steps run, the reply is kept, and it leaves. The client's secret
    randomness starts fresh at each run's first round and, with its optimiser
    state, is kept in the node's ``context.state`` for the run's next rounds;
    none of it is ever part of a reply, which holds only Sub(θ_t, θ_i) and the
    time Sub took (a function of θ_t and θ_i only).
    """
    app = ClientApp()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        client = setup(context)
        info = ConfigRecord({"name": str(client.name), "n_records": int(client.data[0].shape[0]),
                             "input_shape": [int(d) for d in client.data[0].shape[1:]]})
        return Message(RecordDict({"client": info}), reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        client = setup(context)
        theta = check_iterate(client.recipe.module, decode_arrays(msg.content["theta"]))
        instructions = decode_instructions(msg.content["instructions"])
        replies = client.replies()
        key = None if replies is None else ReplyCache.key(theta, instructions)
        cached = None if replies is None else replies.get(key)
        if cached is not None:
            submission, seconds = cached
        else:
            if client.max_epsilon is not None:
                client.ledger().charge(_round_release(client, instructions),
                                       label=f"run {msg.metadata.run_id} round {msg.metadata.group_id}")
            stored = context.state.config_records.get(_STATE_KEY)
            state = (ClientState.from_bytes(stored["state"]) if stored is not None
                     else ClientState.fresh(client.seed, secure_mode=client.secure_mode))
            submission, seconds = client.recipe.run_round(theta, client.data, state, instructions)
            context.state.config_records[_STATE_KEY] = ConfigRecord({"state": state.to_bytes()})
            if replies is not None:
                replies.put(key, submission, seconds)
        content = RecordDict({"submission": encode_arrays(submission),
                              "metrics": MetricRecord({"submission_seconds": seconds})})
        return Message(content, reply_to=msg)

    return app
