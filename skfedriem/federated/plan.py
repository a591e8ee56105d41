"""Planning a federated run's local work and calibrating its noise."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .._utils.user_warnings import warn_user
from ..exceptions import NoiseSwampsSignalWarning
from ..privacy.accounting.accounting_methods import RunAccounting, get_accounting
from ..privacy.mechanisms.discrete import DistributedEncoding, group_step, plan_encoding
from ..privacy.mechanisms.step_mechanism import sensitivity_factor
from ..privacy.mechanisms.units import PrivacyUnit
from .adaptive_clip import COUNT_SHARE, INITIAL_CLIP, split_mu0
from .noise_placement import NoisePlacement, check_noise_placement, placement_of, running_placement
from .settings import FederationSettings

__all__ = ["LEARNABLE_SIGNAL_TO_NOISE", "PLANNED_FROM", "PrivacyPlan", "check_client_sizes", "distributed_clients",
           "mean_step_noise", "noise_swamps_signal", "plan_basis", "plan_run", "signal_to_noise",
           "warn_if_noise_swamps"]

LEARNABLE_SIGNAL_TO_NOISE = 10.0
"""Below this :func:`signal_to_noise`, a fit on real EEG learnt little: on the 24 real PhysioNet subjects (the tangent
model, left/right imagery, 9 or 64 channels, 24, 8 or 4 sites or one curator, ε 4 to 20;
``benchmarks/results/real_planning.json``) no private fit below 10 reached 0.58 held out (40 fits, mean 0.525,
chance 0.50), where fits above 40 reached up to 0.64 and pyRiemann without privacy 0.67 to 0.72. A task whose
classes lie further apart than motor imagery's can learn below it (20 synthetic clients reached 0.64 at 2.8)."""

#: The settings :func:`plan_run` reads: with the clients' sizes, the accounting method and Δ, what a plan is made of.
PLANNED_FROM = ("eps", "delta", "clip", "n_rounds", "local_epochs", "local_steps", "batch_size", "sampling",
                "privacy_unit", "records_per_subject", "noise", "colluders", "dropouts", "clients_per_round")


@dataclass(frozen=True)
class PrivacyPlan:
    """Everything fixed before training so σ can be calibrated.

    Parameters
    ----------
    batch_size : int
        B after clamping to the smallest client (with ``batch_sizes``: the
        smallest client's size).
    local_steps : tuple of int
        τ_i for each client (same order as the clients).
    sample_rate : float
        q = B / m⋆, m⋆ the smallest client.
    steps_per_round : int
        τ = max τ_i, what the accountant charges per round.
    total_steps : int
        T τ.
    mu0 : float or None
        Per-step GDP parameter Δ C / (Bσ); None for a non-private run.
    noise_std : float
        σ = Δ C / (B μ0) (0 for a non-private run), Δ the ``sensitivity``.
    clip : float
        C (inf for a non-private run).
    accounting : str, default="rfedproj"
        The name of the accounting method that calibrated σ.
    sampling : {"fixed", "poisson"}, default="fixed"
        How clients draw their batches.
    batch_sizes : tuple of int, optional
        Full-batch runs: client i's batch is its whole m_i records (q = 1 for
        every client) and its noise σ_i = Δ C / (m_i μ0), the same μ0 for all.
        None: every client draws batches of ``batch_size``.
    sensitivity : float, default=2.0
        Δ, what a step's mean moves by in units of C / B as the accountant
        models it: the model's :func:`~skfedriem.privacy.clipped_gradient_diameter`
        with fixed-size batches, 2 under Poisson sampling
        (:func:`~skfedriem.privacy.mechanisms.step_mechanism.sensitivity_factor`).
    count_noise_std : float, default=0.0
        σ_b of every step's count of unclipped records (``clip="auto"``); 0: none.
    gradient_mu0 : float or None, default=None
        μ_g, the gradient's part of μ0 (:func:`~skfedriem.federated.adaptive_clip.split_mu0`);
        None: all of μ0.
    encoding : DistributedEncoding or None, default=None
        ``noise="distributed"``: the grid, modulus, noise share, K and t of
        every round (:func:`~skfedriem.privacy.mechanisms.discrete.plan_encoding`); μ0 is
        then the Gaussian's at the honest shares' variance, Δ2 / √V (the
        ledger charges the Skellam mechanism itself), and ``noise_std`` the
        noise std, per coordinate, of the server's decoded mean step,
        √V / (s B_total). None: local noise.

    Attributes
    ----------
    basis : tuple
        What the plan was made from (:func:`plan_basis`), set by
        :func:`plan_run` alone: a trainer given the plan uses it only for the
        same basis, and a plan built or edited by hand (``dataclasses.replace``)
        has none, so no trainer takes it. It holds the accounting method
        itself, compared by identity: a plan is for the process that made it
        (a pickled or deep-copied one is refused; plan again).
    """

    batch_size: int
    local_steps: tuple[int, ...]
    sample_rate: float
    steps_per_round: int
    total_steps: int
    mu0: float | None
    noise_std: float
    clip: float
    accounting: str = "rfedproj"
    sampling: str = "fixed"
    batch_sizes: tuple[int, ...] | None = None
    sensitivity: float = 2.0
    count_noise_std: float = 0.0
    gradient_mu0: float | None = None
    encoding: DistributedEncoding | None = None
    basis: tuple = field(default=(), init=False, repr=False, compare=False)

    def client_batch_size(self, client: int) -> int:
        """B_i: ``batch_size``, or client i's whole size in a full-batch run."""
        return self.batch_size if self.batch_sizes is None else self.batch_sizes[client]

    @property
    def placement(self) -> NoisePlacement:
        """Where the planned noise is added (:func:`~skfedriem.federated.noise_placement.placement_of`)."""
        return placement_of(self.encoding)

    def client_noise_std(self, client: int) -> float:
        """σ_i = Δ C / (B_i μ_g): ``noise_std`` unless the run is full-batch (0 for a non-private run, and with
        distributed noise, whose clients add no Gaussian noise)."""
        return self.placement.client_noise_std(self, client)

    @property
    def adaptive_clip(self) -> bool:
        """Whether the clip follows a private quantile estimate (``clip="auto"``): the steps release a count of
        the records within the clip (with its own noise, or in the encoding's last coordinate)."""
        return self.count_noise_std > 0 or getattr(self.encoding, "count_scale", 0) > 0

    @property
    def n_rounds(self) -> int:
        """T = total_steps / τ."""
        return self.total_steps // self.steps_per_round


