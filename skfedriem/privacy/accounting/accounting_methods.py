"""How a run's noise is calibrated and its ε reported: accounting methods behind one interface, by name.

An accounting method turns (ε, δ) and a run's shape (sampling rate q, τ steps
per round, T rounds) into the per-step μ0 = 2C/(Bσ), a ledger of the steps
taken into the ε it certifies, several runs on the same records into the ε of
their composition (:meth:`RunAccounting.composed_epsilon`: a
:class:`~skfedriem.privacy.PrivacyBudget`, a deployed site's ledger) and a run
into the ε of a group of its units (:meth:`RunAccounting.group_epsilon`). The
round loop, budgets, sites and an estimator's ``epsilon_for_group`` only call
these on the method they were given (like Opacus' accountants, registered by
name), so a new method plugs in with :func:`register_accounting` without
touching any of them. ``"rfedproj"`` (the paper's whole-run composition) is
registered here; :mod:`skfedriem.baselines` registers ``"prirfed"``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..._utils.registry import Registry, registered_name
from .group import calibrate_group_mu0, group_epsilon
from .ledger import PrivacyAccountant, RunningEpsilon
from .skellam import calibrate_skellam_variance
from .subsampled_gaussian import DISCRETIZATION, calibrate_mu0

__all__ = ["ACCOUNTINGS", "ChargedRun", "RunAccounting", "WholeRunAccounting", "accounting_names", "get_accounting",
           "register_accounting"]


@dataclass(frozen=True)
class ChargedRun:
    """One run's charge to a ledger that composes runs (a budget, a site's): its steps and the shape it was planned
    with, which an accounting method may read.

    Parameters
    ----------
    ledger : PrivacyAccountant
        The steps charged.
    steps_per_round : int
        τ, the steps of one round (a ledger of one round: all of them).
    n_rounds : int
        T, the rounds the run was planned with.
    """

    ledger: PrivacyAccountant
    steps_per_round: int
    n_rounds: int

    @classmethod
    def of(cls, ledger: PrivacyAccountant, steps_per_round: int | None = None,
           n_rounds: int | None = None) -> ChargedRun:
        """A run of ``ledger``; without a shape, one round of all its steps."""
        return cls(ledger, int(steps_per_round or max(ledger.steps, 1)), int(n_rounds or 1))


class RunAccounting(ABC):
    """An accounting method: calibrates μ0 for a target (ε, δ) and reports the ε a ledger has spent.

    Attributes
    ----------
    name : str
        The name estimators take as ``accounting=``.
    samplings : tuple of str
        The batch samplings the method can account.
    accounts_groups : bool
        Whether :meth:`calibrate` takes ``group_size`` (runs charged per
        subject, each owning k of the records sampled): a method that does not
        is refused for them by :meth:`check_group`.
    composes_runs : bool
        Whether :meth:`composed_epsilon` composes several runs (what a budget
        of several fits and a deployed site's ledger need).
    noises : tuple of str
        Where the noise may be added in runs it calibrates: ``"local"``, and
        ``"distributed"`` when it implements :meth:`calibrate_variance` and
        reads a ledger of Skellam steps.

    Examples
    --------
    >>> from skfedriem.privacy import PrivacyAccountant, get_accounting
    >>> method = get_accounting("rfedproj")
    >>> mu0 = method.calibrate(2.0, 1e-5, sample_rate=0.1, steps_per_round=10, n_rounds=50, sampling="fixed")
    >>> ledger = PrivacyAccountant(); ledger.step(mu0=mu0, sample_rate=0.1, num_steps=500)
    >>> method.epsilon(ledger, 1e-5, steps_per_round=10, n_rounds=50) <= 2.0
    True
    """

    name: str
    samplings: tuple[str, ...] = ("fixed", "poisson")
    accounts_groups: bool = False
    composes_runs: bool = False
    noises: tuple[str, ...] = ("local",)

    @abstractmethod
    def calibrate(self, eps: float, delta: float, *, sample_rate: float, steps_per_round: int, n_rounds: int,
                  sampling: str) -> float:
        """The largest per-step μ0 whose run of ``n_rounds`` rounds of τ steps this method certifies at (ε, δ)."""

    @abstractmethod
    def epsilon(self, ledger: PrivacyAccountant, delta: float, *, steps_per_round: int, n_rounds: int,
                discretization: float = DISCRETIZATION) -> float:
        """The ε this method certifies for every step in ``ledger`` (a run planned with ``n_rounds`` rounds)."""

    def calibrate_variance(self, eps: float, delta: float, *, sample_rate: float, n_steps: int, sampling: str,
                           l2: float, l1: float) -> float:
        """Distributed noise: the smallest variance V of the honest shares' Skellam sum whose ``n_steps`` steps
        (sensitivity Δ2 = ``l2``, Δ1 = ``l1``, integer domain) this method certifies at (ε, δ).

        This default refuses: a method that accounts distributed noise overrides it and lists it in ``noises``.
        """
        raise ValueError(f"accounting={self.name!r} does not account distributed noise: use noise='local', or "
                         "accounting='rfedproj'.")

    def running_epsilon(self, ledger: PrivacyAccountant, delta: float, *, steps_per_round: int, n_rounds: int,
                        discretization: float = DISCRETIZATION) -> Callable[[], float]:
        """A function reporting :meth:`epsilon` of ``ledger`` as rounds are added to it (called every round).

        This default recomputes it from the whole ledger; a method that can
        compose only the new steps overrides it.

        Parameters
        ----------
        ledger : PrivacyAccountant
            The run's ledger, which only grows.
        delta : float
        steps_per_round : int
        n_rounds : int
        discretization : float, default=DISCRETIZATION

        Returns
        -------
        callable
            ``() -> float``.
        """
        return lambda: self.epsilon(ledger, delta, steps_per_round=steps_per_round, n_rounds=n_rounds,
                                    discretization=discretization)

    def composed_epsilon(self, runs: Sequence[ChargedRun], delta: float, *,
                         discretization: float = DISCRETIZATION) -> float:
        """The ε this method certifies for ``runs`` on the same records, composed (a budget's fits, a site's rounds).

        This default certifies one run (its :meth:`epsilon`) and refuses more;
        a method that composes runs overrides it and sets ``composes_runs``.

        Parameters
        ----------
        runs : sequence of ChargedRun
        delta : float
        discretization : float, default=DISCRETIZATION

        Returns
        -------
        float
            0 without a step, inf when a step was not private.
        """
        runs = [run for run in runs if run.ledger.history]
        if not runs:
            return 0.0
        for entry in (entry for run in runs for entry in run.ledger.history):  # steps it reads, or why not
            self.check_sampling(entry.sampling)
            self.check_group(entry.group_size)
        if not all(run.ledger.private for run in runs):
            return math.inf
        if len(runs) > 1:
            raise ValueError(f"accounting={self.name!r} certifies one run, not {len(runs)} composed on the same "
                             "records: give the budget or the site accounting='rfedproj' (the privacy-loss "
                             "distributions of every step, composed), or one fit each.")
        run = runs[0]
        return self.epsilon(run.ledger, delta, steps_per_round=run.steps_per_round, n_rounds=run.n_rounds,
                            discretization=discretization)

    def group_epsilon(self, run: ChargedRun, group_size: int, delta: float) -> float:
        """The ε this method certifies for any group of ``group_size`` of the run's units, substituted.

        This default certifies one unit (its :meth:`epsilon`) and refuses a
        group; a method that chains a composition over groups overrides it.

        Parameters
        ----------
        run : ChargedRun
        group_size : int
            k.
        delta : float

        Returns
        -------
        float
        """
        if group_size == 1:
            return self.composed_epsilon([run], delta)
        raise ValueError(f"accounting={self.name!r} certifies no group of {group_size} units; "
                         "accounting='rfedproj' does (group privacy over its composition).")

    def check_sampling(self, sampling: str) -> None:
        """ValueError unless this method accounts ``sampling``."""
        if sampling not in self.samplings:
            raise ValueError(f"accounting={self.name!r} accounts {'/'.join(self.samplings)} sampling: use "
                             f"sampling={self.samplings[0]!r}. Got {sampling!r}.")

    def check_group(self, group_size: int) -> None:
        """ValueError unless this method calibrates runs whose protected unit owns ``group_size`` records."""
        if group_size > 1 and not self.accounts_groups:
            raise ValueError(f"accounting={self.name!r} cannot calibrate a run charged per subject from sampled "
                             f"records (records_per_subject={group_size}): use accounting='rfedproj', or "
                             "records_per_subject=None (subjects sampled whole).")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class WholeRunAccounting(RunAccounting):
    """The paper's accounting: the whole transcript's T·τ subsampled Gaussian steps, composed by PLD.

    ε is that of every step in the ledger, however many runs wrote it
    (:func:`~skfedriem.privacy.epsilon_spent`, :class:`~skfedriem.privacy.PrivacyAccountant`).

    Examples
    --------
    >>> from skfedriem.privacy import WholeRunAccounting
    >>> mu0 = WholeRunAccounting().calibrate(1.0, 1e-5, sample_rate=0.1, steps_per_round=10, n_rounds=200,
    ...                                      sampling="fixed")
    >>> round(1 / mu0, 2)   # B σ / (2C), as calibrate_mu0 at 2000 steps
    17.04
    """

    name = "rfedproj"
    accounts_groups = True
    composes_runs = True
    noises = ("local", "distributed")

    def calibrate(self, eps, delta, *, sample_rate, steps_per_round, n_rounds, sampling, group_size=1):
        """The largest μ0 certifying (ε, δ) over the run, for a unit owning ``group_size`` of its records
        (:func:`~skfedriem.privacy.accounting.group.calibrate_group_mu0`; 1: :func:`~skfedriem.privacy.calibrate_mu0`)."""
        if group_size > 1:
            return calibrate_group_mu0(eps, delta, sample_rate, n_rounds * steps_per_round, group_size, sampling)
        return calibrate_mu0(eps, delta, sample_rate, n_rounds * steps_per_round, sampling)

    def calibrate_variance(self, eps, delta, *, sample_rate, n_steps, sampling, l2, l1):
        """V by Rényi DP of the subsampled Skellam mechanism (:func:`~skfedriem.privacy.accounting.skellam.calibrate_skellam_variance`;
        Poisson and fixed-size sampling alike, substitution of one record)."""
        return calibrate_skellam_variance(eps, delta, sample_rate, n_steps, lambda: (l2, l1))

    def epsilon(self, ledger, delta, *, steps_per_round, n_rounds, discretization=DISCRETIZATION):
        return ledger.get_epsilon(delta, discretization=discretization)

    def running_epsilon(self, ledger, delta, *, steps_per_round, n_rounds, discretization=DISCRETIZATION):
        return RunningEpsilon(ledger, delta, discretization=discretization, chunk=steps_per_round)

    def composed_epsilon(self, runs, delta, *, discretization=DISCRETIZATION):
        """Every step of every run, composed by PLD (runs on the same records are steps of one composition)."""
        total = PrivacyAccountant()
        for run in runs:
            total.extend(run.ledger)
        return total.get_epsilon(delta, discretization=discretization)

    def group_epsilon(self, run, group_size, delta):
        """Group privacy over the run's composition (:func:`~skfedriem.privacy.group_epsilon`)."""
        return group_epsilon(run.ledger, group_size, delta)


#: The accounting methods estimators know by name (:func:`register_accounting` adds one).
ACCOUNTINGS: Registry[RunAccounting] = Registry("accounting", RunAccounting)


def register_accounting(method: RunAccounting, *, name: str | None = None, force: bool = False) -> RunAccounting:
    """Make ``method`` available as ``accounting=method.name``.

    Parameters
    ----------
    method : RunAccounting
    name : str, optional
        The name it is registered under: the method's own, so a name given
        must be ``method.name``.
    force : bool, default=False
        Replace a method already registered under that name.

    Returns
    -------
    method : RunAccounting
        The same object.
    """
    if not isinstance(method, RunAccounting):
        raise TypeError(f"register_accounting needs a RunAccounting. Got {type(method).__name__} instead.")
    return ACCOUNTINGS.register(method, name=registered_name(method, name), force=force)


def accounting_names() -> tuple[str, ...]:
    """The registered method names.

    Returns
    -------
    tuple of str
    """
    return ACCOUNTINGS.names()


def get_accounting(accounting: str | RunAccounting) -> RunAccounting:
    """The method called ``accounting`` (or the method itself); ValueError listing the registered names.

    Parameters
    ----------
    accounting : str or RunAccounting

    Returns
    -------
    RunAccounting
    """
    return ACCOUNTINGS.get(accounting)


register_accounting(WholeRunAccounting())
