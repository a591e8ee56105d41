"""Deprecated: moved to :mod:`skfedriem.classification.planning` (removed in 0.3)."""

import warnings

from .classification import planning as _planning
from .classification.planning import *  # noqa: F403 - the moved module's public names

warnings.warn("skfedriem.classifier_planning moved to skfedriem.classification.planning; the old path is removed in "
              "0.3.", FutureWarning, stacklevel=2)

_TABLES = {
    "DEFAULT_BATCH": "batch_size", "PLANNED_OPTIMIZER": "optimizer",
    "NON_PRIVATE_OPTIMIZER": "optimizer_without_privacy", "ADAM_LR": "adam_lr",
}
__all__ = [*_planning.__all__, *_TABLES, "TANGENT_LR"]


def __getattr__(name: str):
    """The per-model tables of earlier versions, read from each registered model's schedule."""
    if name in _TABLES:
        field = _TABLES[name]
        return {kind: getattr(_planning.SCHEDULES.get(kind), field) for kind in _planning.SCHEDULES.names()}
    if name == "TANGENT_LR":
        return _planning.SCHEDULES.get("tangent").sgd_lr
    return getattr(_planning, name)
