"""A new classifier in one file: a linear model of the covariance matrices' logarithms (log-Euclidean features).

The estimator says what a record is (``_check_inputs``), builds its network (``_build_module``) and declares what the
planner needs to know of it (``schedule``); every parameter of :class:`FederatedClassifier` is its parameter (a model
parameter of its own would be one more annotated class attribute, ``rank: int = 8``); everything else (the client split, the private rounds, the accounting,
``plan_``, the fitted privacy attributes, the deployment API) is inherited. The one registration at the end names it
for deployments: ``estimator_from_run_config("logeuclidean", run_config)`` builds it from a Flower run configuration.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from skfedriem.classification import FederatedClassifier, check_spd
from skfedriem.classification.planning import ClassifierSchedule
from skfedriem.flower.deployment.run_config import register_deployable
from skfedriem.privacy import ModelCapabilities


class LogEuclideanLinear(nn.Module):
    """Logits of W vech(log(X / (tr X / n))) + b; off-diagonal entries weighted √2 (the Frobenius metric).

    Parameters
    ----------
    n_channels, n_classes : int
    dtype : torch.dtype
    """

    def __init__(self, n_channels: int, n_classes: int, *, dtype: torch.dtype) -> None:
        super().__init__()
        self.rows, self.cols = torch.triu_indices(n_channels, n_channels)
        self.weights = torch.where(self.rows == self.cols, 1.0, math.sqrt(2)).to(dtype)
        self.linear = nn.Linear(len(self.rows), n_classes, dtype=dtype)
        nn.init.zeros_(self.linear.weight)  # data-independent: the zero classifier
        nn.init.zeros_(self.linear.bias)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        scale = X.diagonal(dim1=-2, dim2=-1).mean(-1)
        values, vectors = torch.linalg.eigh(X / scale[..., None, None])
        logarithm = (vectors * values.log()[..., None, :]) @ vectors.transpose(-1, -2)
        return self.linear(logarithm[..., self.rows, self.cols] * self.weights)

    #: Its forward reads only trailing axes, so K clients' records (K, B, n, n) go through it at once, each client's
    #: through its own stacked Linear (checked once per stack): its clients run in lockstep.
    capabilities = ModelCapabilities(stacks=True)


class FederatedLogEuclideanClassifier(FederatedClassifier):
    """Linear classifier of log-Euclidean features of covariance matrices, trained by DP-RFedProj across clients.

    Parameters
    ----------
    [federation parameters]

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    module_ : LogEuclideanLinear
    [fitted privacy attributes]
    """

    schedule = ClassifierSchedule(
        name="logeuclidean", batch_size=64, optimizer="sgd", optimizer_without_privacy="sgd", adam_lr=1e-2,
        sgd_lr=0.1, sgd_lr_reason="a linear model of bounded features, planned as the tangent-space classifier")
    _model_parameters = ("dtype", "classes")

    def _check_inputs(self, X: np.ndarray, name: str = "X") -> np.ndarray:
        return check_spd(X, name=name)

    def _build_module(self, input_shape, n_classes, generator, dtype):
        return LogEuclideanLinear(input_shape[0], n_classes, dtype=dtype)


register_deployable(FederatedLogEuclideanClassifier, name="logeuclidean")
