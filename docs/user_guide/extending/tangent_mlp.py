"""A new model in one file: a small MLP on tangent vectors of covariance matrices, and its classifier.

The network is built from layers the private step already knows (SPDNet's trace normalisation, the tangent map at the
identity, torch's ``Linear`` and ``ReLU``), so it declares nothing: every layer stacks, so a round's clients take their
steps in lockstep, and the Linear layers' per-record rules give every record's gradient after one backward pass. A
layer of one's own would declare what it supports once, as a class attribute ``capabilities = ModelCapabilities(...)``
(``register_capabilities`` for a class one cannot edit); one that declares nothing runs its clients one by one, and a
fit says which layer, once. The one registration at the end names the classifier for deployments.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from skfedriem.classification import FederatedClassifier, check_spd
from skfedriem.classification.planning import ClassifierSchedule
from skfedriem.flower.deployment.run_config import register_deployable
from skfedriem.models import TangentSpace, TraceNormalize


def _linear(n_in: int, n_out: int, generator: torch.Generator | None, dtype: torch.dtype) -> nn.Linear:
    """torch's Linear, initialised by its own law from ``generator`` (never torch's global one)."""
    layer = nn.utils.skip_init(nn.Linear, n_in, n_out, dtype=dtype)
    bound = n_in ** -0.5
    with torch.no_grad():
        layer.weight.uniform_(-bound, bound, generator=generator)
        layer.bias.uniform_(-bound, bound, generator=generator)
    return layer


def tangent_mlp(n_channels: int, n_classes: int, hidden: int, *, generator: torch.Generator | None = None,
                dtype: torch.dtype = torch.float32) -> nn.Sequential:
    """TraceNormalize → TangentSpace at the identity → Linear → ReLU → Linear: logits of covariance matrices."""
    features = n_channels * (n_channels + 1) // 2
    return nn.Sequential(TraceNormalize(), TangentSpace(torch.eye(n_channels, dtype=dtype)),
                         _linear(features, hidden, generator, dtype), nn.ReLU(),
                         _linear(hidden, n_classes, generator, dtype))


class FederatedTangentMLPClassifier(FederatedClassifier):
    """A one-hidden-layer MLP of tangent vectors of covariance matrices, trained by DP-RFedProj across clients.

    Parameters
    ----------
    hidden : int, default=16
        The hidden layer's width.
    [federation parameters]

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    module_ : torch.nn.Sequential
    [fitted privacy attributes]
    """

    hidden: int = 16

    schedule = ClassifierSchedule(
        name="tangentmlp", batch_size=64, optimizer="sgd", optimizer_without_privacy="adam", adam_lr=1e-2,
        sgd_lr=0.1, sgd_lr_reason="an MLP of bounded tangent features, planned as the tangent-space classifier")
    _model_parameters = ("hidden", "dtype", "classes")

    def _check_inputs(self, X: np.ndarray, name: str = "X") -> np.ndarray:
        return check_spd(X, name=name)

    def _build_module(self, input_shape, n_classes, generator, dtype):
        return tangent_mlp(input_shape[0], n_classes, self.hidden, generator=generator, dtype=dtype)


register_deployable(FederatedTangentMLPClassifier, name="tangentmlp")
