"""Record-level differential privacy: the private local step and its accounting."""

from .accountant import PrivacyAccountant, RunningEpsilon
from .accounting import DISCRETIZATION, calibrate_mu0, epsilon_spent, gdp_epsilon, gdp_mu, gdp_mu_for_epsilon
from .accountings import RunAccounting, WholeRunAccounting, accounting_names, get_accounting, register_accounting
from .budget import PrivacyBudget
from .layerwise import layerwise_per_sample_gradients, supports_layerwise
from .mechanism import (
    DenseGradients,
    PerRecordGradients,
    clip_factors,
    clipped_gradient_diameter,
    noisy_mean,
    private_gradient,
    project_per_sample,
)
from .optimizer import PrivateManifoldOptimizer
from .per_sample import per_sample_gradients, trainable_parameters
from .randomness import SecretRandomness, SecureRandomness, SeededRandomness
from .sampling import BatchSampler, FixedSizeSampler, PoissonSampler, make_sampler
from .step_plan import StepPlan, round_release

__all__ = [
    "DISCRETIZATION",
    "BatchSampler",
    "FixedSizeSampler",
    "PoissonSampler",
    "PrivacyAccountant",
    "PrivacyBudget",
    "RunAccounting",
    "RunningEpsilon",
    "WholeRunAccounting",
    "accounting_names",
    "get_accounting",
    "register_accounting",
    "PrivateManifoldOptimizer",
    "DenseGradients",
    "PerRecordGradients",
    "SecretRandomness",
    "SecureRandomness",
    "SeededRandomness",
    "StepPlan",
    "calibrate_mu0",
    "clip_factors",
    "clipped_gradient_diameter",
    "epsilon_spent",
    "gdp_epsilon",
    "gdp_mu",
    "gdp_mu_for_epsilon",
    "layerwise_per_sample_gradients",
    "make_sampler",
    "noisy_mean",
    "per_sample_gradients",
    "private_gradient",
    "project_per_sample",
    "round_release",
    "supports_layerwise",
    "trainable_parameters",
]
