"""The federated round loop, for any module with manifold-tagged parameters.

What each round sends and costs is planned and priced by
:class:`~skfedriem.federated.pricing.RoundPricing`; what the run charges a
privacy budget, by :class:`~skfedriem.federated.charging.RunCharge`; the
adaptive clip's schedule is :mod:`~skfedriem.federated.adaptive_clip`'s and a
resume's check :mod:`~skfedriem.federated.resume`'s. The trainer serves the
rounds. The loop knows nothing of PCA or SPDNet, of Flower or of any
accounting method by name: it needs a torch module, a per-record loss, the
clients' records (or a transport to them) and a registered accounting method.
A new model, manifold, aggregation rule, accounting method or transport plugs
in without touching it.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from .._utils.backends import BACKENDS
from .._utils.user_warnings import warn_user
from ..exceptions import OneByOneClientsWarning
from ..privacy import PrivacyAccountant, PrivacyBudget
from ..privacy.per_record.per_sample import LossFn, trainable_parameters
from ..privacy.mechanisms.units import unit_count
from .adaptive_clip import clip_after
from .charging import RunCharge
from .checkpoint import TrainingState
from .client import ClientRecipe
from .devices import resolve_device
from .lockstep import lockstep_eligible, stacking_obstacle
from .optimizers import resolve_optimizer
from .parallel import effective_n_jobs, thread_budget
from .noise_placement import check_noise_placement
from .plan import PrivacyPlan, check_client_sizes, distributed_clients, warn_if_noise_swamps
from .pricing import RoundPricing
from .progress import round_progress
from .resume import check_resume, remaining_from
from .settings import FederationSettings
from .transport import Transport

__all__ = ["FederatedTrainer"]

_NAMED_ONE_BY_ONE: set[str] = set()


def _name_one_by_one(module: nn.Module) -> None:
    """Warn, once per process and reason, that ``lockstep=True`` cannot stack this model's clients, and why."""
    obstacle = stacking_obstacle(module)
    if obstacle is None or obstacle in _NAMED_ONE_BY_ONE:
        return
    _NAMED_ONE_BY_ONE.add(obstacle)
    warn_user(f"lockstep=True, but {obstacle}: its simulated clients run one by one (the same fit and ε, slower).",
              OneByOneClientsWarning)


