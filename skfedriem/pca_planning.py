"""Deprecated: moved to :mod:`skfedriem.decomposition.planning` (removed in 0.3)."""

import warnings

from .decomposition.planning import *  # noqa: F403 - the moved module's public names
from .decomposition.planning import __all__  # noqa: F401

warnings.warn("skfedriem.pca_planning moved to skfedriem.decomposition.planning; the old path is removed in 0.3.",
              FutureWarning, stacklevel=2)
