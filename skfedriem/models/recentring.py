"""Re-centring covariance matrices at a public reference point: X ↦ R^{-1/2} X R^{-1/2}.

Covariances of EEG trials share a large common part (the head, the montage,
the rest state) beside which the class signal is small: the mean of the
trace-normalised trials of the 24 PhysioNet subjects sits 8.1 from the identity on
9 motor channels, their spread around it is 2.1. Whitening every trial by a
reference R near that mean (the congruence X ↦ R^{-1/2} X R^{-1/2}, pyRiemann's
``Whitening`` and the re-centring of its transfer learning) moves the mean to
the identity, where SPDNet's BiMap and eigenvalue layers see the class signal
rather than the common part.

For record-level privacy R must be public: a matrix of public data, or the
clients' mean released privately before the rounds (the classifiers'
``reference``). Each record is then mapped on its own, so a record's input
to the network depends on that record alone.
"""

from __future__ import annotations

import torch
from torch import nn

from ..privacy.per_record.capabilities import ModelCapabilities

__all__ = ["Recentre", "check_reference"]


def check_reference(reference: torch.Tensor) -> None:
    """Raise a ValueError unless ``reference`` is a finite SPD matrix its dtype can whiten inputs with.

    Whitening by R^{-1/2} in a dtype of resolution ε carries a relative error
    of about ε·cond(R), so a reference whose condition number exceeds 1/√ε
    (2.9e3 in float32, 6.7e7 in float64) is refused rather than left to give
    non-finite features.

    Parameters
    ----------
    reference : torch.Tensor of shape (n, n)
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


def inverse_square_root(reference: torch.Tensor) -> torch.Tensor:
    """R^{-1/2} of an SPD matrix, computed in float64 and returned in R's dtype."""
    eigenvalues, vectors = torch.linalg.eigh(reference.double())
    return ((vectors * eigenvalues.rsqrt()) @ vectors.mT).to(reference.dtype)


class Recentre(nn.Module):
    """X ↦ R^{-1/2} X R^{-1/2}: a public reference point R moved to the identity. No parameters.

    Parameters
    ----------
    reference : torch.Tensor of shape (n, n)
        The public SPD reference point R (checked by :func:`check_reference`).

    Attributes
    ----------
    reference : torch.Tensor of shape (n, n)
        R (a buffer).
    whitener : torch.Tensor of shape (n, n)
        R^{-1/2} (a buffer).

    Examples
    --------
    >>> import torch
    >>> R = torch.tensor([[4.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    >>> Recentre(R)(R[None])
    tensor([[[1., 0.],
             [0., 1.]]], dtype=torch.float64)
    """

    capabilities = ModelCapabilities(stacks=True)

    def __init__(self, reference: torch.Tensor) -> None:
        super().__init__()
        check_reference(reference)
        self.register_buffer("reference", reference)
        self.register_buffer("whitener", inverse_square_root(reference))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.whitener @ X @ self.whitener
