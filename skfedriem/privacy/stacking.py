"""Deprecated: moved to :mod:`skfedriem.federated.lockstep.modules` (removed in 0.3)."""

import warnings

from ..federated.lockstep.modules import StackedLinear, stacked_gradients_available, stacked_module, supports_stacking

warnings.warn("skfedriem.privacy.stacking moved to skfedriem.federated.lockstep (its modules module); the old path is "
              "removed in 0.3.", FutureWarning, stacklevel=2)

__all__ = ["StackedLinear", "stacked_gradients_available", "stacked_module", "supports_stacking"]