class FederatedTrainer:
    """Private federated training of a torch module (DP-RFedProj, Pautrel et al. 2026).

    Each round the server draws ``clients_per_round`` of the n clients
    uniformly without replacement and broadcasts θ_t; each selected client
    checks θ_t, runs its τ_i private local steps (fresh uniform batches,
    per-sample tangent gradients clipped over all blocks, ambient Gaussian
    noise then the tangent projection, any optimiser, projection onto the
    manifold) and submits Sub(θ_t, θ_i); the server averages the submissions
    and sets θ_{t+1} = Out(θ_t, Δ̄), per parameter block.

    Parameters
    ----------
    module : torch.nn.Module
        Its parameters are the initial θ_0 (trained in place); tag manifold
        blocks with :class:`~skfedriem.manifolds.ManifoldParameter`.
    loss_fn : callable
        ``loss_fn(module(batch[0]), *batch[1:])`` -> per-record losses (B,).
    settings : FederationSettings
        The run's public settings (rounds, batches, privacy target, rule,
        optimiser, backend...).
    seed_sequence : numpy.random.SeedSequence, optional
        The server's public randomness (client selection). Default: OS entropy.
    client_seed : numpy.random.SeedSequence, optional
        Seeds the clients' secret randomness (batches and noise): client i
        gets its i-th spawned child. Reproducible, and replayable by anyone
        who knows it. None (default): every client draws 128 bits of fresh OS
        entropy, never derived from ``seed_sequence``. Refused with
        ``settings.secure_mode``.
    privacy_budget : PrivacyBudget, optional
        Charged with the planned run before the first round; a run that would
        exceed it is refused (:class:`~skfedriem.exceptions.PrivacyBudgetExceeded`).
    run_name : str, optional
        How the run is named in ``privacy_budget`` (default: the module's class).
    prior : TrainingState, optional
        An earlier run on the same records to continue (warm start): its
        ledger is composed into every ε this run reports, its history is
        kept and the round numbers go on from it. The module's parameters
        are the starting point as usual.
    monitor : callable, optional
        ``monitor(module) -> dict`` called after every round on the new θ; its
        values go into :attr:`history_`. It runs at the server, so it must only
        use data the server holds.
    record_transcript : bool, default=False
        Keep what the server sees (θ_t, S_t, Δ_i) in :attr:`transcript_`.
    plan : PrivacyPlan, optional
        The server's plan of ``settings`` for this model and the clients it
        will serve, as :func:`~skfedriem.federated.plan_run` made it (a planner
        that needed σ to choose the schedule passes its plan on, so the run is
        planned once). Used as it is when its ``basis`` is this run's
        (:func:`~skfedriem.federated.plan_basis`); a ValueError otherwise.
        None: the trainer plans when it first needs to, once per set of clients.

    Attributes
    ----------
    pricing : RoundPricing
        The run's plan and the price of its rounds.
    charge : RunCharge
        What the run charges ``privacy_budget``, once (a fit that releases
        something before its rounds calls :meth:`RunCharge.charge_plan` first).
    plan_ : PrivacyPlan
    accountant_ : PrivacyAccountant
    history_ : list of dict
        Per round, post-processing of what the server sees: ``round``,
        ``epsilon`` (certified so far, never above the run's final
        ``epsilon_``), ``lr``, ``clients`` (selected), ``replied`` (whose
        submission arrived), ``aggregation_seconds`` (server time of the mean
        and Out) and the monitor's values. With ``client_timings``:
        ``submission_seconds`` (total client time of Sub) and ``round_seconds``
        (wall time of the round, clients included).
    transcript_ : list of dict or None
        Per round: θ_t, the clients that replied and their stacked submissions.

    Examples
    --------
    >>> import torch
    >>> from skfedriem.federated import FederationSettings
    >>> from skfedriem.models import PCAProjector
    >>> X = torch.randn(60, 4, dtype=torch.float64) / 3
    >>> trainer = FederatedTrainer(PCAProjector(4, 1, "grassmann"), lambda losses: losses,
    ...                            FederationSettings(n_rounds=3, batch_size=10, local_steps=2, eps=4.0))
    >>> trainer.fit([(X[:30],), (X[30:],)]).epsilon_ <= 4.0
    True
    """

    def __init__(
        self,
        module: nn.Module,
        loss_fn: LossFn,
        settings: FederationSettings,
        *,
        seed_sequence: np.random.SeedSequence | None = None,
        client_seed: np.random.SeedSequence | None = None,
        privacy_budget: PrivacyBudget | None = None,
        run_name: str | None = None,
        prior: TrainingState | None = None,
        monitor: Callable[[nn.Module], dict] | None = None,
        record_transcript: bool = False,
        plan: PrivacyPlan | None = None,
    ) -> None:
        if not isinstance(settings, FederationSettings):
            raise TypeError(f"FederatedTrainer takes a FederationSettings. Got {type(settings).__name__} instead.")
        if settings.secure_mode and client_seed is not None:
            raise ValueError("secure_mode=True draws the clients' batches and noise from the OS's secure generator; "
                             "it cannot be seeded. Got a client_seed.")
        self.loss_fn = loss_fn
        self.pricing = RoundPricing(module, settings, plan)
        self.accounting, self.aggregation = self.pricing.accounting, self.pricing.aggregation
        self.seed_sequence = seed_sequence if seed_sequence is not None else np.random.SeedSequence()
        self.client_seed = client_seed
        self.privacy_budget = privacy_budget
        self.run_name = run_name
        self.prior = prior
        self.monitor = monitor
        self.record_transcript = record_transcript
        self.charge = RunCharge(self.pricing, privacy_budget, run_name or type(module).__name__, prior)

    def fit(self, clients: Sequence[tuple[torch.Tensor, ...]], client_names: Sequence | None = None):
        """Run the T rounds on the clients' records, on ``settings.backend``.

        Parameters
        ----------
        clients : sequence of tuple of torch.Tensor
            Client i's records ``(inputs, *targets)``, records along dim 0
            (with ``settings.privacy_unit="subject"``, ``(inputs, *targets,
            subjects)``: each record's subject code, 0 to n_i − 1). Only client
            i's local steps ever touch them.
        client_names : sequence, optional
            Labels used in messages (default: 0 .. n−1).

        Returns
        -------
        self
        """
        names = list(client_names) if client_names is not None else list(range(len(clients)))
        self.check(clients, names)
        with thread_budget():
            run = BACKENDS.get(self.settings.backend)
            run(self, clients, names, self.client_seeds(len(clients)), self.seed_sequence)
        return self

    def check(self, clients: Sequence[tuple[torch.Tensor, ...]], client_names: list) -> None:
        """Refuse, before anything runs or is charged, a run the server or its backend would reject.

        Parameters
        ----------
        clients : sequence of tuple of torch.Tensor
            As in :meth:`fit`.
        client_names : list
            Labels used in messages.
        """
        # records, subjects, or k per subject
        sizes = [unit_count(c, self.settings.unit) for c in clients]
        # fail before any backend starts (tens of seconds for Flower and Ray) on what the server would reject
        self.clients_per_round(len(clients))
        check_client_sizes(sizes, client_names, self.settings.unit)
        BACKENDS.get(self.settings.backend)
        check_noise_placement(self.settings, "The run")
        if self.settings.backend != "local" and effective_n_jobs(self.settings.n_jobs) != 1:
            raise ValueError(f"n_jobs runs clients in worker processes of backend='local'; "
                             f"backend={self.settings.backend!r} places its clients itself. "
                             f"Got n_jobs={self.settings.n_jobs!r}; leave it None.")
        device = resolve_device(self.settings.device)
        if self.settings.backend != "local" and device.type != "cpu":
            raise ValueError(f"The 'device' parameter places the clients of backend='local'; "
                             f"backend={self.settings.backend!r} places its clients itself. "
                             f"Got device={self.settings.device!r}; leave it 'cpu'.")

    def client_recipe(self, *, simulated: bool = False) -> ClientRecipe:
        """What every client needs of this run's model: a working copy, the loss and the optimiser.

        Parameters
        ----------
        simulated : bool, default=False
            For clients simulated on this machine (``backend="local"``): the
            copy is on ``settings.device``, and the clients run in lockstep when
            ``settings.lockstep`` asks for it and
            :func:`~skfedriem.federated.lockstep.lockstep_eligible` allows it.
        """
        optimizer = resolve_optimizer(self.settings.optimizer)
        module = copy.deepcopy(self.module)
        lockstep = False
        if simulated:
            module = module.to(resolve_device(self.settings.device))
            lockstep = self.settings.lockstep and lockstep_eligible(module, optimizer, self.settings.sampling,
                                                                    self.settings.unit)
            if self.settings.lockstep and not lockstep:
                _name_one_by_one(module)
        return ClientRecipe(module, self.loss_fn, optimizer, self.settings.reset_optimizer, lockstep,
                            self.settings.unit)

    def client_seeds(self, n_clients: int) -> list[np.random.SeedSequence | None]:
        """Each client's secret seed: children of ``client_seed``, else fresh OS entropy (None in secure mode)."""
        if self.settings.secure_mode:
            return [None] * n_clients
        if self.client_seed is not None:
            return self.client_seed.spawn(n_clients)
        return [np.random.SeedSequence() for _ in range(n_clients)]

    def clients_per_round(self, n_clients: int) -> int:
        """k, the clients each round selects among ``n_clients`` (all of them by default); ValueError out of range."""
        wanted = self.settings.clients_per_round
        k = n_clients if wanted is None else wanted
        if not 1 <= k <= n_clients:
            raise ValueError(f"The 'clients_per_round' parameter must be in [1, {n_clients}]. Got {wanted!r} instead.")
        return k

    @property
    def module(self) -> nn.Module:
        """The model trained in place (read-only: the run is planned and priced for it, and a replaced model would
        make the priced rounds another model's)."""
        return self.pricing.module

    @property
    def settings(self) -> FederationSettings:
        """The run's settings (read-only: the rounds are planned and priced from them)."""
        return self.pricing.settings

    @property
    def plan_(self) -> PrivacyPlan:
        """The plan of the clients this trainer planned, priced or served."""
        if self.pricing.plan_ is None:
            raise AttributeError("This FederatedTrainer has planned no run yet: plan_ is set by planning its "
                                 "release (pricing.planned_release, charge.charge_plan) or by the run.")
        return self.pricing.plan_

    def serve(self, transport: Transport, client_sizes: list[int], client_names: list,
              server_seq: np.random.SeedSequence, *, resume: TrainingState | None = None,
              on_round: Callable[[TrainingState], None] | None = None) -> FederatedTrainer:
        """The server's side of the T rounds, over any transport to the clients.

        Parameters
        ----------
        transport : Transport
            ``transport.run_round(t, selected, theta, instructions)`` runs the
            selected clients (indices into ``client_sizes``) from θ_t and returns
            ``{client: (submission, submission_seconds)}`` for those that replied.
        client_sizes : list of int
            m_i (public under substitution neighbours), for planning.
        client_names : list
        server_seq : numpy.random.SeedSequence
            Draws the clients of each round (public randomness).
        resume : TrainingState, optional
            A checkpoint of this same run (from ``on_round``) to continue from.
        on_round : callable, optional
            ``on_round(state)`` with the run's :class:`TrainingState` when a
            round starts (charged, not yet run) and when it ends: a server
            writes its checkpoints there.

        Returns
        -------
        self

        Notes
        -----
        With a ``privacy_budget``, the planned run is charged to it before the
        first round (and refused, before any client is contacted, when it
        would exceed it). Each round is charged to the ledger when it starts,
        before any client is contacted: a round counts whether or not every
        selected client replied, and a round cut short by a crash counts too.
        Resuming from a checkpoint taken at a round's start sends that round
        again, bit for bit, without charging it again: a client that already
        answered it answers the same (a Flower site keeps its last 256 replies),
        and one that never got it takes its steps once. The round's update
        averages the submissions that arrived (θ is unchanged when none did);
        ``history_`` records who replied.
        """
        k = self.clients_per_round(len(client_sizes))
        start = self._start(client_sizes, client_names, k, resume)
        server_rng = np.random.default_rng(server_seq)
        if resume is not None:
            server_rng.bit_generator.state = resume.server_rng
        clip = self._next_clip(self.history_[self._round_offset + start - 1] if start > 0 else None)
        for t in round_progress(range(start, self.settings.n_rounds), self.settings.verbose):
            resent = resume if resume is not None and resume.started and t == start else None
            clip = self._serve_round(t, transport, server_rng, k, clip, resent, on_round)
        if self.history_ and start < self.settings.n_rounds:
            self.history_[-1]["epsilon"] = self.epsilon_  # the certified value itself, on the fine grid
        return self

    def _start(self, client_sizes: list[int], client_names: list, k: int, resume: TrainingState | None) -> int:
        """Plan, check a resume, charge the budget and set θ, the ledger and the history; the first round to run."""
        warn_if_noise_swamps(self.pricing.plan(client_sizes, client_names), k)
        start, prior = 0, self.prior if self.prior is not None else TrainingState.empty()
        if resume is None:
            self.charge.charge_rounds()
        else:
            check_resume(resume, self.pricing.record())
            start, prior = resume.round, resume
            with torch.no_grad():
                for name, p in trainable_parameters(self.module).items():
                    p.copy_(resume.theta[name])
        self.accountant_ = PrivacyAccountant.from_state_dict(prior.ledger)
        # what each client's own release guarantees alone; an earlier run of local noise guarantees its ε alone
        self.local_accountant_ = PrivacyAccountant.from_state_dict(prior.local_ledger or prior.ledger)
        # against a server that deviates with t colluders; a checkpoint without one: ε_local's, which bounds it
        self.deviating_accountant_ = PrivacyAccountant.from_state_dict(prior.deviating_ledger or prior.local_ledger
                                                                       or prior.ledger)
        self._placement = self.plan_.placement
        # the certificate counts the shares the plan sized for K clients a round, t colluders and d more dropouts
        self._placement.check_shares(self.plan_.encoding, k, *distributed_clients(len(client_sizes),
                                                                                  self.settings)[1:])
        self._strategy = self._placement.server_strategy(self.module, self.aggregation, self.settings.optimizer,
                                                         self.plan_.client_batch_size)
        self._epsilon_so_far = self.pricing.running_epsilon(self.accountant_)
        # ε of the ledger once every remaining round is charged, on the fine grid (what epsilon_ will be): every ε
        # in history_ is at most it, so the curve never crosses the final figure
        remaining = PrivacyAccountant.from_state_dict(self.accountant_.state_dict())
        remaining.extend(self.pricing.rounds_release(remaining_from(start, resume)))
        self._final_epsilon = self.pricing.epsilon(remaining)
        self.history_: list[dict] = [dict(h) for h in prior.history]
        self._round_offset = len(self.history_) - start
        self.transcript_: list[dict] | None = [] if self.record_transcript else None
        return start

    def _serve_round(self, t: int, transport: Transport, server_rng: np.random.Generator, k: int, clip: float,
                     resent: TrainingState | None, on_round: Callable[[TrainingState], None] | None) -> float:
        """Round ``t``: select, charge, send, aggregate, record; the clip of the next round.

        ``resent``: the checkpoint taken at this round's start, which re-sends
        it as it was charged (not charged again).
        """
        round_started = time.perf_counter()
        lr = self.pricing.lr(t)
        theta = {name: p.detach().clone() for name, p in trainable_parameters(self.module).items()}
        rng_before = copy.deepcopy(server_rng.bit_generator.state)
        selected = np.sort(server_rng.choice(len(self.pricing.client_sizes), size=k, replace=False))
        # distributed noise: the round's public rotation, drawn after the selection from the same public stream
        rotation = int(server_rng.integers(2 ** 63)) if self._placement.rotates else 0
        cost = self._charge_round(lr, clip, resent)
        if on_round is not None:
            on_round(TrainingState(t, theta, self.accountant_.state_dict(), self.history_, rng_before, True,
                                   plan=self.pricing.record(), round_cost=cost.state_dict(),
                                   local_ledger=self.local_accountant_.state_dict(),
                                   deviating_ledger=self.deviating_accountant_.state_dict()))
        instructions = {int(i): self.pricing.client_instructions(int(i), lr, clip, rotation) for i in selected}
        replies = transport.run_round(t, selected.tolist(), theta, instructions)
        outcome = self._strategy.apply(theta, replies, instructions, lr, transcript=self.transcript_ is not None)
        if self.transcript_ is not None:
            self.transcript_.append({"theta": theta, "clients": sorted(replies), **outcome.seen})
        self._end_round(t, lr, selected, sorted(replies), outcome.seconds,
                        sum(seconds for _, seconds in replies.values()), time.perf_counter() - round_started)
        if outcome.discarded is not None:
            self.history_[-1]["discarded"] = outcome.discarded
        if self.plan_.adaptive_clip:
            self.history_[-1].update(clip=clip, clipped_fraction=outcome.clipped_fraction)
            clip = self._next_clip(self.history_[-1])
        if on_round is not None:
            on_round(self.state(t + 1, server_rng))
        return clip

    def _charge_round(self, lr: float, clip: float, resent: TrainingState | None) -> PrivacyAccountant:
        """Charge the round to both ledgers (unless ``resent`` was charged at this cost already); its cost."""
        cost = self.pricing.round_release(lr, clip)
        if resent is None or resent.round_cost != cost.state_dict() or self._placement.recharges_resent_rounds:
            self.accountant_.extend(cost)
            self.local_accountant_.extend(self.pricing.local_round_release(lr))
            self.deviating_accountant_.extend(self.pricing.deviating_round_release(lr))
        return cost

    def _next_clip(self, row: dict | None) -> float:
        """C of the next round (:func:`~skfedriem.federated.adaptive_clip.clip_after`; the plan's C without
        adaptive clipping)."""
        if not self.plan_.adaptive_clip:
            return self.plan_.clip
        return clip_after(row, self.plan_.clip, self.settings.clip_quantile)

    def state(self, completed_rounds: int, server_rng: np.random.Generator | None = None) -> TrainingState:
        """This run's state after ``completed_rounds`` rounds: θ, ledger, history (and the selection stream)."""
        theta = {name: p.detach().clone() for name, p in trainable_parameters(self.module).items()}
        rng = None if server_rng is None else copy.deepcopy(server_rng.bit_generator.state)
        return TrainingState(completed_rounds, theta, self.accountant_.state_dict(), self.history_, rng, False,
                             plan=self.pricing.record(), local_ledger=self.local_accountant_.state_dict(),
                             deviating_ledger=self.deviating_accountant_.state_dict())

    def _end_round(self, t: int, lr: float, selected: np.ndarray, replied: list[int], aggregation_seconds: float,
                   submission_seconds: float, round_seconds: float) -> None:
        epsilon = min(self._epsilon_so_far(), self._final_epsilon) if self.accountant_.private else math.inf
        entry = {"round": self._round_offset + t + 1, "epsilon": epsilon, "lr": lr,
                 **({"local_epsilon": self.local_epsilon_, "deviating_epsilon": self.deviating_epsilon_}
                    if self._placement.reports_local_epsilon else {}),
                 "clients": selected.tolist(), "replied": replied, "aggregation_seconds": aggregation_seconds}
        if self.settings.client_timings:
            entry.update(submission_seconds=submission_seconds, round_seconds=round_seconds)
        if self.monitor is not None:
            entry.update(self.monitor(self.module))
        self.history_.append(entry)

    def fitted_attributes(self) -> dict:
        """What an estimator exposes after :meth:`fit`, all post-processing of the transcript.

        ``epsilon_`` (certified, fine grid), ``delta_``, ``mu0_``, ``noise_std_``,
        ``batch_size_`` (after clamping), ``history_`` and ``ledger_`` (every
        step charged, earlier runs included: what a warm start continues).
        """
        plan = self.plan_
        return {"epsilon_": self.epsilon_, "local_epsilon_": self.local_epsilon_,
                "deviating_epsilon_": self.deviating_epsilon_, "delta_": self.settings.delta,
                "mu0_": plan.mu0,
                "noise_std_": plan.noise_std,
                "batch_size_": plan.batch_size, "history_": self.history_,
                "ledger_": PrivacyAccountant.from_state_dict(self.accountant_.state_dict()),
                "local_ledger_": PrivacyAccountant.from_state_dict(self.local_accountant_.state_dict()),
                "deviating_ledger_": PrivacyAccountant.from_state_dict(self.deviating_accountant_.state_dict())}

    @property
    def deviating_epsilon_(self) -> float:
        """What the run guarantees against a server that deviates from the protocol with t colluding clients (it may
        declare t (+ d, the dropout allowance) honest clients dropped out, so K − 2t − d honest shares carry the
        noise, and at least the client's own): with distributed noise that ledger's ε, between :attr:`epsilon_` and :attr:`local_epsilon_`; with
        local noise :attr:`epsilon_`."""
        if not self._placement.reports_local_epsilon and self.deviating_accountant_.history == self.accountant_.history:
            return self.epsilon_
        return self.pricing.epsilon(self.deviating_accountant_)

    @property
    def local_epsilon_(self) -> float:
        """What every client's own releases guarantee alone, against a server that breaks the protocol: with
        distributed noise its shares' ε, with local noise :attr:`epsilon_`."""
        if not self._placement.reports_local_epsilon and self.local_accountant_.history == self.accountant_.history:
            return self.epsilon_
        return self.pricing.epsilon(self.local_accountant_)

    @property
    def epsilon_(self) -> float:
        """Certified ε of every round in the ledger (earlier runs included) on the fine grid; inf when non-private."""
        return self.pricing.epsilon(self.accountant_)
