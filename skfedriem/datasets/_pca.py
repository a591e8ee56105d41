"""Synthetic federated PCA data with a known optimum."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from scipy.linalg import expm
from sklearn.utils import check_random_state

from .._utils.compat import Interval, validate_params

__all__ = ["make_federated_pca"]


@validate_params({
    "n_clients": [Interval(Integral, 1, None, closed="left")],
    "n_samples_per_client": [Interval(Integral, 1, None, closed="left")],
    "n_features": [Interval(Integral, 1, None, closed="left")],
    "n_components": [Interval(Integral, 1, None, closed="left")],
    "eigengap": [Interval(Real, 0, None, closed="neither")],
    "decay": [Interval(Real, 0, 1, closed="right")],
    "heterogeneity": [Interval(Real, 0, None, closed="left")],
    "random_state": ["random_state"],
}, prefer_skip_nested_validation=True)
def make_federated_pca(
    n_clients: int = 5,
    n_samples_per_client: int = 1000,
    n_features: int = 10,
    *,
    n_components: int = 2,
    eigengap: float = 4.0,
    decay: float = 0.8,
    heterogeneity: float = 0.0,
    random_state=None,
):
    """Records of ``n_clients`` clients for federated PCA, with a controlled spectrum.

    The pooled second moment has a top-``n_components`` block of eigenvalues
    ``eigengap`` times larger than the rest, which decays geometrically by
    ``decay``. Client i's records are Gaussian with covariance R_i Σ R_iᵀ,
    R_i = exp(heterogeneity · A_i) for a random skew-symmetric A_i of unit
    Frobenius norm (0 gives identically distributed clients). Records are
    scaled so that every record has norm <= 1, so per-record PCA gradients
    have norm <= 1 (clipping at C >= 1 is inactive).

    Parameters
    ----------
    n_clients : int, default=5
    n_samples_per_client : int, default=1000
    n_features : int, default=10
    n_components : int, default=2
    eigengap : float, default=4.0
    decay : float, default=0.8
    heterogeneity : float, default=0.0
    random_state : int, RandomState instance or None

    Returns
    -------
    X : ndarray of shape (n_clients * n_samples_per_client, n_features)
    groups : ndarray of shape (n_clients * n_samples_per_client,)
        The client (0 .. n_clients − 1) of each record.

    Examples
    --------
    >>> X, groups = make_federated_pca(3, 100, 6, random_state=0)
    >>> X.shape, np.bincount(groups).tolist(), bool(np.linalg.norm(X, axis=1).max() <= 1)
    ((300, 6), [100, 100, 100], True)
    """
    if n_components > n_features:
        raise ValueError(f"The 'n_components' parameter must be at most n_features={n_features}. "
                         f"Got {n_components} instead.")
    rs = check_random_state(random_state)
    spectrum = decay ** np.arange(n_features)
    spectrum[:n_components] *= eigengap
    Q, _ = np.linalg.qr(rs.standard_normal((n_features, n_features)))
    blocks = []
    for _ in range(n_clients):
        A = rs.standard_normal((n_features, n_features))
        A = (A - A.T) / 2
        R = expm(heterogeneity * A / max(np.linalg.norm(A), 1e-12))
        basis = R @ Q
        Z = rs.standard_normal((n_samples_per_client, n_features)) * np.sqrt(spectrum)
        blocks.append(Z @ basis.T)
    X = np.concatenate(blocks)
    X /= np.linalg.norm(X, axis=1).max()
    groups = np.repeat(np.arange(n_clients), n_samples_per_client)
    return X, groups
