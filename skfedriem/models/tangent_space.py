"""A linear classifier of covariance matrices in the tangent space at a public reference point.

The classic Riemannian pipeline of BCI (Barachant et al., 2013, "Classification
of covariance matrices using a Riemannian-based kernel for BCI applications"):
map each matrix to the tangent space of the SPD manifold at a reference point R,
t(X) = upper(log(R^{-1/2} X R^{-1/2})) with the off-diagonal entries weighted
by √2 (so that ‖t(X)‖ is the affine-invariant distance from X to R), then a
logistic regression on t(X). The map is pyRiemann's own
:func:`pyriemann.geometry.tangentspace.tangent_space` (which computes on torch
tensors); only the linear layer is trained.

For record-level privacy the reference must be public: pyRiemann's
``TangentSpace`` transformer fits it as the mean of the training matrices,
which would make every record's features depend on every other record. Here it
is fixed before training: the identity after each trial's own trace
normalisation, a matrix the user supplies from public data, or the
federation's log-Euclidean mean released by the clients in a round of its own
(:class:`TangentMean`, :func:`reference_from_mean`), charged like any round.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from torch import nn

from ..privacy.per_record.capabilities import ModelCapabilities
from .recentring import check_reference
from .spdnet import TraceNormalize

__all__ = ["LinearOnFeatures", "TangentMean", "TangentSpace", "TangentSpaceLogistic", "reference_from_mean"]


def _tangent_space(X: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():  # pyRiemann 0.12's import-time notice about its module layout, not ours
        warnings.simplefilter("ignore", DeprecationWarning)
        from pyriemann.geometry.tangentspace import tangent_space
    return tangent_space(X, reference, metric="riemann")


class TangentSpace(nn.Module):
    """X ↦ upper(log(R^{-1/2} X R^{-1/2})), weighted √2 off the diagonal: n(n+1)/2 values.

    Parameters
    ----------
    reference : torch.Tensor of shape (n, n)
        The public SPD reference point R.

    Examples
    --------
    >>> import torch
    >>> layer = TangentSpace(torch.eye(3, dtype=torch.float64))
    >>> layer(torch.eye(3, dtype=torch.float64)[None]).abs().max().item()
    0.0
    """

    capabilities = ModelCapabilities(stacks=True)

    def __init__(self, reference: torch.Tensor) -> None:
        super().__init__()
        check_reference(reference)
        self.register_buffer("reference", reference)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return _tangent_space(X, self.reference)


class TangentSpaceLogistic(nn.Module):
    """[TraceNormalize] → TangentSpace at R → Linear: multinomial logistic regression on tangent vectors.

    Every parameter is Euclidean (the linear layer), initialised at zero, as
    scikit-learn's ``LogisticRegression`` starts; the feature map has no
    parameters: the clients compute each record's tangent vector once per fit
    (:meth:`fixed_features`) and train the linear layer on them.

    Parameters
    ----------
    n_channels : int
        Size C of the input covariance matrices.
    n_classes : int
        Number of output logits.
    reference : torch.Tensor of shape (C, C), optional
        The public reference point (SPD); it is trace-normalised like the
        inputs. None: the identity.
    normalize : bool, default=True
        Divide each input (and the reference) by its trace / C first (see
        :class:`~skfedriem.models.TraceNormalize`).
    dtype : torch.dtype, default=torch.float32

    Examples
    --------
    >>> net = TangentSpaceLogistic(22, 4)
    >>> sum(p.numel() for p in net.parameters())
    1016
    """

    def __init__(self, n_channels: int, n_classes: int, reference: torch.Tensor | None = None, *,
                 normalize: bool = True, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        n = int(n_channels)
        reference = torch.eye(n, dtype=dtype) if reference is None else torch.as_tensor(reference, dtype=dtype)
        if reference.shape != (n, n):
            raise ValueError(f"The reference point must have shape ({n}, {n}) like the inputs. "
                             f"Got {tuple(reference.shape)} instead.")
        self.normalize = TraceNormalize() if normalize else nn.Identity()
        self.features = TangentSpace(self.normalize(reference))
        # skip_init: nn.Linear's own init would draw from (and advance) torch's global generator
        self.classifier = nn.utils.skip_init(nn.Linear, n * (n + 1) // 2, n_classes, dtype=dtype)
        with torch.no_grad():
            self.classifier.weight.zero_()
            self.classifier.bias.zero_()

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """Logits, shape (n_matrices, n_classes), for X of shape (n_matrices, C, C)."""
        return self.classifier(self.fixed_features(X))

    def at_reference(self, reference: torch.Tensor) -> None:
        """Take the tangent space at another reference point (before training: the features change with it).

        Parameters
        ----------
        reference : torch.Tensor of shape (C, C)
            SPD; trace-normalised like the inputs.
        """
        reference = torch.as_tensor(reference, dtype=self.features.reference.dtype)
        if reference.shape != self.features.reference.shape:
            raise ValueError(f"The reference point must have shape {tuple(self.features.reference.shape)} like the "
                             f"inputs. Got {tuple(reference.shape)} instead.")
        self.features = TangentSpace(self.normalize(reference))

    #: The name of the reference point's buffer in :meth:`state_dict`.
    reference_buffer = "features.reference"

    def reference_point(self) -> torch.Tensor:
        """The (trace-normalised) reference point the tangent vectors are taken at, shape (C, C)."""
        return self.features.reference

    def fixed_features(self, X: torch.Tensor) -> torch.Tensor:
        """The tangent vectors the linear layer reads: trace normalisation and the map at the public reference,
        which hold no parameter (the clients compute them once per fit,
        :func:`~skfedriem.federated.on_fixed_features`)."""
        return self.features(self.normalize(X))

    def on_features(self) -> nn.Module:
        """The linear layer alone, reading :meth:`fixed_features`' output (its parameters are this model's)."""
        return LinearOnFeatures(self.classifier)

    #: Stacks; its feature map holds no parameter and reads nothing but the public reference.
    capabilities = ModelCapabilities(stacks=True,
                                     fixed_features=lambda model: (model.fixed_features, model.on_features()))


class LinearOnFeatures(nn.Module):
    """The linear layer of a :class:`TangentSpaceLogistic`, applied to tangent vectors computed beforehand.

    Parameters
    ----------
    classifier : torch.nn.Linear
        The model's own layer (shared, not copied: training this module trains the model).
    """

    capabilities = ModelCapabilities(stacks=True)

    def __init__(self, classifier: nn.Linear) -> None:
        super().__init__()
        self.classifier = classifier

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Logits for tangent vectors of shape (..., n (n + 1) / 2)."""
        return self.classifier(features)


