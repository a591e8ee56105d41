"""Metrics for experiments (computed on data someone holds in full: not private)."""

from __future__ import annotations

import numpy as np

__all__ = ["pca_optimality_gap", "subspace_overlap"]


def pca_optimality_gap(components, X) -> float:
    """F(P) − F(P⋆) for the PCA objective F(P) = −tr(P M), M = XᵀX / n.

    P is the projector on the rows of ``components`` and P⋆ the top-p
    eigenprojector of the (uncentred) second moment M of ``X``, so the gap is
    Σ_{j<=p} λ_j(M) − tr(U M Uᵀ) >= 0.

    Parameters
    ----------
    components : array-like of shape (n_components, n_features)
        Orthonormal rows (e.g. ``FederatedPCA().components_``).
    X : array-like of shape (n_samples, n_features)

    Returns
    -------
    gap : float

    Examples
    --------
    >>> import numpy as np
    >>> X = np.diag([3.0, 2.0, 1.0])
    >>> pca_optimality_gap(np.eye(3)[:1], X), pca_optimality_gap(np.eye(3)[2:], X)
    (0.0, 2.6666666666666665)
    """
    U = _orthonormal_rows(components, "components")
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != U.shape[1] or X.shape[0] == 0:
        raise ValueError(f"X must have shape (n_samples >= 1, {U.shape[1]}) to match components of shape {U.shape}. "
                         f"Got shape {X.shape} instead.")
    M = X.T @ X / X.shape[0]
    top = np.linalg.eigvalsh(M)[::-1][: U.shape[0]].sum()
    return float(max(top - np.trace(U @ M @ U.T), 0.0))


def subspace_overlap(components, reference) -> float:
    """How much two p-dimensional subspaces coincide: ‖A Bᵀ‖²_F / p, in [0, 1] (1: the same subspace).

    The mean squared cosine of the principal angles between the row spaces.

    Parameters
    ----------
    components, reference : array-like of shape (p, n_features)
        Orthonormal rows (e.g. ``FederatedPCA().components_`` and the top-p
        eigenvectors of the pooled data).

    Returns
    -------
    overlap : float

    Examples
    --------
    >>> import numpy as np
    >>> subspace_overlap(np.eye(3)[:2], np.eye(3)[1:])
    0.5
    """
    A = _orthonormal_rows(components, "components")
    B = _orthonormal_rows(reference, "reference")
    if A.shape != B.shape:
        raise ValueError(f"The subspaces must have the same shape (p, n_features). Got {A.shape} and {B.shape}.")
    return float(np.linalg.norm(A @ B.T) ** 2 / A.shape[0])


def _orthonormal_rows(rows, name: str) -> np.ndarray:
    """``rows`` as a (p, n_features) float array; ValueError naming ``name`` unless its rows are orthonormal (an
    overlap or a gap of other rows means nothing: 2.0 for a doubled basis)."""
    array = np.asarray(rows, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] == 0 or not np.isfinite(array).all():
        raise ValueError(f"{name} must be a finite array of shape (p >= 1, n_features). Got shape {array.shape}.")
    error = float(np.abs(array @ array.T - np.eye(array.shape[0])).max())
    if error > 1e-6:
        raise ValueError(f"{name} must have orthonormal rows (e.g. FederatedPCA().components_, or numpy.linalg.qr's "
                         f"Q.T); its Gram matrix is {error:.3g} away from the identity.")
    return array
