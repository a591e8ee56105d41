"""Torch modules with manifold-tagged parameters (and the one-shot PCA release as a module)."""

from .eegnet import EEGNet, TrialStandardize
from .pca import PCAProjector
from .recentring import Recentre
from .second_moment import SecondMoment
from .spdnet import BiMap, LogEig, LogReEig, ReEig, SPDNet, TraceNormalize, Vech
from .spectral import log_eig, log_re_eig, re_eig, spectral_function
from .tangent_space import LinearOnFeatures, TangentMean, TangentSpace, TangentSpaceLogistic, reference_from_mean

__all__ = [
    "BiMap",
    "EEGNet",
    "LinearOnFeatures",
    "LogEig",
    "LogReEig",
    "PCAProjector",
    "ReEig",
    "Recentre",
    "SPDNet",
    "SecondMoment",
    "TangentMean",
    "TangentSpace",
    "TangentSpaceLogistic",
    "TraceNormalize",
    "TrialStandardize",
    "Vech",
    "log_eig",
    "log_re_eig",
    "re_eig",
    "reference_from_mean",
    "spectral_function",
]