class TangentMean(nn.Module):
    """A linear layer w whose per-record loss is −⟨t(X̃), w⟩, t at the identity after trace normalisation.

    Each record's gradient is −t(X̃), whatever w: one full-batch private step of
    SGD at learning rate 1 from w = 0 makes w the mean of the client's clipped
    tangent vectors plus the step's Gaussian noise, and ProjAvg (FedAvg for a
    Euclidean block) averages the clients' means with equal weights. So a
    one-round run of the ordinary private protocol releases the federation's
    log-Euclidean mean (of the clients' means: not the pooled trials' mean when
    client sizes differ),
    clipped, noised and charged like any round; :func:`reference_from_mean`
    turns it into a reference point.

    Parameters
    ----------
    n_channels : int
    dtype : torch.dtype, default=torch.float32

    Examples
    --------
    >>> import torch
    >>> model = TangentMean(3, dtype=torch.float64)
    >>> model(2 * torch.eye(3, dtype=torch.float64)[None]).shape
    torch.Size([1])
    """

    capabilities = ModelCapabilities(stacks=True)

    def __init__(self, n_channels: int, *, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        n = int(n_channels)
        self.normalize = TraceNormalize()
        self.features = TangentSpace(torch.eye(n, dtype=dtype))
        self.mean = nn.utils.skip_init(nn.Linear, n * (n + 1) // 2, 1, bias=False, dtype=dtype)
        with torch.no_grad():
            self.mean.weight.zero_()

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """Each record's loss −⟨t(X̃), w⟩, shape (n_matrices,)."""
        return -self.mean(self.features(self.normalize(X)))[..., 0]


def reference_from_mean(vector, n_channels: int, *, max_condition: float = 1e3) -> np.ndarray:
    """The SPD reference point exp(L) of a mean tangent vector at the identity, its condition number bounded.

    ``vector`` holds upper(L) with the off-diagonal entries weighted by √2 (the
    layout of :class:`TangentSpace`). The eigenvalues of L are clipped to
    within log(``max_condition``) of the largest, so that the reference whitens
    in the model's dtype even when the mean is noisy (post-processing: it
    reads nothing but the vector).

    Parameters
    ----------
    vector : array-like of shape (n_channels (n_channels + 1) / 2,)
    n_channels : int
    max_condition : float, default=1e3

    Returns
    -------
    ndarray of shape (n_channels, n_channels)
        SPD, largest eigenvalue 1.

    Examples
    --------
    >>> reference_from_mean([0.0, 0.0, 0.0], 2)
    array([[1., 0.],
           [0., 1.]])
    """
    vector = np.asarray(vector, dtype=np.float64).ravel()
    rows, cols = np.triu_indices(n_channels)
    if vector.shape != rows.shape:
        raise ValueError(f"A mean tangent vector of {n_channels} channels has {rows.size} values. "
                         f"Got {vector.size}.")
    log = np.zeros((n_channels, n_channels))
    log[rows, cols] = np.where(rows == cols, vector, vector / math.sqrt(2))
    log = np.triu(log) + np.triu(log, 1).T
    eigenvalues, vectors = np.linalg.eigh(log)
    eigenvalues = np.clip(eigenvalues - eigenvalues.max(), -math.log(max_condition), 0.0)
    return (vectors * np.exp(eigenvalues)) @ vectors.T
