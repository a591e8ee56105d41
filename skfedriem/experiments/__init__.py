"""Runnable studies of the paper: ``python -m skfedriem.experiments eeg --help``."""

from .arms import ARMS
from .eeg import DATASETS, run_study

__all__ = ["ARMS", "DATASETS", "run_study"]
