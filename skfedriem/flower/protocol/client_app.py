"""A Flower ClientApp around the engine's client round, and what a deployed site refuses whatever the server sends.

A deployed site (:func:`~skfedriem.flower.deployment.apps.site_setup`) always has a
:class:`SiteGuard`: a persistent ledger over every round of every run on its
records and a budget on it, and a refusal of rounds no budget should take.
The in-process simulation (``backend="flower"``) runs its clients without one:
there the server is the caller's own trainer, which calibrates and charges the
run itself.
"""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from ...exceptions import InvalidInstructionsError, InvalidIterateError, PrivacyBudgetExceeded
from ...federated.client import ClientRecipe, ClientState
from ...federated import client_round
from ...federated.instructions import check_iterate, step_plan
from ...privacy import PrivacyAccountant, PrivacyBudget, get_accounting
from ...privacy.mechanisms.randomness import SecureRandomness
from ...privacy.accounting.subsampled_gaussian import DISCRETIZATION, MIN_DELTA
from ...privacy.mechanisms.step_plan import StepPlan
from .errors import FAILED, error_reply
from .records import decode_arrays, decode_instructions, encode_arrays
from .replies import ReplyCache
from .secure_site import DistributedNoise, answer_stage

__all__ = ["DEFAULT_MAX_EPSILON", "MAX_STEPS_PER_ROUND", "MU0_CEILING", "ClientSetup", "PrivacyBudgetExceeded",
           "SiteGuard", "make_client_app"]

_STATE_KEY = "skfedriem"
_OPTIMIZER_KEY = "skfedriem optimizer"
#: Rounds with a larger per-step mu0 are refused without accounting, because the PLD of a larger mu0 is slow to
#: build. mu0 = 10 is a noise multiplier B*sigma/(2C) of 0.1: one step at q = 0.01 already costs epsilon = 75
#: (fixed) or 23 (Poisson) at delta = 1e-5 (tests/flower/test_client_app.py measures it with our accountant).
MU0_CEILING = 10.0
#: Rounds asking for more local steps are refused without accounting (and without running them).
MAX_STEPS_PER_ROUND = 10_000
#: A deployed site's budget over every run on its records when its node configuration names none.
DEFAULT_MAX_EPSILON = 10.0

_log = logging.getLogger("skfedriem.flower.site")

# What a deployed site tells the server when it refuses a round: the kind of refusal, never the details
# (an error's text may quote a record's value or a label); the site's own log has them.
_REFUSALS = {
    InvalidIterateError: "refused: the server's theta is misshapen, not finite or off the model's manifold",
    InvalidInstructionsError: "refused: the round's instructions cannot be run as stated",
    PrivacyBudgetExceeded: "refused by the site's privacy ledger",
}
_FAILED = FAILED


