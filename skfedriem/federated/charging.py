"""A run's charge to its privacy budget: once, before its first release, for everything the fit will release.

A :class:`~skfedriem.privacy.PrivacyBudget` is charged the planned run (every
round, as each client will charge it) before any client is contacted, and
refuses it when the composition would pass its total. A fit that releases
something before its rounds (the tangent-space classifier's reference point)
charges both at once, as one fit (:meth:`RunCharge.charge_plan`); the rounds
then do not charge it again.
"""

from __future__ import annotations

from ..privacy import PrivacyAccountant, PrivacyBudget
from .checkpoint import TrainingState
from .pricing import RoundPricing

__all__ = ["RunCharge"]


class RunCharge:
    """What a run charges its privacy budget, and whether it did.

    Parameters
    ----------
    pricing : RoundPricing
        The run's plan and the price of its rounds.
    budget : PrivacyBudget or None
        The budget every fit on these records is charged to (None: none).
    label : str
        How the run is named in the budget's ledger.
    prior : TrainingState, optional
        The earlier run a warm start continues (composed into the accounted ledger).

    Attributes
    ----------
    charged : bool
        Whether the run's planned release was checked and charged (then the rounds charge nothing more).
    """

    def __init__(self, pricing: RoundPricing, budget: PrivacyBudget | None, label: str,
                 prior: TrainingState | None = None) -> None:
        self.pricing, self.budget, self.label, self.prior = pricing, budget, label, prior
        self.charged = False

    def charge_plan(self, client_sizes: list[int], client_names: list | None = None, *,
                    released: PrivacyAccountant | None = None) -> None:
        """Before anything runs: check the run can be accounted and charge it, with what is released before it.

        Parameters
        ----------
        client_sizes : list of int
        client_names : list, optional
        released : PrivacyAccountant, optional
            The planned ledger of what is released before the rounds (it is
            in ``prior``'s ledger too, so the reported ε composes it).

        Raises
        ------
        ValueError
            When the accounting method cannot account the whole ledger (the
            rounds composed with ``prior``).
        PrivacyBudgetExceeded
            When the budget refuses the fit; nothing ran.
        """
        rounds = self.pricing.planned_release(client_sizes, client_names)
        ledger = PrivacyAccountant() if self.prior is None else PrivacyAccountant.from_state_dict(self.prior.ledger)
        ledger.extend(rounds)
        self.pricing.epsilon(ledger)
        if self.budget is not None:
            whole = PrivacyAccountant()
            if released is not None:
                whole.extend(released)
            whole.extend(rounds)
            self._charge(whole)
        self.charged = True
        self.pricing.charged()

    def charge_rounds(self) -> None:
        """The planned rounds to the budget, unless there is none or the plan was charged already."""
        if self.budget is not None and not self.charged:
            self._charge(self.pricing.rounds_release())
            self.pricing.charged()

    def _charge(self, release: PrivacyAccountant) -> None:
        plan = self.pricing.plan_
        self.budget.charge(release, label=self.label, steps_per_round=plan.steps_per_round, n_rounds=plan.n_rounds)
