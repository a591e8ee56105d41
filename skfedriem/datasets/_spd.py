"""Synthetic SPD matrices in classes, split across heterogeneous clients."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from scipy.linalg import expm
from sklearn.utils import check_random_state

from .._utils.compat import Interval, validate_params

__all__ = ["make_spd_classification"]


def _random_symmetric(rs: np.random.RandomState, n: int) -> np.ndarray:
    A = rs.standard_normal((n, n))
    S = (A + A.T) / 2
    return S / np.linalg.norm(S)


@validate_params({
    "n_clients": [Interval(Integral, 1, None, closed="left")],
    "n_matrices_per_client": [Interval(Integral, 1, None, closed="left")],
    "n_channels": [Interval(Integral, 1, None, closed="left")],
    "n_classes": [Interval(Integral, 2, None, closed="left")],
    "class_sep": [Interval(Real, 0, None, closed="left")],
    "noise": [Interval(Real, 0, None, closed="left")],
    "heterogeneity": [Interval(Real, 0, None, closed="left")],
    "scale": [Interval(Real, 0, None, closed="neither")],
    "random_state": ["random_state"],
}, prefer_skip_nested_validation=True)
def make_spd_classification(
    n_clients: int = 3,
    n_matrices_per_client: int = 100,
    n_channels: int = 8,
    *,
    n_classes: int = 2,
    class_sep: float = 1.0,
    noise: float = 1.0,
    heterogeneity: float = 0.5,
    scale: float = 1.0,
    random_state=None,
):
    """Covariance-like SPD matrices of ``n_classes`` classes held by ``n_clients`` clients.

    Class c has a mean M_c = exp(class_sep · S_c) (S_c random symmetric, unit
    Frobenius norm). A matrix of class c at client i is
    ``scale · A_i M_c^½ exp(noise · E) M_c^½ A_iᵀ`` with E random symmetric
    (unit norm) per matrix and A_i = exp(heterogeneity · S_i) a client-specific
    distortion (a "site" or "subject" effect; 0 gives identically distributed
    clients). Classes are balanced within each client (up to one matrix).

    Parameters
    ----------
    n_clients : int, default=3
    n_matrices_per_client : int, default=100
    n_channels : int, default=8
    n_classes : int, default=2
    class_sep : float, default=1.0
        Distance scale between class means (0: no class signal).
    noise : float, default=1.0
        Within-class spread.
    heterogeneity : float, default=0.5
    scale : float, default=1.0
        Overall scale (e.g. 1e-10 mimics EEG covariances in V²).
    random_state : int, RandomState instance or None

    Returns
    -------
    X : ndarray of shape (n_clients * n_matrices_per_client, n_channels, n_channels)
    y : ndarray of shape (n_clients * n_matrices_per_client,)
        Class labels 0 .. n_classes − 1.
    groups : ndarray of shape (n_clients * n_matrices_per_client,)
        Client labels 0 .. n_clients − 1.

    Examples
    --------
    >>> X, y, groups = make_spd_classification(2, 10, 4, random_state=0)
    >>> X.shape, bool((np.linalg.eigvalsh(X) > 0).all()), np.bincount(y).tolist()
    ((20, 4, 4), True, [10, 10])
    """
    rs = check_random_state(random_state)
    roots = []
    for _ in range(n_classes):
        w, V = np.linalg.eigh(class_sep * _random_symmetric(rs, n_channels))
        roots.append((V * np.exp(w / 2)) @ V.T)
    X, y, groups = [], [], []
    for client in range(n_clients):
        A = expm(heterogeneity * _random_symmetric(rs, n_channels))
        labels = rs.permutation(np.arange(n_matrices_per_client) % n_classes)
        for label in labels:
            w, V = np.linalg.eigh(noise * _random_symmetric(rs, n_channels))
            core = roots[label] @ (V * np.exp(w)) @ V.T @ roots[label]
            X.append(A @ core @ A.T)
            y.append(label)
            groups.append(client)
    X = scale * np.asarray(X)
    X = (X + X.transpose(0, 2, 1)) / 2
    return X, np.asarray(y), np.asarray(groups)