def noise_swamps_signal(plan: PrivacyPlan, clients_per_round: int = 1) -> bool:
    """Whether even the best direction of the whole run carries less signal than noise.

    Over the run's T τ steps, the server's mean of the clients' clipped means,
    summed along any one direction, reaches at most T τ C, while its summed
    noise has std σ̄ √(T τ) along it, with σ̄ = √(mean of σ_i² / k) the noise
    std of the mean of k clients' steps (σ_i, client i's per-step noise std).
    When σ̄ > √(T τ) C the noise exceeds the largest possible signal in every
    direction: nothing can be learnt, and the fit is a random walk of the
    noise.

    Parameters
    ----------
    plan : PrivacyPlan
    clients_per_round : int, default=1
        k, the clients the server averages each round.

    Returns
    -------
    bool

    Examples
    --------
    >>> from skfedriem.federated import FederationSettings
    >>> plan = plan_run([20] * 100, list(range(100)), FederationSettings(eps=0.1, batch_size=20, n_rounds=200))
    >>> noise_swamps_signal(plan), noise_swamps_signal(plan, clients_per_round=100)
    (True, False)
    """
    if plan.mu0 is None or math.isinf(plan.clip):
        return False
    return mean_step_noise(plan, clients_per_round) > math.sqrt(plan.total_steps) * plan.clip


def mean_step_noise(plan: PrivacyPlan, clients_per_round: int) -> float:
    """σ̄, the noise std per coordinate of the server's mean of k clients' steps: √(mean of σ_i² / k) with local
    noise, the decoded mean step's with distributed noise (0 without privacy).

    Parameters
    ----------
    plan : PrivacyPlan
    clients_per_round : int
        k.

    Returns
    -------
    float
    """
    return plan.placement.mean_step_noise(plan, clients_per_round)


def signal_to_noise(plan: PrivacyPlan, clients_per_round: int, dimension: int) -> float:
    """√(T τ) C / (σ̄ √d): the most the run's clipped mean steps can add up to along one direction (T τ C), against
    the norm of the noise they carry in the model's d coordinates (σ̄ √(T τ d)); inf without privacy.

    A model learns only where the signal outgrows the noise in every coordinate it has: more coordinates (64
    channels' 2,080 tangent features against 9 channels' 45) spread the same budget thinner. Compare with
    :data:`LEARNABLE_SIGNAL_TO_NOISE`.

    Parameters
    ----------
    plan : PrivacyPlan
    clients_per_round : int
        k, the clients the server averages each round.
    dimension : int
        d, the model's trainable coordinates.

    Returns
    -------
    float

    Examples
    --------
    >>> from skfedriem.federated import FederationSettings
    >>> plan = plan_run([30] * 24, list(range(24)), FederationSettings(eps=10.0, batch_size=30, n_rounds=200))
    >>> round(signal_to_noise(plan, 24, 92), 1), round(signal_to_noise(plan, 24, 4162), 1)
    (15.3, 2.3)
    """
    noise = mean_step_noise(plan, clients_per_round)
    if plan.mu0 is None or noise == 0:
        return math.inf
    return math.sqrt(plan.total_steps) * plan.clip / (noise * math.sqrt(dimension))


