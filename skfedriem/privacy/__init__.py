"""Record-level differential privacy: the private local step and its accounting.

The step (:func:`private_gradient`, :class:`PrivateManifoldOptimizer`) and
what it is built from that a model may extend (:class:`PerRecordGradients`,
:func:`record_norms`, :func:`clipped_gradient_diameter`, the per-sample
gradients); a client's :class:`StepPlan`, its samplers and secret randomness;
the accountant (:class:`PrivacyAccountant`, :func:`calibrate_mu0`,
:func:`epsilon_spent`), the accounting methods and :class:`PrivacyBudget`.
The mechanism's own pieces (clip factors, the noisy mean) live in
:mod:`skfedriem.privacy.mechanism`.
"""

from .accounting_methods import RunAccounting, WholeRunAccounting, accounting_names, get_accounting, register_accounting
from .budget import PrivacyBudget
from .group import calibrate_group_mu0, group_epsilon
from .layerwise import layerwise_per_sample_gradients
from .ledger import PrivacyAccountant, RunningEpsilon
from .mechanism import DenseGradients, PerRecordGradients, clipped_gradient_diameter, private_gradient, record_norms
from .optimizer import PrivateManifoldOptimizer
from .per_sample import per_sample_gradients
from .randomness import SecretRandomness, SecureRandomness, SeededRandomness
from .sampling import BatchSampler, FixedSizeSampler, PoissonSampler, make_sampler
from .step_plan import StepPlan, round_release
from .subsampled_gaussian import (DISCRETIZATION, MAX_EPSILON, MIN_DELTA, calibrate_mu0, epsilon_spent, gdp_epsilon,
                                  gdp_mu, gdp_mu_for_epsilon)

__all__ = [
    "DISCRETIZATION",
    "MAX_EPSILON",
    "MIN_DELTA",
    "BatchSampler",
    "DenseGradients",
    "FixedSizeSampler",
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
    "StepPlan",
    "WholeRunAccounting",
    "accounting_names",
    "calibrate_group_mu0",
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
    "record_norms",
    "register_accounting",
    "round_release",
]

#: The lockstep names this package exported until 0.2, now in :mod:`skfedriem.federated.lockstep`.
_MOVED_TO_LOCKSTEP = ("ClientStack", "StackedDenseGradients", "StackedLinear", "stacked_gradients_available",
                      "stacked_module", "supports_stacking")


def __getattr__(name: str):
    """The lockstep names of earlier versions, with a FutureWarning (removed in 0.3)."""
    if name not in _MOVED_TO_LOCKSTEP:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import warnings

    # from the two modules, not the lockstep package (which imports the clients, which import this package)
    from ..federated.lockstep import modules, stack

    warnings.warn(f"skfedriem.privacy.{name} moved to skfedriem.federated.lockstep.{name}; the old path is removed "
                  "in 0.3.", FutureWarning, stacklevel=2)
    return getattr(stack if hasattr(stack, name) else modules, name)
