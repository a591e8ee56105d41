"""The server's plan of a run and the price of each of its rounds: what a round sends and what it is charged.

:class:`RoundPricing` is the part of :class:`~skfedriem.federated.FederatedTrainer`
that knows nothing of transports or of the records: from the public settings,
the clients' sizes and the model it plans the run once (σ, B, τ_i), writes
each client's instructions for a round and prices the round as every client
will charge it (:func:`~skfedriem.federated.client.step_plan`, the function the
clients run). The round loop (:meth:`~skfedriem.federated.FederatedTrainer.serve`)
sends what it writes and charges what it prices.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from torch import nn

from ..privacy import PrivacyAccountant
from ..privacy.accounting.accounting_methods import get_accounting
from ..privacy.per_record.per_sample import trainable_parameters
from ..privacy.mechanisms.step_plan import round_release
from ..privacy.accounting.subsampled_gaussian import DISCRETIZATION
from ..privacy.mechanisms.units import step_diameter
from .aggregation import get_aggregation
from .instructions import RoundInstructions, step_plan
from .plan import PrivacyPlan, plan_basis, plan_run
from .settings import FederationSettings

__all__ = ["RoundPricing", "lr_at_round", "model_dimension"]


def lr_at_round(lr: float, schedule: str | Callable[[int], float], round_: int, n_rounds: int) -> float:
    """Learning rate of round ``round_`` (0-based).

    Parameters
    ----------
    lr : float
        η, the rate of round 0.
    schedule : {"constant", "cosine"} or callable
        Constant η, cosine decay η (1 + cos(π t / T)) / 2, or ``schedule(t)``
        -> the rate of round t (``lr`` is then ignored).
    round_ : int
        t.
    n_rounds : int
        T.

    Returns
    -------
    float

    Examples
    --------
    >>> lr_at_round(0.1, "cosine", 50, 100)
    0.05
    """
    if callable(schedule):
        return float(schedule(round_))
    if schedule == "constant":
        return lr
    if schedule == "cosine":
        return lr * 0.5 * (1 + math.cos(math.pi * round_ / n_rounds))
    raise ValueError(f"The 'lr_schedule' parameter must be 'constant', 'cosine' or a callable. "
                     f"Got {schedule!r} instead.")


class RoundPricing:
    """A run's plan, its rounds' instructions and what each round costs, for one model and its settings.

    Parameters
    ----------
    module : torch.nn.Module
        The model (its blocks and clipped-gradient diameter shape the steps).
    settings : FederationSettings
    plan : PrivacyPlan, optional
        A plan made by a planner for these settings and this model; used for
        the clients it was made for (its ``basis``), refused for others.

    Attributes
    ----------
    plan_ : PrivacyPlan or None
        The plan of the clients last planned for (None before).
    client_sizes : list of int or None
        Their sizes.
    """

    def __init__(self, module: nn.Module, settings: FederationSettings, plan: PrivacyPlan | None = None) -> None:
        self._module, self._settings = module, settings
        self.accounting = get_accounting(settings.accounting)
        self.aggregation = get_aggregation(settings.aggregation)
        self._given = plan
        self._charged: PrivacyPlan | None = None
        self.plan_: PrivacyPlan | None = None
        self.client_sizes: list[int] | None = None
        self._rotation: tuple = (None, None)  # ((the plan's encoding, a round's seed, its clip), that encoding)

    @property
    def module(self) -> nn.Module:
        """The model the rounds are priced for."""
        return self._module

    @property
    def settings(self) -> FederationSettings:
        """The settings the rounds are priced from."""
        return self._settings

    def charged(self) -> None:
        """Mark the current plan as the one a privacy budget was charged: no other is made after it."""
        self._charged = self.plan_

    def plan(self, client_sizes: list[int], client_names: list) -> PrivacyPlan:
        """The run's plan for these clients: B, each τ_i, and σ calibrated by the accounting method.

        The plan given, or the one made for the same clients, is not made again.

        Parameters
        ----------
        client_sizes : list of int
        client_names : list

        Returns
        -------
        PrivacyPlan
        """
        diameter = step_diameter(self.module, self.settings.unit)
        dimension = model_dimension(self.module)
        basis = plan_basis(client_sizes, self.settings, self.accounting, diameter, dimension)
        if self.plan_ is None or self.plan_.basis != basis:
            if self._charged is not None:
                raise ValueError(f"A privacy budget was charged for this trainer's plan of other clients, settings or "
                                 f"model ({self._charged.basis}) than this run's ({basis}): make a new trainer.")
            if self._given is not None and self._given.basis != basis:
                raise ValueError(f"The plan given to FederatedTrainer was made for other clients, settings or model "
                                 f"({self._given.basis}) than this run's ({basis}): plan the run with these "
                                 "(plan_run), or pass no plan.")
            self.plan_ = self._given or plan_run(client_sizes, client_names, self.settings,
                                                 accounting=self.accounting, diameter=diameter, dimension=dimension)
        self.client_sizes = [int(m) for m in client_sizes]
        return self.plan_

    def lr(self, t: int) -> float:
        """η of round ``t``."""
        return lr_at_round(self.settings.lr, self.settings.lr_schedule, t, self.settings.n_rounds)

    def client_instructions(self, client: int, lr: float, clip: float | None = None,
                            rotation_seed: int = 0) -> RoundInstructions:
        """The public instructions for client ``client`` in a round at learning rate ``lr``.

        ``clip`` (adaptive clipping): this round's C_t; the noise follows it,
        σ_t = σ_0 C_t / C_0, nudged up by 1e-12 so that rounding never makes a
        step's μ0 exceed the planned one (what the ledger charges); with
        distributed noise the grid follows it instead
        (:meth:`~skfedriem.privacy.mechanisms.discrete.DistributedEncoding.for_clip`).
        ``rotation_seed``: the round's public rotation (distributed noise).
        """
        plan = self.plan_
        noise_std, count_noise_std = plan.client_noise_std(client), plan.count_noise_std
        if clip is None or clip == plan.clip:
            clip = plan.clip
        else:
            noise_std = noise_std * (clip / plan.clip) * (1 + 1e-12)
        return RoundInstructions(lr=lr, local_steps=plan.local_steps[client],
                                 batch_size=plan.client_batch_size(client), clip=clip, noise_std=noise_std,
                                 sampling=self.settings.sampling, aggregation=self.aggregation.name,
                                 count_noise_std=count_noise_std, privacy_unit=self.settings.privacy_unit,
                                 records_per_subject=self.settings.records_per_subject,
                                 encoding=self._seeded(rotation_seed, clip))

    def _seeded(self, rotation_seed: int, clip: float):
        """The plan's encoding with this round's rotation and grid (made once a round, not once a client)."""
        key = (self.plan_.encoding, rotation_seed, clip)
        if self._rotation[0] != key:
            self._rotation = (key, self.plan_.placement.round_encoding(self.plan_.encoding, rotation_seed, clip,
                                                                       self.plan_.clip))
        return self._rotation[1]

    def local_round_release(self, lr: float) -> PrivacyAccountant:
        """What one round guarantees each client by its own release alone (its share, with distributed noise;
        :meth:`round_release` with local noise)."""
        return self._round_release_against(lr, "local")

    def deviating_round_release(self, lr: float) -> PrivacyAccountant:
        """What one round guarantees against a server that deviates from the protocol with t colluding clients (the
        K − 2t honest shares it can leave, with distributed noise; :meth:`round_release` with local noise)."""
        return self._round_release_against(lr, "deviating")

    def _round_release_against(self, lr: float, trust: str) -> PrivacyAccountant:
        pairs = dict.fromkeys((self.client_instructions(i, lr), size) for i, size in enumerate(self.client_sizes))
        return round_release((step_plan(instructions, size, self.module, self.settings.unit)
                              for instructions, size in pairs), trust)

    def round_release(self, lr: float, clip: float | None = None) -> PrivacyAccountant:
        """What one round costs: the steps every client would take for its instructions, dominated as one.

        Built by :func:`~skfedriem.federated.client.step_plan`, the function
        each client uses to turn its instructions into the steps its sampler
        and mechanism run, from each client's own size and the model; over
        every client, selected or not (client selection gives no amplification:
        the server chooses and sees it). Steps without noise cost infinite loss.
        """
        # each distinct (instructions, size) once: the round's envelope is a maximum over the clients' plans
        pairs = dict.fromkeys((self.client_instructions(i, lr, clip), size) for i, size in enumerate(self.client_sizes))
        cost = round_release(step_plan(instructions, size, self.module, self.settings.unit)
                             for instructions, size in pairs)
        if clip is None or clip == self.plan_.clip:
            return cost
        # adaptive clipping: the round as planned (at C_0) dominates it, step for step; charging that keeps
        # every round's entry the same
        planned = self.round_release(lr)
        if not _dominates(planned, cost):  # cannot happen: σ_t is nudged up (and the budget was charged the plan)
            raise RuntimeError(f"An adaptive round at clip {clip!r} would cost more than its plan: "
                               f"{cost.state_dict()} > {planned.state_dict()}.")
        return planned

    def planned_release(self, client_sizes: list[int], client_names: list | None = None, *,
                        trust: str = "central") -> PrivacyAccountant:
        """The whole run for these clients as its ledger will be charged, before any round: what a budget is charged.

        Parameters
        ----------
        client_sizes : list of int
            m_i of every client (public).
        client_names : list, optional
            For messages (default: 0 .. n−1).
        trust : {"central", "deviating", "local"}, default="central"
            Against whom: a server that runs the protocol (:meth:`round_release`),
            one that deviates from it (:meth:`deviating_round_release`), or
            anyone who sees a client's own release (:meth:`local_round_release`).

        Returns
        -------
        PrivacyAccountant
        """
        self.plan(client_sizes, list(range(len(client_sizes))) if client_names is None else list(client_names))
        return self.rounds_release(trust=trust)

    def rounds_release(self, first: int = 0, *, trust: str = "central") -> PrivacyAccountant:
        """Rounds ``first`` .. T − 1 as the ledger against ``trust`` will be charged them (all of them: the whole
        run)."""
        planned = PrivacyAccountant()
        for t in range(first, self.settings.n_rounds):
            lr = self.lr(t)
            planned.extend(self.round_release(lr) if trust == "central" else self._round_release_against(lr, trust))
        return planned

    def epsilon(self, ledger: PrivacyAccountant, discretization: float = DISCRETIZATION) -> float:
        """Certified ε of ``ledger`` under this run's accounting (inf when a step was not private)."""
        if not ledger.private:
            return math.inf
        return self.accounting.epsilon(ledger, self.settings.delta, steps_per_round=self.plan_.steps_per_round,
                                       n_rounds=self.plan_.n_rounds, discretization=discretization)

    def running_epsilon(self, ledger: PrivacyAccountant) -> Callable[[], float]:
        """ε of ``ledger`` as it grows, on a grid 10x the final one: still an upper bound, and each round composes
        only its own steps."""
        return self.accounting.running_epsilon(ledger, self.settings.delta, steps_per_round=self.plan_.steps_per_round,
                                               n_rounds=self.plan_.n_rounds, discretization=10 * DISCRETIZATION)

    def record(self) -> dict:
        """What a resume must share with the run it continues: the target, the plan and the clients' sizes."""
        schedule = self.settings.lr_schedule
        return {"eps": self.settings.eps, "delta": self.settings.delta, "n_rounds": self.settings.n_rounds,
                "aggregation": self.aggregation.name, "client_sizes": list(self.client_sizes),
                # what shapes the instructions a resumed round re-sends (a callable schedule: by its name)
                "lr": self.settings.lr, "lr_schedule": schedule if isinstance(schedule, str) else repr(schedule),
                "clip_quantile": self.settings.clip_quantile, "privacy_unit": self.settings.privacy_unit,
                "records_per_subject": self.settings.records_per_subject,
                **{f.name: _plain(getattr(self.plan_, f.name)) for f in dataclasses.fields(self.plan_)
                   if f.name != "basis"}}


