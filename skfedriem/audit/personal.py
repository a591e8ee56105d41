"""Audit a client's release of its own mean (``recentre="client"``): the Gaussian mechanism on its clipped mean.

One client holds two trials at the base point R = I: the identity, and a canary
exp(±A) with A = a·diag(1, −1, 0, …) (D: +, D': −). Both canaries have the same
spectrum, so the trace normalisation shifts their logarithms by the same
multiple of I, and their tangent vectors ±upper(A) − s·upper(I) are clipped to
the same norm C, 2C·‖A‖ / √(‖A‖² + n s²) apart (0.98 · 2C at the defaults): the
near-worst-case pair of the release's 2C / m sensitivity. The score is the
released vector's coordinate along upper(A) (the common part is orthogonal to
it), the likelihood-ratio test of one Gaussian release; the James–Stein
shrinkage multiplies the vector by a factor ≥ 0, so the score's sign, which the
test reads at threshold 0, is the release's own.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from ..classification._recentring import PersonalMeans
from ..privacy.accounting.subsampled_gaussian import gdp_mu_for_epsilon
from ..privacy.mechanisms.randomness import SeededRandomness
from .bounds import AuditResult, audit_scores

__all__ = ["audit_personal_release"]


def _canary(sign: int, n_channels: int, strength: float) -> np.ndarray:
    diagonal = np.zeros(n_channels)
    diagonal[:2] = sign * strength, -sign * strength
    return np.stack([np.eye(n_channels), np.diag(np.exp(diagonal))])


def _score(mean: np.ndarray) -> float:
    """(log M)₀₀ − (log M)₁₁ at the base point I: the released vector along upper(A), up to a positive factor."""
    eigenvalues, vectors = np.linalg.eigh(mean)
    log = (vectors * np.log(eigenvalues)) @ vectors.T
    return float(log[0, 0] - log[1, 1])


def audit_personal_release(eps: float, *, delta: float = 1e-5, n_channels: int = 3, clip: float = 0.7,
                           strength: float = 0.5, n_runs: int = 500, random_state: int | None = None,
                           confidence: float = 0.95) -> AuditResult:
    """Audit ``n_runs`` releases of a client's mean on D and as many on D' (module docstring).

    Parameters
    ----------
    eps : float
        What one release is calibrated to alone (its μ meets (eps, delta)).
    delta : float, default=1e-5
    n_channels : int, default=3
    clip : float, default=0.7
        C of the release; below the canaries' norm, so both are clipped to it.
    strength : float, default=0.5
        a, the canary's log-eigenvalue.
    n_runs : int, default=500
    random_state : int, optional
        Seeds release j with ``random_state + j``; None: OS entropy.
    confidence : float, default=0.95

    Returns
    -------
    AuditResult
    """
    personal = PersonalMeans(mu=gdp_mu_for_epsilon(eps, delta), clip=clip)
    base = np.eye(n_channels)
    scores: dict[int, list[float]] = {1: [], -1: []}
    started = time.perf_counter()
    for side, offset in ((1, 0), (-1, n_runs)):
        trials = torch.from_numpy(_canary(side, n_channels, strength))
        for j in range(n_runs):
            seed = np.random.SeedSequence(None if random_state is None else random_state + offset + j)
            mean, _, _ = personal.release(trials, None, base, SeededRandomness(seed))
            scores[side].append(_score(mean))
    return audit_scores(scores[1], scores[-1], mu0=personal.mu, sample_rate=1.0, steps=1, sampling="fixed",
                        delta=delta, epsilon_certified=float(eps), confidence=confidence, threshold=0.0,
                        seconds=time.perf_counter() - started)
