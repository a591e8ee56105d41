"""FederatedPCA's hyper-parameters chosen from public quantities only: the solver, T, τ, B and the step size.

Nothing here sees a record. A plan depends on (ε, δ), the clients' sizes,
d, p, the clip norm C and the manifold: change the data but keep those and
the plan is the same.

**The solver.** ``benchmarks/pca_solvers.py`` compared the one-shot noisy
second-moment release (``"covariance"``) with the Riemannian solver, at the
paper's settings and planned, on digits and on synthetic federations for d
from 16 to 1024, p ∈ {5, 20}, 3 and 10 clients and ε from 0.5 to 10: the
one-shot release was as good or better in 32 of the 33 configurations (the
exception: d = 16, p = 5, 3 clients, ε = 1, where the planned solver's gap
was 0.77 of it), and at d = 1024, ε = 1 neither beat a random subspace. The
subspace's error, to first order, comes from the p(d − p) block of the noise
that couples the subspace with its complement (Davis–Kahan), in both solvers;
the one-shot release pays for that block once, the iterative solver at every
step. So ``"auto"`` picks ``"covariance"``, except where it cannot serve:
continuing a fit (``warm_start``), starting from a public ``init``, or a
d × d moment too large to hold (d > ``MAX_COVARIANCE_FEATURES``).

**The Riemannian schedule.** With full batches (no subsampling: the
accountant is then exact Gaussian DP, and in its central-limit regime
subsampling buys no signal-to-noise anyway), one local step per round (no
client drift), and a step size η, the noise left in the iterate is governed
by the horizon H = η T τ and by the signal-to-noise scale

    s = μ / (C √d_M · (1/n) √(Σ_i m_i⁻²)),

where μ is the Gaussian-DP parameter that (ε, δ) allows for the whole run,
d_M the manifold's dimension and m_i the client sizes (the server averages
the n clients with equal weights; s is the inverse of the noise norm on the
averaged step of a one-step run). The noise the run injects, η σ per step
over T τ steps, has norm about 2H/s, so a horizon proportional to s keeps it
bounded while going as far as the privacy budget allows: H = ``HORIZON_PER_SNR``
· s, reached with the largest stable step η = ``MAX_STEP`` / C. The two
constants come from a grid of full-batch (T, η) on digits and on a synthetic
federation (``python benchmarks/pca_solvers.py --dims 64 --components 5
--sweep-epsilons 1 4 10 --planner-grid``): at ε = 1, 4 and 10 the planned
schedule's gap was within 0.9–1.3× of the grid's best.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from .._utils.plan_text import PrintedAsTable, plan_table
from .._utils.user_warnings import warn_user
from ..exceptions import NoiseSwampsSignalWarning
from ..manifolds import Grassmann, Stiefel
from ..privacy import gdp_mu_for_epsilon

__all__ = ["HORIZON_PER_SNR", "LEARNABLE_SIGNAL_TO_NOISE", "MAX_COVARIANCE_FEATURES", "MAX_STEP", "PLANNED", "PCAPlan",
           "choose_solver", "plan_pca"]

HORIZON_PER_SNR = 1.0
"""H = η T τ per unit of the signal-to-noise scale s."""
LEARNABLE_SIGNAL_TO_NOISE = 1.0
"""Below this s, the noise of one full-batch step outweighs the most a step's clipped records can carry: the fit
warns (a :class:`~skfedriem.exceptions.NoiseSwampsSignalWarning`)."""
MAX_STEP = 0.5
"""The largest step size (times C): the best η of the calibration grid was 0.5 in 5 of 6 cells, 1 in the other."""
MAX_COVARIANCE_FEATURES = 4096
"""Above this d, ``"auto"`` does not hold d × d moments (128 MiB each in float64) and picks ``"riemannian"``."""
MIN_ROUNDS, MAX_ROUNDS = 10, 1000
NON_PRIVATE_ROUNDS = 200

Auto = Literal["auto"]

_PLANNED_HORIZON = (
    "planned by :func:`~skfedriem.decomposition.planning.plan_pca` from public quantities only (ε, δ, the client "
    "sizes, d, p, C): full batches, one local step, a horizon η T proportional to the signal-to-noise the budget "
    "allows; ``plan_`` says what and why.")
#: What ``"auto"`` (FederatedPCA's default) means for each setting :func:`plan_pca` plans.
PLANNED: dict[str, dict[str, str]] = {
    "n_rounds": {"auto": _PLANNED_HORIZON},
    "local_steps": {"auto": "1."},
    "batch_size": {"auto": "every client's whole records at every step, no subsampling."},
    "lr": {"auto": "0.5 / C, or less when the planned horizon is short."},
}


@dataclass(frozen=True)
class PCAPlan(PrintedAsTable):
    """What :func:`plan_pca` chose, and from what.

    Parameters
    ----------
    solver : {"riemannian", "covariance"}
    n_rounds : int
        T.
    local_steps : int
        τ.
    batch_size : int or None
        B; None: every client uses all its records at every step.
    lr : float
        η.
    mu : float
        The Gaussian-DP parameter of the whole run that (ε, δ) allows (inf without privacy).
    signal_to_noise : float
        s (inf without privacy).
    reason : str
        Why this solver, in words.
    """

    solver: str
    n_rounds: int
    local_steps: int
    batch_size: int | None
    lr: float
    mu: float
    signal_to_noise: float
    reason: str

    def __str__(self) -> str:
        rows = {"solver": self.solver, "n_rounds": self.n_rounds, "local_steps": self.local_steps,
                "batch_size": "full batches" if self.batch_size is None else self.batch_size, "lr": self.lr,
                "mu (whole run)": self.mu, "signal_to_noise": self.signal_to_noise}
        return plan_table("PCAPlan", rows, self.reason)

    @property
    def horizon(self) -> float:
        """H = η T τ, how far the schedule goes."""
        return self.lr * self.n_rounds * self.local_steps


def plan_pca(
    *,
    eps: float | None,
    delta: float,
    client_sizes: list[int],
    n_features: int,
    n_components: int,
    clip: float = 1.0,
    manifold: str = "grassmann",
    solver: Literal["auto", "riemannian", "covariance"] = "auto",
    n_rounds: int | Auto = "auto",
    local_steps: int | Auto = "auto",
    batch_size: int | Auto | None = "auto",
    lr: float | Auto = "auto",
    continues: bool = False,
    public_init: bool = False,
) -> PCAPlan:
    """Choose FederatedPCA's solver and schedule from public quantities; explicit values are kept.

    Parameters
    ----------
    eps : float or None
        Target ε; None: no privacy.
    delta : float
    client_sizes : list of int
        m_i, the number of records of each client (public).
    n_features, n_components : int
        d and p.
    clip : float, default=1.0
        C.
    manifold : {"grassmann", "stiefel"}, default="grassmann"
    solver : {"auto", "riemannian", "covariance"}, default="auto"
    n_rounds, local_steps, batch_size, lr : "auto" or a value, default="auto"
        Values other than "auto" are kept; the others are chosen around them
        (e.g. a fixed T gets η = H / (T τ)).
    continues : bool, default=False
        The fit continues an earlier one (``warm_start``).
    public_init : bool, default=False
        The fit starts from a given public subspace.

    Returns
    -------
    PCAPlan

    Notes
    -----
    s assumes every client takes part in every round (the default
    ``clients_per_round=None``); with fewer per round the plan over-estimates
    s, so set ``n_rounds`` or ``lr`` by hand there. A batch size set by hand is
    used by the accountant as usual; the horizon is then still planned from the
    full-batch s (in the accountant's central-limit regime subsampling leaves
    the noise per unit of progress unchanged).

    Examples
    --------
    >>> plan = plan_pca(eps=4.0, delta=1e-5, client_sizes=[600, 600, 600], n_features=64, n_components=5,
    ...                 solver="riemannian")
    >>> plan.local_steps, plan.batch_size, round(plan.lr, 2), plan.n_rounds
    (1, None, 0.5, 112)
    >>> plan_pca(eps=4.0, delta=1e-5, client_sizes=[600, 600, 600], n_features=64, n_components=5).solver
    'covariance'
    """
    if not client_sizes or min(client_sizes) < 1:
        raise ValueError(f"The 'client_sizes' parameter must be a non-empty list of positive sizes. "
                         f"Got {client_sizes!r} instead.")
    mu = math.inf if eps is None else gdp_mu_for_epsilon(eps, delta)
    n = len(client_sizes)
    d_m = (Grassmann if manifold == "grassmann" else Stiefel)(n_features, n_components).dim
    s = mu / (clip * math.sqrt(d_m) * math.sqrt(sum(m ** -2.0 for m in client_sizes)) / n)
    _warn_if_unlearnable(s, n_features, d_m)
    solver, reason = choose_solver(solver, n_features, continues=continues, public_init=public_init)
    if solver == "covariance":
        return PCAPlan("covariance", 1, 1, None, 1.0, mu, s, reason)

    tau = 1 if local_steps == "auto" else int(local_steps)
    batch = None if batch_size == "auto" else batch_size
    max_lr = MAX_STEP / clip
    if eps is None:
        horizon = NON_PRIVATE_ROUNDS * max_lr * tau
    else:
        horizon = HORIZON_PER_SNR * s
    if n_rounds == "auto":
        step = max_lr if lr == "auto" else float(lr)
        rounds = min(max(math.ceil(horizon / (step * tau)), MIN_ROUNDS), MAX_ROUNDS)
    else:
        rounds = int(n_rounds)
    if lr == "auto":
        step = min(horizon / (rounds * tau), max_lr)
    else:
        step = float(lr)
    return PCAPlan("riemannian", rounds, tau, batch, step, mu, s, reason)


def _warn_if_unlearnable(s: float, n_features: int, d_m: int) -> None:
    """A :class:`~skfedriem.exceptions.NoiseSwampsSignalWarning` when s < :data:`LEARNABLE_SIGNAL_TO_NOISE`."""
    if s >= LEARNABLE_SIGNAL_TO_NOISE:
        return
    warn_user(f"This subspace will likely be no better than a random one: the noise of one full-batch release of "
              f"the clients' mean (one step, or the one-shot covariance) has a norm 1/s = {1 / s:.3g} times the "
              f"largest signal it can carry (s = {s:.3g}, the plan's signal_to_noise, over the manifold's {d_m} "
              f"dimensions for {n_features} features). Fewer features (a channel subset: 9 channels give 45 "
              "log-covariance features where 64 give 2,080), fewer components, a larger eps, or more records per "
              "client raise it.", NoiseSwampsSignalWarning)


def choose_solver(solver: str, n_features: int, *, continues: bool = False,
                  public_init: bool = False) -> tuple[str, str]:
    """The solver ``"auto"`` stands for (see the module docstring), and why; other values are kept.

    Parameters
    ----------
    solver : {"auto", "riemannian", "covariance"}
    n_features : int
        d.
    continues : bool, default=False
        The fit continues an earlier one (``warm_start``).
    public_init : bool, default=False
        The fit starts from a given public subspace.

    Returns
    -------
    solver : {"riemannian", "covariance"}
    reason : str
    """
    if solver != "auto":
        return solver, f"solver={solver!r} was given"
    if continues:
        return "riemannian", "warm_start continues the Riemannian iterates (a second one-shot release cannot)"
    if public_init:
        return "riemannian", "a public initial subspace is a starting point for the Riemannian solver"
    if n_features > MAX_COVARIANCE_FEATURES:
        return "riemannian", f"d = {n_features} > {MAX_COVARIANCE_FEATURES}: d x d moments are too large to hold"
    return "covariance", ("the one-shot release was as good or better in 32 of 33 measured configurations "
                          "(d <= 1024); see the user guide, 'Choosing hyper-parameters'")
