"""``clip="auto"``: the clip norm follows a quantile of the per-record gradient norms, estimated privately.

Andrew, Thakkar, McMahan & Ramaswamy (2021), "Differentially private learning
with adaptive clipping" (the rule of TensorFlow Privacy's quantile-based
clipping), at record level inside every client's private steps:

* every step of client i also releases the noisy centred count of its batch's
  unclipped records, b̃ = Σ_z (1[‖g_z‖ ≤ C_t] − ½) + N(0, σ_b²)
  (:func:`~skfedriem.privacy.mechanisms.mechanism.noisy_clipped_count`), and the client
  returns the mean of b̃ / B + ½ over its steps with its submission;
* the server averages the clients' fractions (each clamped to
  ``FRACTION_RANGE``) into b̄_t and sets C_{t+1} = C_t exp(−η_C (b̄_t − γ))
  within ``CLIP_RANGE`` · C_0 (:func:`next_clip`): post-processing of the
  releases, like θ. The noise of the gradient follows the clip,
  σ_t = σ_0 C_t / C_0, so every step's cost is the same.

Under distributed noise the count goes through the secure sum instead, in
one more coordinate of each client's release
(:mod:`~skfedriem.privacy.mechanisms.discrete`), and b̄_t is the summed count
over the answering clients' batches (:func:`summed_fraction`); the grid
follows the clip instead of the noise.

**Charged as one Gaussian mechanism per step.** Replacing one record moves
the step's mean gradient by at most Δ C_t / B and its centred count by at
most 1 (the count's ±½ per record); with independent Gaussian noise on both,
the step is a Gaussian mechanism on the pair with μ0 = √(μ_g² + 1/σ_b²),
μ_g = Δ C_t / (B σ_t) (:attr:`~skfedriem.privacy.StepPlan.mu0`), subsampled
with the same batch. The run's μ0 is calibrated to (ε, δ) as for a fixed clip
and split: the count gets ``COUNT_SHARE`` of μ0² (σ_b = 1 / (μ0 √COUNT_SHARE)),
the gradient the rest (σ_0 = Δ C_0 / (B μ0 √(1 − COUNT_SHARE))). Every
ledger (the estimator's, each site's, a budget) charges that μ0, read off the
step plan the client runs.
"""

from __future__ import annotations

import math

import numpy as np

from .instructions import CLIPPED_FRACTION

__all__ = ["CLIP_LR", "CLIP_RANGE", "COUNT_SHARE", "FRACTION_RANGE", "INITIAL_CLIP", "clip_after", "clipped_fraction",
           "next_clip", "split_mu0", "summed_fraction"]

INITIAL_CLIP = 1.0
"""C_0, the clip of the first round."""
CLIP_LR = 0.2
"""η_C, the geometric step of the clip per round (Andrew et al.'s default)."""
COUNT_SHARE = 0.05
"""The share of each step's μ0² spent on the count (the gradient's noise grows by 1 / √(1 − 0.05), 2.6%)."""
FRACTION_RANGE = (-1.0, 2.0)
"""Each client's noisy fraction is clamped to this range before the server averages them: a faulty or
hostile client moves the clip by at most exp(±0.3) per round (the noise of an honest one rarely reaches it)."""
CLIP_RANGE = (1e-6, 1e6)
"""C_t stays within this range times C_0."""


def split_mu0(mu0: float) -> tuple[float, float]:
    """(μ_g, σ_b): the gradient's μ and the count's noise std of a step whose total is μ0.

    Parameters
    ----------
    mu0 : float
        The calibrated per-step Gaussian-DP parameter.

    Returns
    -------
    gradient_mu0 : float
        μ0 √(1 − COUNT_SHARE).
    count_noise_std : float
        1 / (μ0 √COUNT_SHARE), so that √(μ_g² + 1/σ_b²) = μ0.

    Examples
    --------
    >>> mu_g, sigma_b = split_mu0(0.2)
    >>> round(math.hypot(mu_g, 1 / sigma_b), 12)
    0.2
    """
    return mu0 * math.sqrt(1.0 - COUNT_SHARE), 1.0 / (mu0 * math.sqrt(COUNT_SHARE))


def next_clip(clip: float, fraction: float, quantile: float, *, initial: float = INITIAL_CLIP) -> float:
    """C_{t+1} = C_t exp(−η_C (b̄_t − γ)), within ``CLIP_RANGE`` · C_0: shrink when more than γ went unclipped.

    Parameters
    ----------
    clip : float
        C_t.
    fraction : float
        b̄_t, the clients' mean noisy fraction of unclipped records (may fall
        outside [0, 1]: it is noisy).
    quantile : float
        γ, the target fraction.
    initial : float, default=INITIAL_CLIP
        C_0.

    Returns
    -------
    float
    """
    low, high = CLIP_RANGE
    step = min(max(-CLIP_LR * (fraction - quantile), -50.0), 50.0)
    return min(max(clip * math.exp(step), low * initial), high * initial)


def clipped_fraction(submissions) -> float | None:
    """b̄_t, the mean of the replying clients' noisy fractions, each clamped to ``FRACTION_RANGE`` (a submission
    without a finite one is left out): no client pulls the clip further than that.

    Parameters
    ----------
    submissions : iterable of dict
        The round's submissions, a fraction under ``CLIPPED_FRACTION`` in each.

    Returns
    -------
    float or None
        None when no submission holds a finite fraction.
    """
    values = [float(sub[CLIPPED_FRACTION].reshape(-1)[0]) for sub in submissions
              if CLIPPED_FRACTION in sub and sub[CLIPPED_FRACTION].numel() == 1]
    values = [_clamped(v) for v in values if math.isfinite(v)]
    return float(np.mean(values)) if values else None


def summed_fraction(count: float, batch: float) -> float:
    """b̄_t under distributed noise: the secure sum's noisy count of records within the clip over the answering
    clients' public total batch, clamped to ``FRACTION_RANGE`` (the clients' counts arrive only as that sum).

    Parameters
    ----------
    count : float
        The decoded count (:func:`~skfedriem.privacy.mechanisms.discrete.decode_count`).
    batch : float
        B_total of the clients in the sum.

    Returns
    -------
    float
    """
    return _clamped(count / batch)


def _clamped(fraction: float) -> float:
    low, high = FRACTION_RANGE
    return min(max(fraction, low), high)


def clip_after(row: dict | None, initial: float, quantile: float) -> float:
    """C of the next round from the last history row: C_0 at the start, the row's clip when nobody answered (no
    fraction), else :func:`next_clip` of the row's clip and fraction.

    Parameters
    ----------
    row : dict or None
        The last round's history entry (None before the first round).
    initial : float
        C_0.
    quantile : float
        γ.

    Returns
    -------
    float
    """
    if row is None or "clip" not in row:
        return initial
    if row.get("clipped_fraction") is None:
        return row["clip"]
    return next_clip(row["clip"], row["clipped_fraction"], quantile, initial=initial)