def warn_if_noise_swamps(plan: PrivacyPlan, clients_per_round: int) -> None:
    """A :class:`~skfedriem.exceptions.NoiseSwampsSignalWarning` when :func:`noise_swamps_signal`, with the figures.

    Parameters
    ----------
    plan : PrivacyPlan
    clients_per_round : int
    """
    if noise_swamps_signal(plan, clients_per_round):
        warn_user(f"The noise swamps the signal: the noise std of each step of the {clients_per_round} clients' mean "
                  f"exceeds √(T τ) C = {math.sqrt(plan.total_steps) * plan.clip:.3g}, the most the "
                  f"{plan.total_steps} steps' clipped gradients can add up to along any direction against the noise "
                  f"(each client's σ = {plan.noise_std:.3g}): the fit will be a random walk. Raise eps, or give the "
                  "clients more records per step (a larger batch_size) or fewer rounds.", NoiseSwampsSignalWarning)


def check_client_sizes(client_sizes: list[int], client_names: list, unit: PrivacyUnit) -> None:
    """ValueError naming the first client with fewer than 2 records (it cannot be subsampled), or with no subject.

    Parameters
    ----------
    client_sizes : list of int
        Each client's number of privacy units (records, or subjects).
    client_names : list
    unit : PrivacyUnit
        For a subject, one is enough: it is then the client's whole batch (client-level privacy).
    """
    least = 2 if unit.kind == "record" else 1
    for name, size in zip(client_names, client_sizes):
        if size < least:
            raise ValueError(
                f"Client {name!r} holds {size} {unit.kind}(s); every client needs at least {least}"
                + (" (a one-record client cannot be subsampled)." if least == 2 else ".")
            )


def plan_basis(client_sizes: list[int], settings: FederationSettings, accounting: str | RunAccounting,
               diameter: float, dimension: int = 0) -> tuple:
    """What :func:`plan_run` plans from: the clients' sizes, the accounting method, Δ and the settings it reads.

    Two plans of the same basis are the same plan, so a plan made once (by a
    planner that needed σ to choose the schedule) serves the run it was made for.

    Parameters
    ----------
    client_sizes : list of int
    settings : FederationSettings
    accounting : str or RunAccounting
    diameter : float
    dimension : int, default=0
        The model's trainable coordinates (the grid of distributed noise).

    Returns
    -------
    tuple
    """
    dimension = running_placement(settings).planning_dimension(dimension)
    return (tuple(int(m) for m in client_sizes), get_accounting(accounting), float(diameter), dimension,
            *(getattr(settings, name) for name in PLANNED_FROM))


