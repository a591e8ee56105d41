"""Deprecated: moved to :mod:`skfedriem.federated.lockstep.stack` (removed in 0.3)."""

import warnings

from ..federated.lockstep.stack import ClientStack, StackedDenseGradients

warnings.warn("skfedriem.privacy.stacked moved to skfedriem.federated.lockstep (its stack module); the old path is "
              "removed in 0.3.", FutureWarning, stacklevel=2)

__all__ = ["ClientStack", "StackedDenseGradients"]
