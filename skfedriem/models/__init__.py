"""Torch modules with manifold-tagged parameters."""

from .eegnet import EEGNet, TrialStandardize
from .pca import PCAProjector
from .spdnet import BiMap, LogEig, LogReEig, ReEig, SPDNet, TraceNormalize, Vech
from .spectral import log_eig, log_re_eig, re_eig, spectral_function

__all__ = [
    "BiMap",
    "EEGNet",
    "LogEig",
    "LogReEig",
    "PCAProjector",
    "ReEig",
    "SPDNet",
    "TraceNormalize",
    "TrialStandardize",
    "Vech",
    "log_eig",
    "log_re_eig",
    "re_eig",
    "spectral_function",
]
