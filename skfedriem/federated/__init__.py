"""Federation: aggregation rules, planning, and the round loop."""

from .aggregation import AGGREGATIONS, Aggregation, get_aggregation
from .engine import OPTIMIZERS, FederatedTrainer, lr_at_round
from .plan import PrivacyPlan, plan_run

__all__ = [
    "AGGREGATIONS",
    "OPTIMIZERS",
    "Aggregation",
    "FederatedTrainer",
    "PrivacyPlan",
    "get_aggregation",
    "lr_at_round",
    "plan_run",
]
