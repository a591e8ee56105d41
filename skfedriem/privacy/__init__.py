"""Record-level differential privacy: the private local step and its accounting.

The step (:func:`private_step` for K clients' :class:`ClientCopies`, a
lone client's :func:`private_gradient` and :class:`PrivateManifoldOptimizer`)
and what a model declares to it (:class:`ModelCapabilities`) or may extend
(:class:`PerRecordGradients`, :func:`record_norms`, the per-sample
gradients); a client's :class:`StepPlan`, its samplers and secret randomness;
the accountant (:class:`PrivacyAccountant`, :func:`calibrate_mu0`,
:func:`epsilon_spent`), the accounting methods and :class:`PrivacyBudget`.
The mechanism's own pieces (clip factors, the noise, the release) live in
:mod:`skfedriem.privacy.mechanisms.mechanism`; torch's own layers are declared in
:mod:`skfedriem.privacy.per_record.torch_layers`.
"""

from .accounting.accounting_methods import RunAccounting, WholeRunAccounting, accounting_names, get_accounting, register_accounting
from .accounting.budget import PrivacyBudget
from .per_record.capabilities import ModelCapabilities, capabilities_of, register_capabilities
from .per_record.copies import ClientCopies, LoneClient
from .per_record.gradients import DenseGradients, PerRecordGradients, StackedDenseGradients, record_norms
from .accounting.group import calibrate_group_mu0, group_epsilon
from .per_record.layerwise import layerwise_per_sample_gradients
from .accounting.ledger import MIXED_DELTA_SHARES, PrivacyAccountant, RunningEpsilon
from .mechanisms.mechanism import clipped_gradient_diameter, private_gradient, private_step
from .mechanisms.optimizer import PrivateManifoldOptimizer
from .per_record.per_sample import per_sample_gradients
from .mechanisms.randomness import SecretRandomness, SecureRandomness, SeededRandomness
from .mechanisms.sampling import BatchSampler, FixedSizeSampler, PoissonSampler, make_sampler
from .mechanisms.step_plan import StepPlan, round_release
from .accounting.subsampled_gaussian import (DISCRETIZATION, MAX_EPSILON, MIN_DELTA, calibrate_mu0, epsilon_spent, gdp_epsilon,
                                  gdp_mu, gdp_mu_for_epsilon)
from .per_record.torch_layers import StackedLinear

__all__ = [
    "DISCRETIZATION",
    "MAX_EPSILON",
    "MIN_DELTA",
    "MIXED_DELTA_SHARES",
    "BatchSampler",
    "ClientCopies",
    "DenseGradients",
    "FixedSizeSampler",
    "LoneClient",
    "ModelCapabilities",
    "PerRecordGradients",
    "PoissonSampler",
    "PrivacyAccountant",
    "PrivacyBudget",
    "PrivateManifoldOptimizer",
    "RunAccounting",
    "RunningEpsilon",
    "SecretRandomness",
    "SecureRandomness",
    "SeededRandomness",
    "StackedDenseGradients",
    "StackedLinear",
    "StepPlan",
    "WholeRunAccounting",
    "accounting_names",
    "calibrate_group_mu0",
    "capabilities_of",
    "calibrate_mu0",
    "clipped_gradient_diameter",
    "epsilon_spent",
    "gdp_epsilon",
    "group_epsilon",
    "gdp_mu",
    "gdp_mu_for_epsilon",
    "get_accounting",
    "layerwise_per_sample_gradients",
    "make_sampler",
    "per_sample_gradients",
    "private_gradient",
    "private_step",
    "record_norms",
    "register_capabilities",
    "register_accounting",
    "round_release",
]
