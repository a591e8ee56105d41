"""A total privacy budget for every fit on the same records, composed tightly.

Each ``fit`` of a private estimator is a release: its own (ε, δ) says nothing
about the total when the same records are used again (cross-validation folds,
grid-search candidates, the refit, a second experiment). :class:`PrivacyBudget`
records every fit charged to it and composes their privacy-loss distributions
(the same dominating PLDs the accountant certifies each fit with), which is
much tighter than adding the ε's, and refuses a fit *before it trains* when
the composition would pass the total.

scikit-learn's ``clone`` deep-copies the parameters of an estimator, so a
budget passed as ``privacy_budget=`` would otherwise be duplicated for every
candidate and fold of a ``GridSearchCV``. A budget therefore clones and
deep-copies to itself. Worker processes (``n_jobs > 1``) receive pickled
copies: a budget without ``path`` refuses to be charged outside the process
that created it (it could not tell its parent), and a budget with ``path``
keeps its ledger in that file, locked and written atomically, so every
process charges the same ledger.
"""

from __future__ import annotations

import math
import os
import threading
import uuid
import weakref
from datetime import datetime, timezone
from collections.abc import Callable
from numbers import Integral, Real
from pathlib import Path

from ..._utils.compat import Interval, validate_params
from ...exceptions import PrivacyBudgetExceeded
from .accounting_methods import ChargedRun, RunAccounting, get_accounting
from .ledger import PrivacyAccountant
from .subsampled_gaussian import DISCRETIZATION, MAX_EPSILON, MIN_DELTA
from .ledger_file import locked_ledger, read_ledger

__all__ = ["PrivacyBudget"]

_LIVE: weakref.WeakValueDictionary[str, PrivacyBudget] = weakref.WeakValueDictionary()
_EMPTY = {"fits": []}


def _runs(fits: list[dict]) -> list[ChargedRun]:
    """The fits of a ledger as the runs an accounting method composes (a fit charged without its shape: one
    round of all its steps)."""
    return [ChargedRun.of(PrivacyAccountant.from_state_dict({"history": fit["steps"]}), fit.get("steps_per_round"),
                          fit.get("n_rounds")) for fit in fits]