def plan_run(
    client_sizes: list[int],
    client_names: list,
    settings: FederationSettings,
    *,
    accounting: RunAccounting | None = None,
    diameter: float = 2.0,
    dimension: int = 0,
) -> PrivacyPlan:
    """Clamp B, fix each client's τ_i and calibrate σ for the settings' (eps, delta).

    Accounting: q = B / m⋆ and τ = max τ_i over the whole
    run, whatever the participation (the server chooses and sees S_t, so
    client sampling gives no amplification). σ comes from the registered
    accounting method (:func:`~skfedriem.privacy.accounting.accounting_methods.get_accounting`).

    Parameters
    ----------
    client_sizes : list of int
        m_i, records of each client (subjects, with ``settings.privacy_unit="subject"``; k per subject with
        ``settings.records_per_subject`` k).
    client_names : list
        The clients' names, for messages.
    settings : FederationSettings
        B (``batch_size``; None: full batches, each client's step uses all its
        records, q = 1, with its own noise σ_i = Δ C / (m_i μ0), so every
        client spends the same privacy), T, τ (``local_steps``, else
        ``local_epochs``: τ_i = ⌈local_epochs · m_i / B⌉ without privacy, and
        under privacy the smallest client's ⌈local_epochs · m⋆ / B⌉ for every
        client, the count the round is charged at), (ε, δ), C and the sampling.
    accounting : RunAccounting, optional
        The accounting method (default: the one ``settings`` names).
    diameter : float, default=2.0
        Δ, the model's :func:`~skfedriem.privacy.clipped_gradient_diameter`:
        a step's mean moves by at most Δ C / B when one record is replaced.
    dimension : int, default=0
        d, the model's trainable coordinates: ``noise="distributed"`` needs it
        (its grid).

    Returns
    -------
    PrivacyPlan

    Examples
    --------
    >>> from skfedriem.federated import FederationSettings
    >>> plan = plan_run([100, 200], ["a", "b"], FederationSettings(batch_size=10, n_rounds=50, local_steps=5,
    ...                                                            eps=4.0))
    >>> plan.sample_rate, plan.total_steps
    (0.1, 250)
    """
    method = get_accounting(settings.accounting if accounting is None else accounting)
    if check_noise_placement(settings, "The run").secure_sum:
        plan = _distributed_plan(client_sizes, client_names, settings, method, diameter, dimension)
        object.__setattr__(plan, "basis", plan_basis(client_sizes, settings, method, diameter, dimension))
        return plan
    method.check_sampling(settings.sampling)
    method.check_group(settings.unit.group_size)
    check_client_sizes(client_sizes, client_names, settings.unit)
    private = settings.eps is not None and not math.isinf(settings.eps)
    batch_size, full_batch = _batch_size(client_sizes, client_names, settings)
    taus = _local_steps(client_sizes, batch_size, full_batch, private, settings)
    m_star = min(client_sizes)
    q, tau = batch_size / m_star, max(taus)
    factor = sensitivity_factor(diameter, settings.sampling)
    shape = dict(batch_size=batch_size, local_steps=taus, sample_rate=q, steps_per_round=tau,
                 total_steps=settings.n_rounds * tau, accounting=method.name, sampling=settings.sampling,
                 batch_sizes=tuple(int(m) for m in client_sizes) if full_batch else None, sensitivity=factor)
    plan = _calibrated(shape, settings, method, private, m_star)
    object.__setattr__(plan, "basis", plan_basis(client_sizes, settings, method, diameter, dimension))  # plan_run's mark
    return plan


def _distributed_plan(client_sizes: list[int], client_names: list, settings: FederationSettings,
                      method: RunAccounting, diameter: float, dimension: int) -> PrivacyPlan:
    """One step a round, the Skellam noise of the K − t honest shares calibrated to (ε, δ), the grid and modulus."""
    clients, colluders, dropouts = distributed_clients(len(client_sizes), settings)
    if dimension < 1:
        raise ValueError(f"noise='distributed' needs a model with trainable parameters (its grid has one "
                         f"coordinate each). Got dimension={dimension!r}.")
    method.check_sampling(settings.sampling)
    method.check_group(settings.unit.group_size)
    check_client_sizes(client_sizes, client_names, settings.unit)
    batch_size, full_batch = _batch_size(client_sizes, client_names, settings)
    mean_batch, total_batch = _round_batch(client_sizes if full_batch else [batch_size] * len(client_sizes),
                                           clients, settings.sampling)
    m_star = min(client_sizes)
    q = batch_size / m_star
    group = settings.unit.group_size

    def calibrate(l2: float, l1: float) -> float:  # for the unit, charged as each client's StepPlan charges it
        rate, l2, l1 = group_step(q, l2, l1, group)
        return method.calibrate_variance(settings.eps, settings.delta, sample_rate=rate, n_steps=settings.n_rounds,
                                         sampling=settings.sampling, l2=l2, l1=l1)

    # clip="auto": the grid is planned at C_0 (each round's follows its clip) and the count takes its share of Δ2²
    clip, count_share = (INITIAL_CLIP, COUNT_SHARE) if settings.clip == "auto" else (settings.clip, 0.0)
    encoding = plan_encoding(dimension, clip, total_batch, clients, colluders, calibrate, count_share, dropouts)
    l2 = encoding.charged_step(clip, q, group)[1]
    return PrivacyPlan(batch_size=batch_size, local_steps=tuple(1 for _ in client_sizes), sample_rate=q,
                       steps_per_round=1, total_steps=settings.n_rounds, mu0=l2 / math.sqrt(encoding.central_variance),
                       noise_std=math.sqrt(encoding.central_variance) / (encoding.scale * mean_batch),
                       clip=clip, accounting=method.name, sampling=settings.sampling,
                       batch_sizes=tuple(int(m) for m in client_sizes) if full_batch else None,
                       sensitivity=sensitivity_factor(diameter, settings.sampling), encoding=encoding)


def _round_batch(batches: list[int], clients: int, sampling: str) -> tuple[float, float]:
    """(the largest round's total batch, and what its modulus is sized for): the K largest batches, and under
    Poisson sampling 5 standard deviations more (a batch exceeds its mean by that only rarely)."""
    total = float(sum(sorted(batches, reverse=True)[:clients]))
    return total, total if sampling == "fixed" else total + 5 * math.sqrt(total) + 5


