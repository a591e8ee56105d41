"""Federated, record-level private classifiers (scikit-learn estimators)."""

from .._utils.spd import check_spd
from ._base import FederatedClassifier
from ._eegnet import FederatedEEGNetClassifier
from ._recentring import PERSONAL_CLIP, PERSONAL_SHARE, PersonalMeans
from ._reference import CovarianceClassifier
from ._spdnet import FederatedSPDNetClassifier
from ._tangent_space import (REFERENCE_CLIP, REFERENCE_NOISE_LIMIT, REFERENCE_SHARE, FederatedTangentSpaceClassifier,
                             shrunk_mean)

__all__ = ["PERSONAL_CLIP", "PERSONAL_SHARE", "PersonalMeans", "REFERENCE_CLIP", "REFERENCE_NOISE_LIMIT", "REFERENCE_SHARE", "CovarianceClassifier", "FederatedClassifier",
           "FederatedEEGNetClassifier", "FederatedSPDNetClassifier", "FederatedTangentSpaceClassifier", "check_spd",
           "shrunk_mean"]