class PrivacyBudget:
    """A total (ε, δ) shared by every fit on the same records.

    Pass it to an estimator (``privacy_budget=budget``); every ``fit`` charges
    its planned run to the budget after calibrating its noise and before its
    first round, and raises :class:`~skfedriem.exceptions.PrivacyBudgetExceeded`
    instead of training when the composition of all fits would exceed
    ``epsilon`` at ``delta``. A non-private fit (``eps=None``) is always refused.

    Parameters
    ----------
    epsilon : float
        The total ε, > 0 (``inf`` only records).
    delta : float, default=1e-5
        The δ at which the composition is evaluated, in (0, 1).
    path : str or path-like, optional
        A JSON file holding the ledger, shared by processes (``n_jobs > 1``)
        and sessions; created when absent. Without it the ledger lives in this
        object and only this process may charge it.
    discretization : float, default=DISCRETIZATION
        Grid of the privacy-loss distributions (coarser is faster and still an
        upper bound).
    n_fits : int or None, default=None
        The number of fits planned on these records, e.g. folds × candidates
        + 1 for a ``GridSearchCV`` and its refit. An estimator with
        ``eps="budget"`` then targets its share (:meth:`share`): the largest ε
        that leaves room for the remaining planned fits, each assumed like
        it, so the last fit (the refit) is calibrated to what is left rather
        than refused.
    accounting : str or RunAccounting, default="rfedproj"
        The registered accounting method that composes the fits
        (:meth:`~skfedriem.privacy.RunAccounting.composed_epsilon`; one that
        certifies a single run refuses a second fit).

    Attributes
    ----------
    fits : list of dict
        One entry per charged fit: ``label``, ``epsilon`` (that fit alone, at
        ``delta``), ``steps`` (its accountant entries) and ``time``.

    Examples
    --------
    >>> from skfedriem.privacy import PrivacyAccountant, PrivacyBudget
    >>> budget = PrivacyBudget(epsilon=3.0, delta=1e-5)
    >>> run = PrivacyAccountant(); run.step(mu0=0.05, sample_rate=0.1, num_steps=1000)
    >>> alone = run.get_epsilon(1e-5)
    >>> total = budget.charge(run, label="first fit"); total = budget.charge(run, label="second fit")
    >>> alone < total < 2 * alone   # composed, not summed
    True
    >>> len(budget.fits), budget.spent() == total
    (2, True)
    """

    @validate_params(
        {"epsilon": [Interval(Real, 0, None, closed="right")], "delta": [Interval(Real, MIN_DELTA, 1, closed="left")],
         "path": [str, os.PathLike, None], "discretization": [Interval(Real, 0, None, closed="neither")],
         "n_fits": [Interval(Integral, 1, None, closed="left"), None], "accounting": [str, RunAccounting]},
        prefer_skip_nested_validation=True,
    )
    def __init__(self, epsilon: float, delta: float = 1e-5, *, path: str | os.PathLike | None = None,
                 discretization: float = DISCRETIZATION, n_fits: int | None = None,
                 accounting: str | RunAccounting = "rfedproj") -> None:
        self.accounting = get_accounting(accounting).name
        self.n_fits = None if n_fits is None else int(n_fits)
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self.path = None if path is None else str(Path(path).absolute())
        self.discretization = float(discretization)
        self._fits: list[dict] = []
        self._owner_pid = os.getpid()
        self._id = uuid.uuid4().hex
        self._lock = threading.Lock()
        _LIVE[self._id] = self

    # ------------------------------------------------------------------ ledger
    @property
    def fits(self) -> list[dict]:
        """Every fit charged so far (read from ``path`` when there is one)."""
        if self.path is not None:
            return list(read_ledger(self.path, _EMPTY)["fits"])
        return list(self._fits)

    def spent(self) -> float:
        """Composed ε of every charged fit at ``delta`` (0 before the first, inf after a non-private one)."""
        fits = self.fits
        if any(math.isinf(f["epsilon"]) for f in fits):
            return math.inf
        return self._epsilon(_runs(fits), self.discretization)

    def _epsilon(self, runs: list[ChargedRun], discretization: float) -> float:
        """The budget's accounting method's ε of ``runs`` composed, at the budget's δ."""
        return get_accounting(self.accounting).composed_epsilon(runs, self.delta, discretization=discretization)

    def summary(self) -> str:
        """What is spent, of what, over how many of the planned fits, and what is left (one line).

        Examples
        --------
        >>> PrivacyBudget(4.0, n_fits=3).summary()
        'spent 0 of epsilon=4 (delta=1e-05) over 0 of 3 planned fits; 4 left'
        """
        spent, fits = self.spent(), len(self.fits)
        planned = f" of {self.n_fits} planned" if self.n_fits is not None else ""
        left = max(self.epsilon - spent, 0.0)
        return (f"spent {spent:.4g} of epsilon={self.epsilon:g} (delta={self.delta:g}) over {fits}{planned} fits; "
                f"{left:.4g} left")

    @staticmethod
    def n_fits_for(cv, param_grid=None, *, refit: bool = True, X=None, y=None, groups=None) -> int:
        """How many fits a search charges: folds × candidates, plus the refit.

        Parameters
        ----------
        cv : int, cross-validation generator or iterable
            As ``GridSearchCV`` and ``cross_val_score`` take it (an int is a
            number of folds; a splitter may need ``X``, ``y`` or ``groups`` to
            count its splits, e.g. ``LeaveOneGroupOut``).
        param_grid : dict or list of dicts, optional
            The grid of ``GridSearchCV`` (None: one candidate, as in
            ``cross_val_score``).
        refit : bool, default=True
            Whether the search refits the best candidate on all the data.
        X, y, groups : array-like, optional
            Passed to the splitter's ``get_n_splits``.

        Returns
        -------
        int

        Examples
        --------
        >>> PrivacyBudget.n_fits_for(5, {"lr": [0.1, 0.5], "n_rounds": [50, 100, 200]})
        31
        """
        from sklearn.model_selection import ParameterGrid, check_cv

        folds = check_cv(cv).get_n_splits(X, y, groups)
        candidates = 1 if param_grid is None else len(ParameterGrid(param_grid))
        return folds * candidates + int(bool(refit))

    def share(self, release_at: Callable[[float], PrivacyAccountant], *, label: str = "this fit") -> float:
        """The largest ε a fit may target so that it and every remaining planned fit, each like it, fit the budget.

        With ``n_fits`` planned and k of them charged, the fit's share is the
        largest ε such that the composition of the charged fits and n − k
        copies of ``release_at(ε)`` stays within ``epsilon`` at ``delta``
        (the same composition :meth:`charge` checks, so the fit is then
        accepted). A search's fits differ a little (fold sizes,
        candidates); each one plans for the rest from its own shape, and the
        last one takes what is left.

        Parameters
        ----------
        release_at : callable
            ``release_at(eps) -> PrivacyAccountant``: the fit's whole planned
            run when calibrated to ``eps`` (what :meth:`charge` will get).
        label : str, default="this fit"
            For messages.

        Returns
        -------
        float
            The ε the fit should target, in (0, ``epsilon``].

        Raises
        ------
        ValueError
            Without ``n_fits``, or when every planned fit was charged already.
        PrivacyBudgetExceeded
            When the budget is spent (or a non-private fit was charged).
        """
        fits, remaining, spent = self._fits_left_to_plan(label)
        base = _runs(fits)

        def composed(release: PrivacyAccountant, discretization: float) -> float:
            return self._epsilon(base + [ChargedRun.of(release)] * remaining, discretization)

        # The fit's shape (rates, steps) at a first guess (its share by basic composition); another target
        # scales every μ0 of it. Bisect on that scale on a coarse grid (pessimistic, so what it finds fits) to
        # 1%, then check the real fit at the ε found, on the budget's own grid, as charge() will.
        coarse = 10 * self.discretization
        no_room = (f"{label} cannot run: no ε leaves room for the {remaining - 1} remaining planned fit(s) "
                   f"within epsilon={self.epsilon:g} ({spent:.4g} spent).")
        reference = release_at((self.epsilon - spent) / remaining)

        def scaled(scale: float) -> PrivacyAccountant:  # μ0 × scale: a Skellam step's variance ÷ scale²
            return PrivacyAccountant.from_state_dict({"history": [
                {**e, "mu0": e["mu0"] * scale,
                 "skellam": (e["skellam"][0] / scale ** 2, *e["skellam"][1:]) if e.get("skellam") else ()}
                for e in reference.state_dict()["history"]]})

        def fits_in(scale: float) -> bool:
            return composed(scaled(scale), coarse) <= self.epsilon

        low = _largest_scale(fits_in, no_room)
        eps = min(self.epsilon, MAX_EPSILON, self._epsilon([ChargedRun.of(scaled(low))], self.discretization))
        for _ in range(20):  # a fit whose shape moves with its target (e.g. a planned T) is checked as it is
            if composed(release_at(eps), self.discretization) <= self.epsilon:
                return eps
            eps *= 0.98
        raise PrivacyBudgetExceeded(no_room)

    def _fits_left_to_plan(self, label: str) -> tuple[list, int, float]:
        """The charged fits, how many planned fits are left (this one included) and ε spent; or why no share."""
        if self.n_fits is None:
            raise ValueError(f"{label} asks for its share (eps='budget'), but this PrivacyBudget plans no number of "
                             "fits: create it with n_fits= (e.g. folds x candidates + 1 for a grid search and its "
                             "refit).")
        fits = self.fits
        remaining = self.n_fits - len(fits)
        if remaining < 1:
            raise ValueError(f"{label} asks for its share, but all n_fits={self.n_fits} planned fits were charged "
                             f"already ({len(fits)} fits): n_fits was too small for this search. Plan "
                             "n_fits=PrivacyBudget.n_fits_for(cv, param_grid) before it starts, or give this fit its "
                             "own eps.")
        if math.isinf(self.epsilon):
            raise ValueError(f"{label} asks for its share (eps='budget') of a PrivacyBudget with epsilon=inf, which "
                             "only records: its share would be a fit without noise. Give the budget a finite "
                             "epsilon, or give the fit its own eps.")
        spent = self.spent()
        if spent >= self.epsilon:
            raise PrivacyBudgetExceeded(f"{label} cannot run: this budget is spent ({spent:.4g} of epsilon="
                                        f"{self.epsilon:g}).")

        return fits, remaining, spent

    def charge(self, release: PrivacyAccountant | None, *, label: str, steps_per_round: int | None = None,
               n_rounds: int | None = None) -> float:
        """Record ``release`` (a fit's whole planned run), or refuse it before it happens.

        Parameters
        ----------
        release : PrivacyAccountant or None
            The steps the fit will take (its plan), not yet run; None for a
            release without noise (refused unless ``epsilon`` is inf). Its
            entries say what they protect (``PrivacyAccountant.unit``): the
            budget's ε is per subject while every fit charged to it is
            subject-level; a subject-level fit is refused once a record-level
            one is charged (what that one costs a subject is not certified),
            while a record-level fit may follow subject-level ones (each bounds
            a record's loss too).
        label : str
            What the fit is, for the ledger (e.g. the estimator's repr).
        steps_per_round, n_rounds : int, optional
            The fit's shape, for an accounting method that reads it (without
            it, the fit is one round of all its steps).

        Returns
        -------
        epsilon : float
            The composed ε of every fit, this one included.

        Raises
        ------
        PrivacyBudgetExceeded
            When the composition would exceed ``epsilon``, or a subject-level fit
        follows a record-level one; nothing is recorded.
        RuntimeError
            When a budget without ``path`` is charged in another process.
        """
        entry = self._entry(release, label, steps_per_round, n_rounds)
        if self.path is not None:
            with locked_ledger(self.path, _EMPTY) as ledger:
                total = self._check(ledger["fits"], entry)
                ledger["fits"].append(entry)
            return total
        if os.getpid() != self._owner_pid:
            raise RuntimeError(
                f"This PrivacyBudget was created in process {self._owner_pid} and is charged in process "
                f"{os.getpid()} (a worker of n_jobs > 1?). The parent would never see this fit. "
                "Give the budget a path= so that every process charges the same ledger file."
            )
        with self._lock:
            total = self._check(self._fits, entry)
            self._fits.append(entry)
        return total

    def check(self, release: PrivacyAccountant | None, *, label: str, steps_per_round: int | None = None,
              n_rounds: int | None = None) -> float:
        """What :meth:`charge` would return for ``release``, or its refusal; nothing is recorded.

        Parameters
        ----------
        release : PrivacyAccountant or None
        label : str
        steps_per_round, n_rounds : int, optional
            As in :meth:`charge`.

        Returns
        -------
        epsilon : float
            The composed ε of every fit so far and this one.
        """
        return self._check(self.fits, self._entry(release, label, steps_per_round, n_rounds))

    def _entry(self, release: PrivacyAccountant | None, label: str, steps_per_round: int | None,
               n_rounds: int | None) -> dict:
        """The ledger entry of ``release``."""
        run = None if release is None else ChargedRun.of(release, steps_per_round, n_rounds)
        alone = math.inf if run is None else self._epsilon([run], self.discretization)
        entry = {"label": str(label), "epsilon": alone, "steps": [] if run is None else release.state_dict()["history"],
                 "time": datetime.now(timezone.utc).isoformat(), "privacy_unit": "record" if release is None else release.unit,
                 "accounting": self.accounting}
        if run is not None:
            entry.update(steps_per_round=run.steps_per_round, n_rounds=run.n_rounds)
        return entry

    def _check(self, fits: list[dict], entry: dict) -> float:
        if entry["privacy_unit"] == "subject" and any(fit.get("privacy_unit", "record") != "subject" for fit in fits):
            raise PrivacyBudgetExceeded(f"{entry['label']} protects each subject, but this budget already holds "
                                        "record-level fits, whose cost for a subject is not certified: give the "
                                        "subject-level fits a budget (or a ledger-path) of their own. It was not run.")
        if math.isinf(entry["epsilon"]):
            if math.isinf(self.epsilon):
                return math.inf
            raise PrivacyBudgetExceeded(f"{entry['label']} is not private (unbounded epsilon); "
                                        f"this budget allows epsilon={self.epsilon:g} in total. It was not run.")
        total = self._epsilon(_runs([*fits, entry]), self.discretization)
        if total > self.epsilon:
            spent = self._epsilon(_runs(fits), self.discretization) if fits else 0.0
            raise PrivacyBudgetExceeded(
                f"{entry['label']} would take the privacy budget to epsilon={total:.4g} > {self.epsilon:g} at "
                f"delta={self.delta:g} ({len(fits)} fit(s) so far spent {spent:.4g}; this one alone "
                f"{entry['epsilon']:.4g}). It was not run."
            )
        return total

    # ----------------------------------------- one ledger, however it is copied
    def __sklearn_clone__(self) -> PrivacyBudget:
        return self

    def __copy__(self) -> PrivacyBudget:
        return self

    def __deepcopy__(self, memo) -> PrivacyBudget:
        return self

    def __reduce__(self):
        fits = None if self.path is not None else self._fits
        return _restore_budget, (self._id, self._owner_pid, self.epsilon, self.delta, self.path,
                                 self.discretization, fits, self.n_fits, self.accounting)

    def __repr__(self) -> str:
        where = f", path={self.path!r}" if self.path is not None else ""
        planned = f", n_fits={self.n_fits}" if self.n_fits is not None else ""
        method = f", accounting={self.accounting!r}" if self.accounting != "rfedproj" else ""
        return f"PrivacyBudget(epsilon={self.epsilon:g}, delta={self.delta:g}{where}{planned}{method})"


