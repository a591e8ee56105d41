"""Federation: settings, aggregation rules, plans and their pricing, clients (parallel, lockstep), the loop."""

from .._utils.backends import BACKENDS, register_backend
from .aggregation import AGGREGATIONS, Aggregation, get_aggregation, register_aggregation
from .checkpoint import TrainingState
from .client import ClientRecipe, ClientState
from .client_round import lockstep_groups, run_client_round, run_clients, run_round
from .devices import resolve_device
from .engine import FederatedTrainer
from .local_backend import run_locally
from .fixed_features import on_fixed_features
from .instructions import RoundInstructions
from .optimizers import OPTIMIZERS, OptimizerEntry, is_elementwise, register_optimizer
from .parallel import THREADS_PER_JOB, ParallelTransport, effective_n_jobs, thread_budget
from .plan import PrivacyPlan, noise_swamps_signal, plan_basis, plan_run, signal_to_noise
from .pricing import RoundPricing, lr_at_round
from .settings import FederationSettings
from .transport import LocalTransport, Transport

__all__ = [
    "AGGREGATIONS",
    "BACKENDS",
    "OPTIMIZERS",
    "OptimizerEntry",
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
    "RoundPricing",
    "TrainingState",
    "Transport",
    "effective_n_jobs",
    "get_aggregation",
    "is_elementwise",
    "lockstep_groups",
    "lr_at_round",
    "noise_swamps_signal",
    "on_fixed_features",
    "plan_basis",
    "plan_run",
    "register_aggregation",
    "register_backend",
    "register_optimizer",
    "resolve_device",
    "run_client_round",
    "run_clients",
    "run_locally",
    "run_round",
    "signal_to_noise",
    "thread_budget",
]
