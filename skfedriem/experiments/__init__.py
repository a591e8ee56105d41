"""Runnable studies of the paper: ``python -m skfedriem.experiments eeg --help``."""

from .eeg import ARMS, DATASETS, run_study

__all__ = ["ARMS", "DATASETS", "run_study"]