def _restore_budget(budget_id, owner_pid, epsilon, delta, path, discretization, fits, n_fits=None,
                    accounting="rfedproj") -> PrivacyBudget:
    """Unpickling: the live budget of the same id in this process, else a copy bound to its origin."""
    live = _LIVE.get(budget_id)
    if live is not None and os.getpid() == owner_pid:
        return live
    budget = PrivacyBudget(epsilon, delta, path=path, discretization=discretization, n_fits=n_fits,
                           accounting=accounting)
    budget._id, budget._owner_pid = budget_id, owner_pid
    budget._fits = list(fits or [])
    _LIVE[budget_id] = budget
    return budget


def _largest_scale(fits_in: Callable[[float], bool], no_room: str) -> float:
    """The largest scale of every μ0 (to 1%) at which ``fits_in`` holds, bracketed by doubling or halving from 1."""
    low, high = 1.0, 1.0
    if fits_in(1.0):
        while fits_in(high * 2) and high < 1e6:
            high *= 2
        low, high = high, high * 2
    else:
        while not fits_in(low):
            if low < 1e-6:
                raise PrivacyBudgetExceeded(no_room)
            low, high = low / 2, low
    while high - low > 1e-2 * low:
        middle = math.sqrt(low * high)
        low, high = (middle, high) if fits_in(middle) else (low, middle)
    return low
