"""Where the noise is added, as the object that answers for it: the settings each placement can honour.

``noise="local"`` (:class:`LocalNoise`): every client adds the whole
Gaussian noise to its own release, whatever the server runs.
``noise="distributed"`` (:class:`DistributedNoise`): every round is one step
of every selected client from θ_t, each releases its clipped sum on a public
grid with an integer share of the noise, and the server, which learns only
the sum (secure aggregation), steps once on it.

A placement chooses what the server does with a round's replies
(:meth:`NoisePlacement.server_strategy`), whether rounds carry a public
rotation and whether a round sent again is charged again. It lists the
settings it cannot honour (:meth:`NoisePlacement.refusals`)
and :func:`check_noise_placement` refuses them by name before anything runs:
a setting the run would not use is never accepted silently. The estimators
check their own parameters with it before any release (``"auto"``: planned,
checked once planned) and the plan checks the settings it plans from.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from .aggregation import Aggregation
from .server_strategy import AverageSubmissions, ServerStrategy, StepOnSum

__all__ = ["DistributedNoise", "LocalNoise", "NOISE_PLACEMENTS", "NoisePlacement", "check_noise_placement",
           "placement_of", "running_placement"]


def _given(values: Mapping[str, Any], name: str, default: Any) -> Any:
    """A setting's value, its default when absent, and None when the planner will choose it (``"auto"``)."""
    value = values.get(name, default)
    return None if isinstance(value, str) and value == "auto" else value


class NoisePlacement(ABC):
    """Where the noise of a round is added: the settings it can honour, the server's strategy, how rounds are sent
    and charged."""

    #: The ``noise`` setting's value.
    name: str
    #: Each round carries a public rotation, drawn by the server after its selection from its public stream.
    rotates: bool = False
    #: A round sent again (after a server's restart) is a new release, with fresh noise: charged again.
    recharges_resent_rounds: bool = False
    #: Each client's own release guarantees less than the run's ε: ``history_`` reports ``local_epsilon`` too.
    reports_local_epsilon: bool = False
    #: A client's release reaches the server only inside a secure sum of the round's clients (a share of the noise
    #: protects nothing alone): a deployment runs its rounds under secure aggregation.
    secure_sum: bool = False
    #: A round is one step of every selected client from θ_t (so a round's steps and epochs are not the planner's to
    #: choose, and a client's batch is its whole share of the round).
    one_step_a_round: bool = False

    @abstractmethod
    def client_noise_std(self, plan, client: int) -> float:
        """σ_i, the Gaussian noise std client i adds to each step of a planned run (0 when it adds none).

        Parameters
        ----------
        plan : PrivacyPlan
        client : int

        Returns
        -------
        float
        """

    @abstractmethod
    def mean_step_noise(self, plan, clients_per_round: int) -> float:
        """σ̄, the noise std per coordinate of the server's mean of k clients' steps, as the plan certifies it.

        Parameters
        ----------
        plan : PrivacyPlan
        clients_per_round : int
            k.

        Returns
        -------
        float
        """

    def released_noise_factor(self, plan) -> float:
        """How much more noise std the server's mean really carries than :meth:`mean_step_noise` (1: none more).

        Parameters
        ----------
        plan : PrivacyPlan

        Returns
        -------
        float
        """
        return 1.0

    def planning_dimension(self, dimension: int) -> int:
        """What of the model's d trainable coordinates shapes a plan (0: nothing, the plan is the same for any d).

        Parameters
        ----------
        dimension : int

        Returns
        -------
        int
        """
        return 0

    def round_encoding(self, encoding, rotation_seed: int, clip: float, planned_clip: float):
        """The plan's ``encoding`` with one round's public rotation and its clip's grid (None: the round has none).

        Parameters
        ----------
        encoding : DistributedEncoding or None
        rotation_seed : int
        clip : float
            The round's C_t.
        planned_clip : float
            The C the encoding was planned at.

        Returns
        -------
        DistributedEncoding or None
        """
        return None

    def check_shares(self, encoding, clients: int, colluders: int, dropouts: int = 0) -> None:
        """ValueError unless the plan's ``encoding`` sized its noise shares for a round of K ``clients`` with t
        ``colluders`` and d ``dropouts`` (nothing to check where no shares are drawn).

        Parameters
        ----------
        encoding : DistributedEncoding or None
        clients : int
        colluders : int
        dropouts : int, default=0
        """
        return None

    @abstractmethod
    def server_strategy(self, module: nn.Module, aggregation: Aggregation, optimizer,
                        batch_size: Callable[[int], int]) -> ServerStrategy:
        """What the server does with a round's replies under this placement.

        Parameters
        ----------
        module : torch.nn.Module
            The server's model.
        aggregation : Aggregation
            The run's rule.
        optimizer : str or callable
            The run's optimiser.
        batch_size : callable
            ``batch_size(i)``: client i's public batch size.

        Returns
        -------
        ServerStrategy
        """

    @abstractmethod
    def refusals(self, values: Mapping[str, Any]) -> list[str]:
        """One sentence per setting in ``values`` this placement cannot honour, naming it and its value.

        Parameters
        ----------
        values : mapping of str to object
            Settings by name (an estimator's parameters, or a
            :class:`~skfedriem.federated.FederationSettings`' fields); a value
            ``"auto"`` is not checked (the planner chooses it).

        Returns
        -------
        list of str
        """


