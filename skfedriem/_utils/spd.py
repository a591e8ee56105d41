"""Validation of SPD matrix inputs (shared by estimators on covariance matrices)."""

from __future__ import annotations

import numpy as np

__all__ = ["check_spd"]


def check_spd(X: np.ndarray, *, name: str = "X", trace_normalised: bool = False) -> np.ndarray:
    """Raise a ValueError naming the first matrix that is not SPD.

    Parameters
    ----------
    X : ndarray of shape (n_matrices, n_channels, n_channels)
        Finite float array (as returned by ``validate_data(..., allow_nd=True)``).
    name : str
        The parameter name used in messages.
    trace_normalised : bool, default=False
        The model divides each matrix by its own trace: 1 x 1 matrices are
        refused (every one becomes [[1]], nothing to learn).

    Returns
    -------
    X : ndarray
        The same array, after the checks.
    """
    if X.ndim != 3 or X.shape[1] != X.shape[2]:
        raise ValueError(
            f"{name} must be a stack of square matrices, shape (n_matrices, n_channels, n_channels) "
            f"(e.g. from pyriemann.estimation.Covariances). Got shape {X.shape} instead."
        )
    if trace_normalised and X.shape[1] == 1:
        raise ValueError(f"{name} holds 1 x 1 matrices: divided by its own trace (this model's scale), every one is "
                         "[[1]] and nothing can be learnt. Give covariances of 2 channels or more.")
    asymmetry = np.abs(X - X.transpose(0, 2, 1)).max(axis=(1, 2))
    scale = np.abs(X).max(axis=(1, 2))
    bad = np.flatnonzero(asymmetry > 1e-6 * scale)
    if bad.size:
        i = bad[0]
        raise ValueError(
            f"{name} must hold symmetric matrices; {name}[{i}] is not (max |X - X.T| = {asymmetry[i]:.3g}). "
            f"{bad.size} of {len(X)} matrices are affected."
        )
    smallest = np.linalg.eigvalsh(X)[:, 0]
    bad = np.flatnonzero(~(smallest > 0))
    if bad.size:
        i = bad[0]
        raise ValueError(
            f"{name} must hold positive definite matrices; {name}[{i}] has smallest eigenvalue "
            f"{smallest[i]:.3g}. {bad.size} of {len(X)} matrices are affected (regularise the covariance "
            "estimator, e.g. Covariances('oas'))."
        )
    return X
