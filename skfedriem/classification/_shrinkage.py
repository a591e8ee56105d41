"""The James–Stein shrinkage of a privately released mean: post-processing with the noise it really carries."""

from __future__ import annotations

import numpy as np

__all__ = ["shrunk_mean"]


def shrunk_mean(released: np.ndarray, noise_std: float) -> np.ndarray:
    """The positive-part James–Stein estimate (1 − (d − 2) σ² / ‖m̂‖²)₊ m̂ of a mean released with noise std σ.

    Post-processing of the release with its public σ per coordinate (the plan's,
    :func:`~skfedriem.federated.plan.mean_step_noise`). In d ≥ 3 coordinates it is closer to the true mean than
    m̂ itself, in expected squared error, whatever that mean is (James and Stein, 1961; the positive part
    improves on it again). Where the noise's norm √d σ outweighs the mean (features already centred at the identity,
    or a small ε), it shrinks the reference back to the identity, the private default's; where the mean stands
    out (real EEG: 8.1 on 9 motor channels, against a spread of 2.1, ``benchmarks/tangent_offset.py``) it keeps it.

    Parameters
    ----------
    released : ndarray of shape (d,)
    noise_std : float

    Returns
    -------
    ndarray of shape (d,)

    Examples
    --------
    >>> shrunk_mean(np.array([3.0, 4.0, 0.0, 0.0]), 1.0)    # ‖m̂‖² = 25, (d − 2) σ² = 2
    array([2.76, 3.68, 0.  , 0.  ])
    >>> shrunk_mean(np.array([1.0, 0.5, 0.0, 0.0]), 1.0)    # ‖m̂‖² = 1.25 < 2: noise, as far as anyone can tell
    array([0., 0., 0., 0.])
    """
    squared = float(released @ released)
    if squared == 0.0:
        return released
    return max(0.0, 1.0 - (released.size - 2) * noise_std**2 / squared) * released