class LocalNoise(NoisePlacement):
    """Each client adds the whole noise: every setting of the protocol runs under it, but ``colluders``."""

    name = "local"

    def client_noise_std(self, plan, client: int) -> float:
        """``noise_std``, or in a full-batch run Δ C / (B_i μ_g) at client i's own B_i (0 without privacy)."""
        if plan.batch_sizes is None or plan.mu0 is None:
            return plan.noise_std
        mu_g = plan.mu0 if plan.gradient_mu0 is None else plan.gradient_mu0
        return plan.sensitivity * plan.clip / (plan.batch_sizes[client] * mu_g)

    def mean_step_noise(self, plan, clients_per_round: int) -> float:
        """√(mean of σ_i² / k): the clients' own noises, averaged."""
        sigmas = [self.client_noise_std(plan, i) for i in range(len(plan.local_steps))]
        return math.sqrt(sum(s * s for s in sigmas) / len(sigmas) / clients_per_round)

    def server_strategy(self, module, aggregation, optimizer, batch_size) -> ServerStrategy:
        return AverageSubmissions(module, aggregation)

    def refusals(self, values: Mapping[str, Any]) -> list[str]:
        out = []
        colluders = _given(values, "colluders", None)
        if colluders is not None:
            out.append(f"colluders={colluders!r} sizes the noise shares of noise='distributed'; with noise='local' "
                       "every client adds the whole noise itself, which no colluding client lessens. Leave colluders "
                       "None.")
        dropouts = _given(values, "dropouts", 0)
        if dropouts not in (0, None):
            out.append(f"dropouts={dropouts!r} keeps the noise shares of noise='distributed' whole when clients drop "
                       "out; with noise='local' every client adds the whole noise itself and a round runs on whoever "
                       "answers. Leave dropouts=0.")
        return out


