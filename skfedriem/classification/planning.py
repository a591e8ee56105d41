"""The private classifiers' schedules chosen from public quantities only: optimiser, step size, T, B, local work.

Nothing here sees a record. A plan depends on the model's kind, (ε, δ), C,
the clients' sizes and how many take part in a round, and on the values the
user set; change the trials but keep those and the plan is the same.

**The rule.** Plain SGD with a constant step

    η = min(ROUND_STEP / τ, NOISE_WALK / (σ̄ √(T τ))),

where τ is the local steps per round (one epoch of the smallest client,
⌈m⋆ / B⌉, which every client takes under privacy) and σ̄ the noise std, per
coordinate, of the server's mean of k clients' steps (σ̄ = σ / √k for equal clients; σ from the same calibration
the trainer runs). The first term bounds the step per round: at η = 0.5 and
τ = 16 steps a round, BNCI-size clients drift apart and SPDNet stayed at
chance. The second bounds the random walk the noise makes in each
coordinate of the model over the T τ steps: with few records per client the
noise of each step is large, and a step made for the signal walks the model
away (and walks a public pretrained start away from where it was). Adam,
today's SPDNet default, normalises each coordinate of a gradient that under
DP is mostly noise; on small clients it was the worst setting of the grid.

The tangent-space classifier (a linear model, zero-initialised) learnt best
at a constant η = 0.1 in both synthetic regimes; on the 24 real PhysioNet
subjects, at the clients' released mean, the rule's larger steps at larger ε
learnt more. So in a private fit with local noise it plans the rule, never
below 0.1 (its ``sgd_lr_floor``), and 0.1 without privacy.

**Per model.** What the planner knows of a model kind is one
:class:`ClassifierSchedule`, declared as its estimator class's ``schedule``
(e.g. ``FederatedEEGNetClassifier.schedule``): B, the optimiser with and
without privacy, Adam's step and a fixed SGD step where the rule does not
apply. A new classifier declares its own and is planned with the same rule.

**Where the constants come from.** ``benchmarks/classifier_planning.py``
trained SPDNet on synthetic federations of our users' sizes (BNCI-size:
3 clients × 1000 training trials, 22 channels, 4 classes; small clients:
10 to 100 clients of 36 to 40 trials, 8 channels, 2 classes) at ε = 1, 4
and 10, and scored it on held-out trials; ``NOISE_WALK`` = 0.4 was the best
of 0.1, 0.2, 0.4, 0.8 and 1.6 on the small clients at ε = 1 and 4, and ``ROUND_STEP`` = 0.5 matched
Adam on the BNCI-size clients. The results, with the grid's best and the
defaults before planning, are on the documentation's benchmarks page and in
``benchmarks/results/classifier_planning.json``.

**What is not planned.** T (200), B (64; 16 for EEGNet, both clamped to the
smallest client without a warning) and one local epoch are the values the
grid ran with: it did not vary them. Under subject-level privacy B is at most
half of the smallest client's subjects (or of its k n trials with
``records_per_subject``), so that every step samples them
(``benchmarks/subject_batch.py``). EEGNet plans the same SGD rule under
privacy, and Adam at 3e-3 with a cosine schedule without: with the paper's
Adam at 1e-3 (and nothing between its layers) it reached 0.54 held out on the
24 real PhysioNet subjects without privacy (``benchmarks/eegnet_real.py``) and
stayed at chance under privacy (the study of the paper's schedules). Without
privacy SPDNet plans Adam at 1e-2 with a cosine schedule, its default before planning: on
the real PhysionetMI subjects 1–5 (one client each, held-out thirds) it
reached 0.68 where the private SGD schedule stayed at 0.51
(``benchmarks/physionet_real.py``). SPDNet's ``dims`` is not
planned from the federation: a deployment's sites build the model from the
public shapes alone, and with SGD ``dims=(4,)`` was worse than the default
in every private cell.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from .._utils.plan_text import PrintedAsTable, plan_table
from .._utils.registry import Registry
from .._utils.user_warnings import warn_user
from ..exceptions import NoiseSwampsSignalWarning, SaturatingStepWarning
from ..federated.plan import (LEARNABLE_SIGNAL_TO_NOISE, PrivacyPlan, mean_step_noise, plan_run,
                              signal_to_noise)
from ..federated.noise_placement import running_placement
from ..federated.settings import FederationSettings
from ..privacy.mechanisms.units import subject_reason

__all__ = ["PLANNED", "ClassifierPlan", "ClassifierSchedule", "NOISE_WALK", "ROUND_STEP", "SCHEDULES",
           "plan_classifier",
           "plan_classifier_run", "planned_optimizer", "SATURATING_ROUND_STEP", "warn_if_saturating",
           "warn_if_unlearnable"]

ROUND_STEP = 0.5
"""η τ, the largest planned SGD step per round (units of the loss's gradient)."""
NOISE_WALK = 0.4
"""η σ̄ √(T τ), the planned spread of the noise's random walk in each coordinate of the model."""
SATURATING_ROUND_STEP = 50.0
"""η τ (times C in a private SGD fit), the step per round above which a fit warns that its outputs will saturate: 100x
``ROUND_STEP``. The grid's steps that learnt best on the real subjects (η = 3, τ ≤ 3, C = 1) stay below 10; at η = 1e3
both classifiers' predicted probabilities were 0 or 1 on 99% of the trials after 30 rounds."""
DEFAULT_ROUNDS = 200
DISTRIBUTED_ROUNDS = 300
"""T under ``noise="distributed"``: every round is one step of every client's whole records (full batches: the
noise is paid once on the sum of all of them), so a run of T rounds is T steps."""

_CHOSEN = ("chosen by :func:`~skfedriem.classification.planning.plan_classifier` from public quantities only (the "
           "model's kind, ε, δ, C, the clients' sizes, B); ``plan_`` says what and why.")
#: What ``"auto"`` (the classifiers' default) means for each setting :func:`plan_classifier` plans.
PLANNED: dict[str, dict[str, str]] = {
    "n_rounds": {"auto": f"{DEFAULT_ROUNDS}."},
    "batch_size": {"auto": "the model's (64; 16 for EEGNet)."},
    "local_epochs": {"auto": "1."},
    "optimizer": {"auto": _CHOSEN + " SGD in a private fit (Adam normalises a gradient that is mostly noise under "
                          "DP), Adam without privacy for SPDNet and EEGNet, SGD for the tangent-space model."},
    "lr": {"auto": _CHOSEN + " SPDNet with SGD: η = min(0.5 / τ, 0.4 / (σ̄ √(T τ))) for τ local steps per round "
                   "and σ̄ the noise std of the server's mean (a bounded step per round and a bounded random walk of the "
                   "noise), EEGNet too; the tangent-space model the same rule, at least 0.1, with local noise in a "
                   "private fit (0.1 without privacy); Adam 1e-2 (3e-3 for EEGNet); another optimiser needs an "
                   "explicit η."},
    "lr_schedule": {"auto": "constant with SGD, cosine otherwise."},
}

Auto = Literal["auto"]


@dataclass(frozen=True)
class ClassifierSchedule:
    """A classifier model's defaults for :func:`plan_classifier`: everything the planner knows of a model kind.

    A classifier declares it once, as its class's ``schedule``
    (:class:`~skfedriem.classification.FederatedClassifier`); the
    class registers it under ``name`` in :data:`SCHEDULES`, so that
    ``plan_classifier(model=name)`` plans for that model.

    Parameters
    ----------
    name : str
        The model's kind, e.g. ``"spdnet"``.
    batch_size : int
        B that ``batch_size="auto"`` stands for (clamped to the smallest client).
    optimizer : str
        The optimiser ``optimizer="auto"`` stands for in a private fit: the
        model's kind alone decides it, so a deployed site, which knows no other
        client's size, resolves it exactly as the server does.
    optimizer_without_privacy : str
        ... and without privacy (``eps=None``).
    adam_lr : float
        Adam's step when ``lr="auto"``.
    sgd_lr : float or None, default=None
        SGD's step when ``lr="auto"``; None: the rule
        η = min(ROUND_STEP / τ, NOISE_WALK / (σ̄ √(T τ))).
    sgd_lr_reason : str, default=""
        Why ``sgd_lr`` (for ``plan_``).
    optimizer_reason : str, default=""
        Why this model's optimiser, when not the planner's general reason (for ``plan_``).
    distributed_sgd_lr : float or None, default=None
        SGD's step when ``lr="auto"`` and ``noise="distributed"``; None: the
        rule, σ̄ the noise std of the server's decoded mean step.
    distributed_sgd_lr_reason : str, default=""
        Why ``distributed_sgd_lr``.
    sgd_lr_floor : float or None, default=None
        With local noise in a private fit, plan SGD's step by the rule, but
        never below this (``sgd_lr`` then stands for the fit without
        privacy); None: ``sgd_lr`` in every fit.
    sgd_lr_floor_reason : str, default=""
        Why ``sgd_lr_floor``.
    """

    name: str
    batch_size: int
    optimizer: str
    optimizer_without_privacy: str
    adam_lr: float
    sgd_lr: float | None = None
    sgd_lr_reason: str = ""
    optimizer_reason: str = ""
    distributed_sgd_lr: float | None = None
    distributed_sgd_lr_reason: str = ""
    sgd_lr_floor: float | None = None
    sgd_lr_floor_reason: str = ""


#: The model kinds :func:`plan_classifier` knows by name: each classifier's ``schedule``, registered by its class.
SCHEDULES: Registry[ClassifierSchedule] = Registry("model", ClassifierSchedule)


@dataclass(frozen=True)
class ClassifierPlan(PrintedAsTable):
    """What :func:`plan_classifier` chose, and why: the run's complete settings and the server's plan of them.

    Parameters
    ----------
    trainer_settings : FederationSettings
        Every setting of the run, each ``"auto"`` replaced by what was
        planned: what :class:`~skfedriem.federated.FederatedTrainer` runs with.
    privacy : PrivacyPlan
        The server's plan of these settings (σ, each τ_i) that the planned η
        was chosen from: the trainer takes it as its plan instead of making
        it again.
    reason : str
        Every choice in words.
    signal_to_noise : float or None, default=None
        √(T τ) C / (σ̄ √d) for the model's d coordinates
        (:func:`~skfedriem.federated.plan.signal_to_noise`; inf without
        privacy); None when the model's dimension was not given. Below
        :data:`~skfedriem.federated.plan.LEARNABLE_SIGNAL_TO_NOISE` the fit
        warns that it will likely learn little or nothing (:func:`warn_if_unlearnable`).

    Attributes
    ----------
    optimizer, lr, lr_schedule, n_rounds, batch_size, local_epochs, local_steps
        Those of ``trainer_settings`` (``batch_size`` as set: the trainer's
        plan clamps it to the smallest client; None: full batches).
    steps_per_round : int
        τ = max τ_i, the local steps of the run's largest client at this B.
    """

    trainer_settings: FederationSettings
    privacy: PrivacyPlan = field(repr=False, compare=False)
    reason: str
    signal_to_noise: float | None = None

    optimizer = property(lambda self: self.trainer_settings.optimizer)
    lr = property(lambda self: self.trainer_settings.lr)
    lr_schedule = property(lambda self: self.trainer_settings.lr_schedule)
    n_rounds = property(lambda self: self.trainer_settings.n_rounds)
    batch_size = property(lambda self: self.trainer_settings.batch_size)
    local_epochs = property(lambda self: self.trainer_settings.local_epochs)
    local_steps = property(lambda self: self.trainer_settings.local_steps)
    steps_per_round = property(lambda self: self.privacy.steps_per_round)

    def __str__(self) -> str:
        steps = (f"{self.local_steps} (set)" if self.local_steps is not None
                 else f"{self.steps_per_round} a round ({self.local_epochs:g} local epoch(s))")
        rows = {"optimizer": self.optimizer, "lr": self.lr, "lr_schedule": self.lr_schedule,
                "n_rounds": self.n_rounds, "batch_size": "full batches" if self.batch_size is None else self.batch_size,
                "local steps": steps}
        if self.signal_to_noise is not None:
            rows["signal_to_noise"] = self.signal_to_noise
        return plan_table("ClassifierPlan", rows, self.reason)

    def settings(self) -> dict:
        """The planned values as estimator settings (what replaces every ``"auto"``)."""
        return {name: getattr(self.trainer_settings, name)
                for name in ("optimizer", "lr", "lr_schedule", "n_rounds", "batch_size", "local_epochs")}


def _schedule(model: str | ClassifierSchedule) -> ClassifierSchedule:
    if isinstance(model, str) and model not in SCHEDULES.names():
        raise ValueError(f"The 'model' parameter must be one of {list(SCHEDULES.names())} or a "
                         f"ClassifierSchedule. Got {model!r} instead.")
    return SCHEDULES.get(model)


def planned_optimizer(model: str | ClassifierSchedule, optimizer, *, private: bool = True) -> object:
    """The optimiser ``"auto"`` stands for with this model kind (other values are kept): no client size enters.

    Parameters
    ----------
    model : str or ClassifierSchedule
        A registered model kind (``"spdnet"``, ``"tangent"``, ``"eegnet"``...) or its schedule.
    optimizer : "auto", str or callable
    private : bool, default=True
        Whether the fit is private (``eps`` is not None).

    Returns
    -------
    str or callable
    """
    if not _is_auto(optimizer):
        return optimizer
    schedule = _schedule(model)
    return schedule.optimizer if private else schedule.optimizer_without_privacy


def plan_classifier(
    *,
    model: str | ClassifierSchedule,
    client_sizes: list[int],
    eps: float | None = None,
    delta: float = 1e-5,
    clip: float = 1.0,
    sampling: str = "fixed",
    accounting="rfedproj",
    clients_per_round: int | None = None,
    optimizer="auto",
    lr: float | Auto = "auto",
    lr_schedule="auto",
    n_rounds: int | Auto = "auto",
    batch_size: int | None | Auto = "auto",
    local_epochs: float | Auto = "auto",
    local_steps: int | None = None,
    noise_walk: float = NOISE_WALK,
    diameter: float = 2.0,
    client_names: list | None = None,
) -> ClassifierPlan:
    """Choose a private classifier's schedule from public quantities; explicit values are kept.

    Parameters
    ----------
    model : str or ClassifierSchedule
        The model's kind: a registered name (``"spdnet"``, ``"tangent"``,
        ``"eegnet"``, or a new classifier's ``schedule.name``) or its schedule.
    client_sizes : list of int
        m_i, the number of training records of each client (public).
    eps, delta : float
        The run's target (ε, δ); ``eps=None``: no privacy.
    clip : float, default=1.0
        C.
    sampling : {"fixed", "poisson"}, default="fixed"
    accounting : str or RunAccounting, default="rfedproj"
        With ``eps``, what σ is calibrated with (as the trainer will).
    clients_per_round : int or None, default=None
        k, the clients the server averages per round (None: all).
    optimizer, lr, lr_schedule, n_rounds, batch_size, local_epochs : "auto" or a value, default="auto"
        Values other than "auto" are kept; the others are chosen around them
        (e.g. a hand-set B changes τ, hence the planned η).
    local_steps : int or None, default=None
        τ set by hand (then ``local_epochs`` is not used).
    noise_walk : float, default=NOISE_WALK
        The planned η σ̄ √(T τ) (what the planning grid calibrated).
    diameter : float, default=2.0
        Δ, the model's :func:`~skfedriem.privacy.clipped_gradient_diameter`
        (σ is calibrated with it, as the trainer would).
    client_names : list, optional
        The clients' names, for the plan's warnings (default: 0 .. n−1).

    Returns
    -------
    ClassifierPlan

    Examples
    --------
    Large clients: the step per round binds; many small ones: the noise's walk does.

    >>> plan = plan_classifier(model="spdnet", client_sizes=[1000, 1000, 1000], eps=4.0)
    >>> plan.optimizer, plan.steps_per_round, plan.lr
    ('sgd', 16, 0.03125)
    >>> round(plan_classifier(model="spdnet", client_sizes=[36] * 30, eps=4.0).lr, 3)
    0.182
    """
    settings = {"eps": eps, "delta": delta, "clip": clip, "sampling": sampling, "accounting": accounting,
                "clients_per_round": clients_per_round, "optimizer": optimizer, "lr": lr, "lr_schedule": lr_schedule,
                "n_rounds": n_rounds, "batch_size": batch_size, "local_epochs": local_epochs,
                "local_steps": local_steps}
    return plan_classifier_run(model, settings, client_sizes, noise_walk=noise_walk, diameter=diameter,
                               client_names=client_names)


def plan_classifier_run(model: str | ClassifierSchedule, params: Mapping, client_sizes: list[int], *,
                        noise_walk: float = NOISE_WALK, diameter: float = 2.0,
                        client_names: list | None = None, dimension: int = 0) -> ClassifierPlan:
    """:func:`plan_classifier` from an estimator's parameters: the run's complete settings, planned once.

    Parameters
    ----------
    model : str or ClassifierSchedule
    params : mapping
        The run's settings by name (an estimator's ``get_params()``, with the
        ε its rounds target as ``"eps"``; other keys are ignored), ``"auto"``
        where the model plans them.
    client_sizes : list of int
    noise_walk, diameter, client_names
        As in :func:`plan_classifier`.
    dimension : int, default=0
        The model's trainable coordinates (the grid of ``noise="distributed"``).

    Returns
    -------
    ClassifierPlan
        Its ``trainer_settings`` hold every setting of ``params``, with what
        was planned in place of each ``"auto"``.
    """
    schedule = _schedule(model)
    if not client_sizes:
        raise ValueError("The 'client_sizes' parameter must list at least one client's size. Got [] instead.")
    auto = {name for name in PLANNED if _is_auto(params.get(name))}
    private = params.get("eps") is not None
    chosen = planned_optimizer(schedule, params["optimizer"], private=private)
    # a placement whose round is one step of every client's whole records plans T and B its own way
    distributed = running_placement(params).one_step_a_round
    planned = {"n_rounds": DISTRIBUTED_ROUNDS if distributed else DEFAULT_ROUNDS,
               "batch_size": None if distributed else _planned_batch_size(schedule, client_sizes, params),
               "local_epochs": 1.0, "optimizer": chosen, "lr_schedule": "constant" if chosen == "sgd" else "cosine"}
    # η is planned from the server's plan, which does not read it (PLANNED_FROM): the settings' default stands in
    given = {name: value for name, value in params.items() if name not in auto}
    settings = FederationSettings.from_params(given, **{name: planned[name] for name in auto if name != "lr"})
    reasons = [_distributed_reason(auto)] if distributed else _unplanned_reasons(settings, schedule, auto)
    # the run's own plan (it warns of a clamped B or a large δ once, here): the trainer takes it as it is
    names = list(range(len(client_sizes))) if client_names is None else list(client_names)
    privacy = plan_run(list(client_sizes), names, settings, diameter=diameter, dimension=dimension)
    if distributed:
        reasons.append(_placement_saving(privacy, list(client_sizes), names, settings, diameter))
    if settings.privacy_unit == "subject" and settings.batch_size is not None:
        reasons.append(subject_reason(settings.batch_size, min(client_sizes), settings.unit))
    if "batch_size" in auto and not distributed and settings.batch_size < schedule.batch_size:
        _warn_of_a_small_client(client_sizes, settings.batch_size, privacy, settings.local_steps is not None)
    if "optimizer" in auto:
        reasons.append(f"{chosen}: {_optimizer_reason(schedule, chosen)}")
    k = len(client_sizes) if settings.clients_per_round is None else min(settings.clients_per_round,
                                                                         len(client_sizes))
    if "lr" in auto:
        lr, why = _planned_lr(schedule, chosen, params["optimizer"], privacy, k, settings.n_rounds, noise_walk)
        settings = settings.replace(lr=float(lr))
        reasons.append(why)
    snr = signal_to_noise(privacy, k, dimension) if dimension > 0 else None
    return ClassifierPlan(trainer_settings=settings, privacy=privacy, reason="; ".join(reasons) or "every setting given",
                          signal_to_noise=snr)


def warn_if_unlearnable(plan: ClassifierPlan, dimension: int) -> None:
    """A :class:`~skfedriem.exceptions.NoiseSwampsSignalWarning` when the plan's signal-to-noise is below
    :data:`~skfedriem.federated.plan.LEARNABLE_SIGNAL_TO_NOISE`, with the remedies that worked on real EEG.

    Parameters
    ----------
    plan : ClassifierPlan
        A fit's final plan (its ``signal_to_noise``; None: nothing said).
    dimension : int
        d, the model's trainable coordinates the figure was computed for.
    """
    snr, settings = plan.signal_to_noise, plan.trainer_settings
    if snr is None or snr >= LEARNABLE_SIGNAL_TO_NOISE:
        return
    # one client (a site's own records, a within-session fold): no sum to pay the noise on once, no other client
    alone = len(plan.privacy.local_steps) == 1
    placement = ("" if running_placement(settings).secure_sum or alone else
                 "noise='distributed' (the noise paid once on the clients' sum: 4.7x the signal-to-noise of 24 "
                 "one-subject clients, 0.50 -> 0.64 on the motor channels at eps=10); ")
    more = "or more records" if alone else "or more clients a round"
    warn_user(f"This model will likely learn little or nothing at eps={settings.eps:g}: its {dimension} coordinates "
              "spread the noise too thin for the signal (the plan's signal-to-noise √(T τ) C / (σ̄ √d) is "
              f"{snr:.3g}, below {LEARNABLE_SIGNAL_TO_NOISE:g}; on the 24 real PhysioNet subjects no fit below it "
              "reached 0.58 held out, chance 0.50). What worked there: fewer coordinates, e.g. a channel subset before Covariances (9 "
              "motor-cortex channels instead of 64: 6.7x the signal-to-noise, 0.52 -> 0.64 held out at eps=10 with "
              f"distributed noise); {placement}a larger eps, {more}. See plan_.",
              NoiseSwampsSignalWarning)


def warn_if_saturating(plan: ClassifierPlan) -> None:
    """A :class:`~skfedriem.exceptions.SaturatingStepWarning` when a round can move the model by more than
    :data:`SATURATING_ROUND_STEP`: η τ, times the clip C in a private SGD fit (its clipped mean gradient is at most C).

    Parameters
    ----------
    plan : ClassifierPlan
        A fit's final plan.
    """
    settings = plan.trainer_settings
    clipped = settings.eps is not None and settings.optimizer == "sgd" and isinstance(settings.clip, (int, float))
    bound = float(settings.clip) if clipped else 1.0  # an adaptive clip ("auto") has no bound known in advance
    step = settings.lr * plan.steps_per_round * bound
    if step > SATURATING_ROUND_STEP:
        clip = f" x C = {bound:g}" if bound != 1.0 else ""
        warn_user(f"lr={settings.lr:g} with {plan.steps_per_round} local step(s) a round{clip} can move the model by "
                  f"{step:.3g} a round, above {SATURATING_ROUND_STEP:g}: its outputs will saturate (predicted "
                  "probabilities of 0 or 1) and it will learn little. lr='auto' plans a step of at most "
                  f"{ROUND_STEP:g} a round. See plan_.", SaturatingStepWarning)


def _placement_saving(privacy: PrivacyPlan, client_sizes: list[int], names: list, settings: FederationSettings,
                      diameter: float) -> str:
    """What distributed noise saves: the noise std of the server's mean step against local noise's at the same ε,
    rounds and batches (σ / √K for K equal clients' mean)."""
    local = plan_run(client_sizes, names, settings.replace(noise="local", local_steps=1, colluders=None, dropouts=0),
                     diameter=diameter)
    k = privacy.encoding.clients
    sigmas = [local.client_noise_std(i) for i in range(len(client_sizes))]
    local_mean = math.sqrt(sum(x * x for x in sigmas) / len(sigmas) / k)
    return (f"distributed noise: the server's mean step carries noise std {privacy.noise_std:.3g} per coordinate, "
            f"against {local_mean:.3g} with local noise at the same ε, T and batches ({local_mean / privacy.noise_std:.1f}x "
            f"less; K = {k} clients a round, t = {privacy.encoding.colluders} may drop out or collude"
            + (f", d = {privacy.encoding.dropouts} more may drop out" if privacy.encoding.dropouts else "") + ")")


def _distributed_reason(auto: set[str]) -> str:
    """Why ``"auto"`` plans full batches and T = 300 under distributed noise."""
    planned = [text for name, text in (("n_rounds", f"T = {DISTRIBUTED_ROUNDS}"),
                                       ("batch_size", "full batches (every client's whole records each round)"))
               if name in auto]
    if not planned:
        return "distributed noise: one step a round"
    return (", ".join(planned) + ": distributed noise pays the noise once on the round's sum, so its one step a "
            "round takes every record (on the 24 real PhysioNet subjects, one client each, ε = 10, the tangent "
            "model reached 0.64 held-out at T = 300 against 0.54 at T = 100, η = 1)")


def _planned_batch_size(schedule: ClassifierSchedule, client_sizes: list[int], params: Mapping) -> int:
    """B: the model's, clamped to the smallest client; under subject-level privacy (client sizes count subjects,
    or k per subject) at most half of the smallest client's units, so every step is subsampled (q ≈ 1/2).

    ``benchmarks/subject_batch.py``: on synthetic sites of 10 subjects, sampling 5 of them beat sampling all 10 in
    every cell (tangent 0.77 / 0.84 against 0.62 / 0.75 at ε = 4 / 10, SPDNet 0.70 / 0.81 against 0.60 / 0.79); at
    3 subjects a site and on the real PhysionetMI subjects every choice stayed near chance.
    """
    smallest = min(client_sizes)
    if params.get("privacy_unit", "record") == "subject" and params.get("eps") is not None:
        smallest = max(1, math.ceil(smallest / 2))
    return min(schedule.batch_size, smallest)


def _unplanned_reasons(settings: FederationSettings, schedule: ClassifierSchedule, auto: set[str]) -> list[str]:
    """What ``"auto"`` stood for without planning (T, B, the local epochs), as the plan's first reason."""
    batch = f"B = {settings.batch_size} (at most {schedule.batch_size}" + (
        ", and half of the smallest client's units under subject-level privacy)"
        if settings.privacy_unit == "subject" and settings.eps is not None else ")")
    unplanned = [text for name, text in (("n_rounds", f"T = {settings.n_rounds}"), ("batch_size", batch),
                                         ("local_epochs", "one local epoch")) if name in auto]
    if not unplanned:
        return []
    return [", ".join(unplanned) + ": the values the planning grid ran with (not planned from the federation)"]


def _warn_of_a_small_client(client_sizes: list[int], batch: int, privacy: PrivacyPlan, steps_set: bool) -> None:
    """Warn when ``batch_size="auto"`` was cut to a client much smaller than the median: every client's batch is."""
    median, tau = statistics.median(client_sizes), privacy.steps_per_round
    if 4 * min(client_sizes) > median:
        return
    if steps_set:
        work = f"every client then takes its {tau} set steps a round of {batch} records"
    elif privacy.mu0 is None:
        work = f"the others then take up to {tau} steps a round of {batch} records"
    else:
        work = (f"every client then takes the smallest's {tau} step(s) a round, each with the noise of a batch "
                f"of {batch}: a round draws {batch * tau} records of the largest client's {max(client_sizes)}")
    warn_user(f"batch_size='auto' is {batch} for every client because the smallest holds only "
              f"{min(client_sizes)} records (median {median:g}): {work}. Leave the small client out or merge it "
              "with another, or set batch_size yourself.")


def _optimizer_reason(schedule: ClassifierSchedule, chosen: str) -> str:
    if schedule.optimizer_reason:
        return schedule.optimizer_reason
    if chosen == "adam":
        return ("without privacy, Adam with a cosine schedule converges where the private SGD schedule stayed near "
                "chance on real EEG")
    return "Adam normalises a gradient that is mostly noise under DP, and lost to SGD on small clients"


def _planned_lr(schedule: ClassifierSchedule, chosen: str, optimizer, privacy: PrivacyPlan, k: int, rounds: int,
                noise_walk: float) -> tuple[float, str]:
    """η for ``lr="auto"`` and why: the model's fixed SGD step, the noise-walk rule, or Adam's step."""
    spread = mean_step_noise(privacy, k)
    fixed = _fixed_sgd_lr(schedule, privacy, spread)
    if chosen == "sgd" and fixed is not None:
        return fixed
    if chosen == "sgd":
        return _noise_walk_lr(schedule, privacy, k, rounds, noise_walk, spread)
    if chosen == "adam":
        return schedule.adam_lr, f"η = {schedule.adam_lr:g}: Adam's step for this model"
    raise ValueError(f"lr='auto' is planned for optimizer 'sgd' or 'adam'; optimizer={optimizer!r} needs an "
                     "explicit lr.")


def _noise_walk_lr(schedule: ClassifierSchedule, privacy: PrivacyPlan, k: int, rounds: int, noise_walk: float,
                   spread: float) -> tuple[float, str]:
    """η = min(ROUND_STEP / τ, noise_walk / (σ̄ √(T τ))), raised to the model's floor, and why."""
    tau = privacy.steps_per_round
    walk = spread * math.sqrt(rounds * tau)
    lr = ROUND_STEP / tau if walk == 0 else min(ROUND_STEP / tau, noise_walk / walk)
    why = (f"η = min({ROUND_STEP:g} / τ, {noise_walk:g} / (σ̄ √(T τ))) = {lr:.4g} with τ = {tau} local steps per "
           f"round and σ̄ = {spread:.3g}, the noise std of a {k}-client mean: a bounded step per round, and a bounded "
           "random walk of the noise over the run")
    floor = schedule.sgd_lr_floor
    if floor is None:
        return lr, why
    if lr < floor:
        lr, why = floor, f"{why}, raised to this model's floor {floor:g}"
    return lr, f"{why} ({schedule.sgd_lr_floor_reason})" if schedule.sgd_lr_floor_reason else why


def _fixed_sgd_lr(schedule: ClassifierSchedule, privacy: PrivacyPlan, spread: float) -> tuple[float, str] | None:
    """The model's fixed SGD step for this noise placement and why, or None (the rule plans it: always with no
    fixed step, and in a private fit with local noise for a model with a floor)."""
    if privacy.placement.one_step_a_round:
        lr = schedule.distributed_sgd_lr
        return None if lr is None else (lr, f"η = {lr:g} (distributed noise): {schedule.distributed_sgd_lr_reason}")
    lr = schedule.sgd_lr
    if lr is None or (schedule.sgd_lr_floor is not None and spread > 0):
        return None
    return lr, (f"η = {lr:g}: {schedule.sgd_lr_reason}" if schedule.sgd_lr_reason else f"η = {lr:g}")


def _is_auto(value) -> bool:
    return isinstance(value, str) and value == "auto"