def distributed_clients(n_clients: int, settings: FederationSettings) -> tuple[int, int, int]:
    """(K, t, d): the clients of a round, how many may drop out or collude (``colluders``, else ⌈K / 10⌉, at least
    1 when K > 1) and how many more may drop out (``dropouts``); ValueError unless t + d < K.

    Parameters
    ----------
    n_clients : int
    settings : FederationSettings

    Returns
    -------
    tuple of int
    """
    clients = n_clients if settings.clients_per_round is None else min(settings.clients_per_round, n_clients)
    colluders = settings.colluders
    if colluders is None:
        colluders = 0 if clients == 1 else max(1, math.ceil(clients / 10))
    if colluders >= clients:
        raise ValueError(f"The 'colluders' parameter must be below the {clients} clients of a round (the others' "
                         f"shares carry the noise). Got colluders={settings.colluders!r} instead.")
    if colluders + settings.dropouts >= clients:
        raise ValueError(f"The 'dropouts' parameter must leave at least one honest answer: t + d below the {clients} "
                         f"clients of a round (t = {colluders}). Got dropouts={settings.dropouts!r} instead.")
    return clients, int(colluders), int(settings.dropouts)


def _calibrated(shape: dict, settings: FederationSettings, method: RunAccounting, private: bool,
                m_star: int) -> PrivacyPlan:
    """The plan of ``shape`` with σ calibrated to the settings' (ε, δ) (none without privacy)."""
    factor, batch_size = shape["sensitivity"], shape["batch_size"]
    if not private:
        return PrivacyPlan(**shape, mu0=None, noise_std=0.0, clip=math.inf)
    if settings.delta >= 1 / m_star:
        warn_user(f"delta={settings.delta:g} is not small against 1/m⋆ = 1/{m_star}: (eps, delta)-DP at this delta "
                  "allows leaking a whole record of the smallest client.")
    group = {} if settings.unit.group_size == 1 else {"group_size": settings.unit.group_size}
    mu0 = method.calibrate(settings.eps, settings.delta, sample_rate=shape["sample_rate"],
                           steps_per_round=shape["steps_per_round"], n_rounds=settings.n_rounds,
                           sampling=settings.sampling, **group)
    if settings.clip != "auto":
        return PrivacyPlan(**shape, mu0=mu0, noise_std=factor * settings.clip / (batch_size * mu0), clip=settings.clip)
    mu_g, count_noise_std = split_mu0(mu0)
    return PrivacyPlan(**shape, mu0=mu0, noise_std=factor * INITIAL_CLIP / (batch_size * mu_g), clip=INITIAL_CLIP,
                       count_noise_std=count_noise_std, gradient_mu0=mu_g)


def _batch_size(client_sizes: list[int], client_names: list, settings: FederationSettings) -> tuple[int, bool]:
    """B after clamping to the smallest client (with a warning), and whether the run is full-batch (B = None)."""
    smallest = min(range(len(client_sizes)), key=client_sizes.__getitem__)
    m_star = client_sizes[smallest]
    if settings.batch_size is None:
        return m_star, True
    if settings.batch_size > m_star:
        accounted = " (the accountant uses this value)" if settings.eps is not None else ""
        warn_user(f"batch_size={settings.batch_size} is larger than client {client_names[smallest]!r}, which holds "
                  f"{m_star} {settings.privacy_unit}s: using batch_size={m_star}{accounted}.")
        return m_star, False
    return settings.batch_size, False


def _local_steps(client_sizes: list[int], batch_size: int, full_batch: bool, private: bool,
                 settings: FederationSettings) -> tuple[int, ...]:
    """τ_i of every client."""
    if settings.local_steps is not None:
        return tuple(int(settings.local_steps) for _ in client_sizes)
    if full_batch:
        return tuple(max(1, math.ceil(settings.local_epochs)) for _ in client_sizes)
    if not private:
        return tuple(max(1, math.ceil(settings.local_epochs * m / batch_size)) for m in client_sizes)
    # a round is charged at the largest τ_i and the largest rate B / m⋆ together (round_release), so a client
    # with more steps than the smallest would make every client pay for τ_max steps at the smallest client's
    # rate: clients of 31 and 30 records at B = 30 were charged two full-batch steps a round while the smallest
    # ran one. Under privacy every client takes the smallest client's count, and the charge is what it runs.
    tau_star = max(1, math.ceil(settings.local_epochs * min(client_sizes) / batch_size))
    return tuple(tau_star for _ in client_sizes)
