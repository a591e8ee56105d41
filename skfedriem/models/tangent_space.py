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
is fixed before training (the identity after each trial's own trace
normalisation, or a matrix the user supplies from public data).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from .spdnet import TraceNormalize

__all__ = ["TangentSpace", "TangentSpaceLogistic"]


def _tangent_space(X: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():  # pyRiemann 0.12's import-time notice about its module layout, not ours
        warnings.simplefilter("ignore", DeprecationWarning)
        from pyriemann.geometry.tangentspace import tangent_space
    return tangent_space(X, reference, metric="riemann")


def _check_reference(reference: torch.Tensor) -> None:
    """Raise a ValueError unless ``reference`` is a finite SPD matrix its dtype can whiten inputs with.

    The map whitens every input by R^{-1/2}: in a dtype of resolution ε the
    whitened matrix carries a relative error of about ε·cond(R), so a
    reference whose condition number exceeds 1/√ε (2.9e3 in float32, 6.7e7
    in float64) is refused rather than left to give non-finite features.
    """
    if reference.ndim != 2 or reference.shape[0] != reference.shape[1]:
        raise ValueError(f"The reference point must be a square matrix. Got shape {tuple(reference.shape)}.")
    if not torch.isfinite(reference).all():
        raise ValueError("The reference point has non-finite entries.")
    if not torch.allclose(reference, reference.mT, rtol=1e-5, atol=0.0):
        raise ValueError("The reference point is not symmetric.")
    eigenvalues = torch.linalg.eigvalsh(reference.double())
    limit = torch.finfo(reference.dtype).eps ** -0.5
    if eigenvalues[0] <= 0 or eigenvalues[-1] / eigenvalues[0] > limit:
        raise ValueError(f"The reference point must be SPD with a condition number at most {limit:.3g} in "
                         f"{reference.dtype}; its eigenvalues span [{eigenvalues[0]:.3g}, {eigenvalues[-1]:.3g}]. "
                         "Regularise it, or use float64.")


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

    supports_client_stacking = True

    def __init__(self, reference: torch.Tensor) -> None:
        super().__init__()
        _check_reference(reference)
        self.register_buffer("reference", reference)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return _tangent_space(X, self.reference)


class TangentSpaceLogistic(nn.Module):
    """[TraceNormalize] → TangentSpace at R → Linear: multinomial logistic regression on tangent vectors.

    Every parameter is Euclidean (the linear layer), initialised at zero, as
    scikit-learn's ``LogisticRegression`` starts; the feature map has no
    parameters, so a private step costs one eigendecomposition per record in
    the forward pass and no backward through it.

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

    supports_client_stacking = True

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
        return self.classifier(self.features(self.normalize(X)))
