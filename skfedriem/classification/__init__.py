"""Federated, record-level private classifiers (scikit-learn estimators)."""

from ._base import FederatedClassifier
from ._eegnet import FederatedEEGNetClassifier
from ._spdnet import FederatedSPDNetClassifier
from ._tangent_space import FederatedTangentSpaceClassifier

__all__ = ["FederatedClassifier", "FederatedEEGNetClassifier", "FederatedSPDNetClassifier", "FederatedTangentSpaceClassifier"]