@dataclass(frozen=True)
class SiteGuard:
    """A deployed site's own protection: its persistent ledger, its budget, and the rounds it refuses outright.

    Before a round runs, the site turns the server's instructions into the
    :class:`~skfedriem.privacy.StepPlan` its sampler and mechanism will run,
    and refuses the round (:class:`~skfedriem.exceptions.PrivacyBudgetExceeded`)
    when it adds no noise (unless ``allow_non_private``), when its per-step
    μ0 exceeds :data:`MU0_CEILING` or its steps :data:`MAX_STEPS_PER_ROUND`,
    or when charging that plan to the ledger would take it past
    ``max_epsilon``. The charge is written, atomically, before the reply leaves.

    Parameters
    ----------
    ledger_path : str
        The ledger file: it composes every round of every run on these
        records and survives restarts. Its folder also keeps the site's last
        replies (``<ledger_path>.replies``): a request repeated bit for bit (a
        resumed server re-sending the round it crashed in) gets the same reply,
        neither a fresh release nor a charge.
    max_epsilon : float, default=DEFAULT_MAX_EPSILON
        The site's budget over every round of every run, at ``delta``; ``inf``
        records without limit (rounds are still refused as above).
    delta : float, default=1e-5
    allow_non_private : bool, default=False
        Accept rounds without noise (test benches only): each is charged as
        infinite loss, so it needs ``max_epsilon=inf``.
    accounting : str, default="rfedproj"
        The registered accounting method that composes the site's rounds on
        its ledger (one that composes runs:
        :attr:`~skfedriem.privacy.RunAccounting.composes_runs`).

    distributed : DistributedNoise, optional
        The site's consent to rounds of distributed noise under secure
        aggregation (node setting ``noise = "distributed"``); None (default):
        it takes rounds of local noise only, whatever the server sends.

    Each charge records what its plan protects (``StepPlan.unit``, in every ledger entry): a
    subject-level site's ledger and ``max_epsilon`` are per subject, and its
    ledger refuses a subject-level round while it holds a record-level round
    on these records (:meth:`~skfedriem.privacy.PrivacyBudget.charge`).

    Every round is charged to three ledgers: ``ledger_path`` composes ε_local,
    what each release guarantees by its own noise against any server;
    :attr:`central_ledger_path` ε_central, what the round guarantees when the
    server learns only the sum; :attr:`deviating_ledger_path` what it
    guarantees against a server that deviates from the protocol with t
    colluding sites (a round of local noise: the same release in all three).
    ``max_epsilon`` bounds ε_local, unless the operator declares the server
    semi-honest for this site (``DistributedNoise.semi_honest_server``: then
    it bounds ε_central) or trusts it only with t colluders
    (``DistributedNoise.deviating_server``: the deviating certificate).
    """

    ledger_path: str
    max_epsilon: float = DEFAULT_MAX_EPSILON
    delta: float = 1e-5
    allow_non_private: bool = False
    accounting: str = "rfedproj"
    distributed: DistributedNoise | None = None

    def __post_init__(self) -> None:
        if not self.max_epsilon > 0:
            raise ValueError(f"max-epsilon must be > 0 (inf: no limit). Got {self.max_epsilon!r}.")
        if not MIN_DELTA <= self.delta < 1:
            raise ValueError(f"delta must be in [{MIN_DELTA:g}, 1). Got {self.delta!r}.")
        if not get_accounting(self.accounting).composes_runs:
            raise ValueError(f"accounting={self.accounting!r} certifies one run, and a site's ledger composes every "
                             "round of every run on its records: use an accounting that composes runs "
                             "(accounting='rfedproj').")
        if self.allow_non_private and math.isfinite(self.max_epsilon):
            raise ValueError("non-private rounds are charged as infinite loss, which no finite budget admits: "
                             f"set max-epsilon=inf with non-private=true. Got max-epsilon={self.max_epsilon!r}.")

    @property
    def central_ledger_path(self) -> str:
        """The ε_central ledger's file: ``ledger_path`` with ``.central`` before its suffix."""
        path = Path(self.ledger_path)
        return str(path.with_name(f"{path.stem}.central{path.suffix or '.json'}"))

    @property
    def deviating_ledger_path(self) -> str:
        """The deviating server's ledger's file: ``ledger_path`` with ``.deviating`` before its suffix."""
        path = Path(self.ledger_path)
        return str(path.with_name(f"{path.stem}.deviating{path.suffix or '.json'}"))

    @property
    def bounded(self) -> str:
        """The certificate ``max_epsilon`` bounds: ``"local"``, or with distributed noise the one the operator's
        setting names (:attr:`DistributedNoise.bounded <skfedriem.flower.protocol.secure_site.DistributedNoise.bounded>`)."""
        return "local" if self.distributed is None else self.distributed.bounded

    def ledger(self) -> PrivacyBudget:
        """The site's ε_local ledger, over every round charged to it (``max_epsilon`` at ``delta`` when it is
        :attr:`bounded`)."""
        return self._budget(self.ledger_path, self.bounded == "local")

    def central_ledger(self) -> PrivacyBudget:
        """The site's ε_central ledger (``max_epsilon`` when it is :attr:`bounded`)."""
        return self._budget(self._started_from_local(self.central_ledger_path), self.bounded == "central")

    def deviating_ledger(self) -> PrivacyBudget:
        """The ledger against a server that deviates with t colluding sites (``max_epsilon`` when it is
        :attr:`bounded`)."""
        return self._budget(self._started_from_local(self.deviating_ledger_path), self.bounded == "deviating")

    def _started_from_local(self, path: str) -> str:
        """``path``, started from the ε_local ledger when rounds were charged before it existed (each at its ε_local,
        at least what it costs against any server that leaves one of its honest shares: local noise's ε, or a
        distributed round's own share)."""
        if not Path(path).exists() and Path(self.ledger_path).exists():
            shutil.copyfile(self.ledger_path, path)
        return path

    def _charges(self, plan: StepPlan) -> list[tuple[Callable[[], PrivacyBudget], Callable[[], PrivacyAccountant]]]:
        """Every ledger (opened when called) with what ``plan`` charges it, the bounded one first (a refusal leaves
        no trace)."""
        charges = {"local": (self.ledger, plan.local_release), "central": (self.central_ledger, plan.release),
                   "deviating": (self.deviating_ledger, plan.deviating_release)}
        return [charges[trust] for trust in sorted(charges, key=lambda trust: trust != self.bounded)]

    def _budget(self, path: str, bounded: bool) -> PrivacyBudget:
        return PrivacyBudget(self.max_epsilon if bounded else math.inf, self.delta, path=path,
                             accounting=self.accounting,
                             discretization=10 * DISCRETIZATION)  # coarser: still an upper bound

    def replies(self) -> ReplyCache:
        """The site's last replies, by request."""
        return ReplyCache(self.ledger_path + ".replies")

    def charges(self) -> set[str]:
        """The labels of every round charged to the ledger (a cached reply is served again only under one)."""
        return {str(fit["label"]) for fit in self.ledger().fits}

    def check_budget(self, plan: StepPlan) -> None:
        """Refuse now what :meth:`charge` would refuse; nothing is recorded."""
        self._refuse_outright(plan)
        enforced, release = self._charges(plan)[0]
        enforced().check(release(), label="a round", steps_per_round=plan.local_steps, n_rounds=1)

    def charge(self, plan: StepPlan, *, label: str) -> None:
        """Refuse a round no budget should take, else charge ``plan`` to every ledger (or refuse it).

        The bounded ledger is charged first: a refusal leaves no trace in any.
        """
        self._refuse_outright(plan)
        # every ledger opened (a missing one started from ε_local's) before any is charged
        opened = [(ledger(), release) for ledger, release in self._charges(plan)]
        for ledger, release in opened:
            ledger.charge(release(), label=label, steps_per_round=plan.local_steps, n_rounds=1)

    def _refuse_outright(self, plan: StepPlan) -> None:
        if plan.mechanism.secure_sum and self.distributed is None:
            raise InvalidInstructionsError("The site takes no round of distributed noise: its node setting noise "
                                           "is 'local'.")
        if plan.mechanism.secure_sum:
            self.distributed.check(plan.encoding)
        if not plan.private and not self.allow_non_private:
            raise PrivacyBudgetExceeded(f"The site refuses a round without noise (noise_std={plan.noise_std}).")
        if plan.mu0 > MU0_CEILING and plan.private:
            raise PrivacyBudgetExceeded(f"The site refuses a round with per-step mu0 = {plan.mu0:.3g} > "
                                        f"{MU0_CEILING:g} (a noise multiplier below {1 / MU0_CEILING:g}).")
        if plan.local_steps > MAX_STEPS_PER_ROUND:
            raise PrivacyBudgetExceeded(f"The site refuses a round of {plan.local_steps} local steps "
                                        f"(at most {MAX_STEPS_PER_ROUND}).")


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
        Seeds the client's batches and noise (reproducible, and replayable by
        anyone who knows it): the simulation backend passes the in-process
        backend's seeds. None (default): every run starts from 128 bits of
        fresh OS entropy, so no two runs share noise. It never leaves the client.
    secure_mode : bool, default=False
        Batches and noise from the OS's cryptographically secure generator
        (``seed`` must then be None).
    guard : SiteGuard, optional
        A deployed site's ledger and budget. None only in the in-process
        simulation, whose server is the caller's own trainer.
    timings : bool, default=False
        Send the time Sub took with every submission (it times work done on the
        records: not private).
    scope : str, default=""
        What defines the model a request runs on besides θ and the
        instructions (a deployed site's kind and estimator settings): part of
        the key under which its replies are kept, so that a reply is served
        again only to the same request on the same model.
    input_shape : tuple of int, optional
        The shape of one of its records as the estimator takes them, which it
        reports (None: ``data[0]``'s; give it when ``data`` holds features
        computed from the records, e.g. by a model's fixed feature map).
    """

    name: str
    data: tuple[torch.Tensor, ...]
    recipe: ClientRecipe
    seed: np.random.SeedSequence | None = None
    secure_mode: bool = False
    guard: SiteGuard | None = None
    timings: bool = False
    scope: str = ""
    input_shape: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.secure_mode and self.seed is not None:
            raise ValueError(f"Site {self.name!r}: secure-mode cannot be seeded; remove the seed.")

    @property
    def n_records(self) -> int:
        """m_i: what the site's sampler draws from (records, subjects, or k per subject with
        ``records_per_subject``)."""
        return self.recipe.n_units(self.data)


def _refusal(msg: Message, error: Exception, deployed: bool) -> Message:
    """The error reply: for a deployed site, the kind of refusal only (its log has the details)."""
    reason = next((text for kind, text in _REFUSALS.items() if isinstance(error, kind)), _FAILED)
    if not deployed:  # the in-process simulation's server is the caller: tell it everything
        reason = f"{type(error).__name__}: {error}"
    return error_reply(msg, reason)


def _round_state(client: ClientSetup, context: Context) -> ClientState:
    """The client's state for a round: a seeded client's stream continues from the node's context; any other
    client draws fresh OS entropy for every message, so that no lost or stale context can repeat a draw."""
    stored = context.state.config_records.get(_STATE_KEY)
    if client.seed is not None:
        return ClientState.from_bytes(stored["state"]) if stored is not None else ClientState.fresh(client.seed)
    state = ClientState.fresh(secure_mode=client.secure_mode)
    kept = context.state.config_records.get(_OPTIMIZER_KEY)
    if kept is not None:
        state.optimizer_state = ClientState.from_bytes(kept["state"]).optimizer_state
    return state


def _keep_state(client: ClientSetup, context: Context, state: ClientState) -> None:
    """What the next round needs in the node's context: a seeded client's stream; otherwise only the optimiser's
    kept state, never the secret randomness (it would travel with the context)."""
    if client.seed is not None:
        context.state.config_records[_STATE_KEY] = ConfigRecord({"state": state.to_bytes()})
    elif state.optimizer_state is not None:
        kept = ClientState(SecureRandomness(), state.optimizer_state)  # serialises as a kind, no state
        context.state.config_records[_OPTIMIZER_KEY] = ConfigRecord({"state": kept.to_bytes()})


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
    (:func:`~skfedriem.federated.client.check_iterate`) and the instructions
    turned into the steps the client will run
    (:func:`~skfedriem.federated.client.step_plan`); a request identical to one
    already answered, and charged to this ledger, gets that answer again;
    otherwise the site's guard refuses the round or charges its plan to the
    ledger file, the private local steps run, the reply is kept, and it leaves.
    An unseeded client (every deployed site) draws its batches and noise from
    fresh OS entropy for every message; only its optimiser's kept state, if
    any, waits in the node's ``context.state`` for the next round. A seeded
    client (the in-process simulation) keeps its stream there. None of it is
    ever part of a reply, which holds only Sub(θ_t, θ_i) (and, where the site
    opts in, the time Sub took). Any failure is answered with an error reply
    that, from a deployed site, names only the kind of refusal.
    """
    app = ClientApp()

    def answer(msg: Message, context: Context, handle: Callable[[ClientSetup], RecordDict]) -> Message:
        deployed = True
        try:
            client = setup(context)
            deployed = client.guard is not None
            return Message(handle(client), reply_to=msg)
        except Exception as error:  # noqa: BLE001 - every failure becomes an error reply, its details stay here
            _log.warning("%s message %s refused: %s: %s", msg.metadata.message_type, msg.metadata.message_id,
                         type(error).__name__, error, exc_info=not isinstance(error, tuple(_REFUSALS)))
            return _refusal(msg, error, deployed)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        def describe(client: ClientSetup) -> RecordDict:
            return RecordDict({"client": ConfigRecord({
                "name": str(client.name), "n_records": client.n_records,
                "input_shape": [int(d) for d in (client.input_shape or client.data[0].shape[1:])]})})

        return answer(msg, context, describe)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        def take_round(client: ClientSetup) -> RecordDict:
            if "secagg" in msg.content.config_records:
                return answer_stage(client, msg)
            theta = check_iterate(client.recipe.module, decode_arrays(msg.content["theta"]))
            instructions = decode_instructions(msg.content["instructions"])
            plan = step_plan(instructions, client.n_records, client.recipe.module, client.recipe.unit)
            if plan.mechanism.secure_sum:  # its release carries a share of the noise: it never leaves unmasked
                raise InvalidInstructionsError("A round of distributed noise runs only under secure aggregation.")
            guard = client.guard
            replies = None if guard is None else guard.replies()
            key = None if replies is None else ReplyCache.key(theta, instructions, client.scope)
            cached = None if replies is None else replies.get(key, charged=guard.charges())
            if cached is not None:
                submission, seconds = cached
            else:
                label = f"run {msg.metadata.run_id} round {msg.metadata.group_id} request {key}"
                if guard is not None:
                    guard.charge(plan, label=label)
                state = _round_state(client, context)
                [(submission, seconds)] = client_round.run_round(client.recipe, theta, [client.data], [state], instructions)
                _keep_state(client, context, state)
                if replies is not None:
                    replies.put(key, submission, seconds, charge=label)
            content = RecordDict({"submission": encode_arrays(submission)})
            if client.timings:
                content["metrics"] = MetricRecord({"submission_seconds": seconds})
            return content

        return answer(msg, context, take_round)

    return app