def _plain(value):
    """A plan's field as a checkpoint holds it (the encoding of distributed noise as a dict)."""
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


def model_dimension(module: nn.Module) -> int:
    """d, the number of trainable coordinates of ``module`` (all blocks)."""
    return sum(p.numel() for p in trainable_parameters(module).values())


def _dominates(planned: PrivacyAccountant, cost: PrivacyAccountant) -> bool:
    """Whether ``planned`` charges at least what ``cost`` does, entry by entry (same rates, steps, groups, μ0 ≥; a
    Skellam step's variance ≤ and sensitivities ≥)."""
    if len(planned.history) != len(cost.history):
        return False
    return all((p.sample_rate, p.sampling, p.steps, p.group_size) == (c.sample_rate, c.sampling, c.steps, c.group_size)
               and p.mu0 >= c.mu0 and _skellam_dominates(p.skellam, c.skellam)
               for p, c in zip(planned.history, cost.history))


def _skellam_dominates(planned: tuple, cost: tuple) -> bool:
    """Whether a Skellam step (V, Δ2, Δ1) charges at least another: both Gaussian (empty), or V ≤ and Δ2, Δ1 ≥."""
    if not planned or not cost:
        return not planned and not cost
    return planned[0] <= cost[0] and planned[1] >= cost[1] and planned[2] >= cost[2]
