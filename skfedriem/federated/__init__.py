"""Federation: aggregation rules, planning, the clients' side, transports, checkpoints and the round loop."""

from .aggregation import AGGREGATIONS, Aggregation, get_aggregation
from .checkpoint import TrainingState
from .client import ClientRecipe, ClientState, RoundInstructions, run_client_round
from .engine import BACKENDS, OPTIMIZERS, FederatedTrainer, lr_at_round
from .plan import PrivacyPlan, plan_run
from .transport import LocalTransport, Transport

__all__ = [
    "AGGREGATIONS",
    "BACKENDS",
    "OPTIMIZERS",
    "Aggregation",
    "ClientRecipe",
    "ClientState",
    "FederatedTrainer",
    "LocalTransport",
    "PrivacyPlan",
    "RoundInstructions",
    "TrainingState",
    "Transport",
    "get_aggregation",
    "lr_at_round",
    "plan_run",
    "run_client_round",
]
