"""Moved to :mod:`skfedriem.flower.deployment.run_config` (this path works, with a ``FutureWarning``, until 0.3)."""

from ._moved import moved

moved(__name__, "skfedriem.flower.deployment.run_config")
