"""Federation: aggregation rules, plans, the clients' side, transports, parallel clients, checkpoints, the loop."""

from .aggregation import AGGREGATIONS, Aggregation, get_aggregation
from .checkpoint import TrainingState
from .client import ClientRecipe, ClientState, RoundInstructions, run_client_round
from .engine import BACKENDS, OPTIMIZERS, FederatedTrainer, lr_at_round
from .parallel import THREADS_PER_JOB, ParallelTransport, effective_n_jobs, thread_budget
from .plan import PrivacyPlan, plan_run
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
    "run_client_round",
    "thread_budget",
]
