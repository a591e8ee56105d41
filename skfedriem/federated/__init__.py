"""Federation: settings, aggregation rules, plans, the clients' side, transports, parallel clients, checkpoints, the loop."""

from .aggregation import AGGREGATIONS, Aggregation, get_aggregation, register_aggregation
from .checkpoint import TrainingState
from .client import OPTIMIZERS, ClientRecipe, ClientState, RoundInstructions, register_optimizer, run_client_round
from .engine import FederatedTrainer, lr_at_round
from .parallel import THREADS_PER_JOB, ParallelTransport, effective_n_jobs, thread_budget
from .plan import PrivacyPlan, plan_run
from .settings import BACKENDS, FederationSettings, register_backend
from .transport import LocalTransport, Transport

__all__ = [
    "AGGREGATIONS",
    "BACKENDS",
    "OPTIMIZERS",
    "THREADS_PER_JOB",
    "Aggregation",
    "ClientRecipe",
    "ClientState",
    "FederatedTrainer",
    "FederationSettings",
    "LocalTransport",
    "ParallelTransport",
    "PrivacyPlan",
    "RoundInstructions",
    "TrainingState",
    "Transport",
    "effective_n_jobs",
    "get_aggregation",
    "lr_at_round",
    "plan_run",
    "register_aggregation",
    "register_backend",
    "register_optimizer",
    "run_client_round",
    "thread_budget",
]
