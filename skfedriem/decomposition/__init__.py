"""Federated private PCA (a scikit-learn transformer) and its planner."""

from ._pca import FederatedPCA, identity_loss

__all__ = ["FederatedPCA", "identity_loss"]