class DistributedNoise(NoisePlacement):
    """One step a round from θ_t, the server stepping once on the decoded sum (ProjAvg at τ = 1)."""

    name = "distributed"
    rotates = True
    recharges_resent_rounds = True  # fresh noise under fresh masks
    reports_local_epsilon = True
    secure_sum = True
    one_step_a_round = True

    def client_noise_std(self, plan, client: int) -> float:
        """0: a client adds no Gaussian noise, only its integer share of the Skellam noise."""
        return 0.0

    def mean_step_noise(self, plan, clients_per_round: int) -> float:
        """The decoded mean step's, the plan's ``noise_std`` (the K − t honest shares' noise)."""
        return plan.noise_std

    def released_noise_factor(self, plan) -> float:
        """√(K / (K − t)): every one of the K clients adds a share sized so that K − t of them carry the certified
        noise (the rounding's variance left out)."""
        encoding = plan.encoding
        return math.sqrt(encoding.clients / (encoding.clients - encoding.colluders))

    def planning_dimension(self, dimension: int) -> int:
        """d: the grid has one coordinate per trainable coordinate."""
        return int(dimension)

    def round_encoding(self, encoding, rotation_seed: int, clip: float, planned_clip: float):
        return encoding.with_seed(rotation_seed).for_clip(clip, planned_clip)

    def check_shares(self, encoding, clients: int, colluders: int, dropouts: int = 0) -> None:
        if (encoding.clients, encoding.colluders, encoding.dropouts) != (clients, colluders, dropouts):
            raise ValueError(f"The plan's encoding is for K = {encoding.clients} clients, t = {encoding.colluders}, "
                             f"d = {encoding.dropouts}; this run selects {clients} a round with t = {colluders}, "
                             f"d = {dropouts}.")

    def server_strategy(self, module, aggregation, optimizer, batch_size) -> ServerStrategy:
        return StepOnSum(module, optimizer, batch_size)

    def refusals(self, values: Mapping[str, Any]) -> list[str]:
        out = []
        aggregation = _given(values, "aggregation", "projavg")
        rule = aggregation.name if isinstance(aggregation, Aggregation) else aggregation
        if rule not in (None, "projavg"):
            out.append(f"aggregation={rule!r} combines each client's own iterate; under noise='distributed' the "
                       "server learns only the sum of the clients' clipped gradients and steps once on it from θ_t "
                       "(ProjAvg's step at one step a round). Leave aggregation='projavg'.")
        steps = _given(values, "local_steps", None)
        if steps not in (None, 0, 1):
            out.append(f"local_steps={steps!r}: a round of distributed noise is one step of every client from θ_t "
                       "(the server steps on their summed gradients). Leave local_steps None or 1.")
        epochs = _given(values, "local_epochs", 1.0)
        if epochs is not None and float(epochs) != 1.0:
            out.append(f"local_epochs={epochs!r}: a round of distributed noise is one step of every client from θ_t, "
                       "whatever the epochs. Leave local_epochs at 1.")
        if values.get("client_timings"):
            out.append("client_timings=True times each client's work on its records, which distributed noise keeps "
                       "from the server (it learns only the sum). Leave client_timings False.")
        return out


#: The placements by their ``noise`` value.
NOISE_PLACEMENTS: dict[str, NoisePlacement] = {p.name: p for p in (LocalNoise(), DistributedNoise())}


def _as_mapping(values: Mapping[str, Any] | Any) -> Mapping[str, Any]:
    if dataclasses.is_dataclass(values):
        return {f.name: getattr(values, f.name) for f in dataclasses.fields(values)}
    return values


def running_placement(values: Mapping[str, Any] | Any) -> NoisePlacement:
    """The placement a run of these settings runs under: the one ``values["noise"]`` names, and local noise where
    there is no privacy (``eps`` None: no noise is added anywhere). ValueError for an unknown name.

    Parameters
    ----------
    values : mapping of str to object, or FederationSettings
        Settings by name.

    Returns
    -------
    NoisePlacement
    """
    values = _as_mapping(values)
    name = values.get("noise", "local")
    placement = NOISE_PLACEMENTS.get(name)
    if placement is None:
        raise ValueError(f"The 'noise' parameter must be one of {sorted(NOISE_PLACEMENTS)}. Got {name!r} instead.")
    return placement if values.get("eps", None) is not None else NOISE_PLACEMENTS["local"]


def check_noise_placement(values: Mapping[str, Any] | Any, owner: str) -> NoisePlacement:
    """The placement the run runs under (:func:`running_placement`); ValueError naming every setting it cannot
    honour.

    Without privacy (``eps`` None) no noise is added anywhere: nothing is refused.

    Parameters
    ----------
    values : mapping of str to object, or FederationSettings
        Settings by name (see :meth:`NoisePlacement.refusals`).
    owner : str
        Who holds the settings, for the message (an estimator's name).

    Returns
    -------
    NoisePlacement

    Examples
    --------
    >>> check_noise_placement({"noise": "distributed", "eps": 4.0}, "run").name
    'distributed'
    >>> check_noise_placement({"noise": "distributed", "eps": 4.0, "aggregation": "rlavg"}, "run")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: run cannot honour with noise='distributed': aggregation='rlavg' combines ...
    """
    values = _as_mapping(values)
    placement = running_placement(values)
    refused = placement.refusals(values) if values.get("eps", None) is not None else []
    if refused:
        raise ValueError(f"{owner} cannot honour with noise={placement.name!r}: " + " ".join(refused))
    return placement


def placement_of(encoding) -> NoisePlacement:
    """The placement a planned run runs under: distributed where its plan has an encoding (a private run of
    ``noise="distributed"``), else local (a run without noise adds none anywhere).

    Parameters
    ----------
    encoding : DistributedEncoding or None
        The plan's.

    Returns
    -------
    NoisePlacement
    """
    return NOISE_PLACEMENTS["local" if encoding is None else "distributed"]
