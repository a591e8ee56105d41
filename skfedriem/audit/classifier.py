"""Audit of whole FederatedSPDNetClassifier fits: a label-flip canary, read off the trained network.

One client holds two covariance matrices: the canary and another trial of
class 1. In D the canary is labelled 0, in D' it is labelled 1 (with
``classes=[0, 1]`` public, D' holds one class only and the network is the
same shape). The clip is far below every per-trial gradient, so each is
clipped to norm exactly C, and at the two-class softmax the canary's gradients
under its two labels point nearly opposite ways: one substitution moves each
step's mean by nearly the full 2C/B. Each fit runs T rounds of one full-batch
step (q = 1) at a tiny learning rate in float64, from an initial network the
auditor rebuilds from the fit's seed (public), so θ_T − θ_0 is, to first
order, −η times the sum of the noisy gradients; the score is its component
along the difference of the canary's two clipped gradients at θ_0, the
likelihood-ratio test where those gradients are exactly opposite. The bound is
loose where they are not (a valid audit either way).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import torch

from ..classification import FederatedSPDNetClassifier
from ..exceptions import SeededNoiseWarning
from ..privacy import per_sample_gradients
from ..privacy.per_record.gradients import project_per_sample
from ..privacy.mechanisms.mechanism import clip_factors
from ..privacy.per_record.per_sample import trainable_parameters
from .bounds import AuditResult, audit_scores

__all__ = ["audit_spdnet_classifier", "canary_trials"]


def canary_trials(n_channels: int = 3, seed: int = 0) -> np.ndarray:
    """The canary and the other trial: two fixed, well-conditioned SPD matrices.

    Parameters
    ----------
    n_channels : int, default=3
        C.
    seed : int, default=0
        Seeds the two matrices (public: the auditor picks them).

    Returns
    -------
    ndarray of shape (2, n_channels, n_channels)
    """
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(2, n_channels, 2 * n_channels))
    return A @ A.transpose(0, 2, 1) / (2 * n_channels) + 0.1 * np.eye(n_channels)


def _flat(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for _, t in sorted(tensors.items())])


def _clipped_canary_gradients(module, X: torch.Tensor, clip: float) -> torch.Tensor:
    """The canary's clipped tangent gradient at the module's θ under labels 0 and 1, flattened: shape (2, D)."""
    loss = lambda logits, target: torch.nn.functional.cross_entropy(logits, target, reduction="none")  # noqa: E731
    batch = (X[:1].repeat(2, 1, 1), torch.tensor([0, 1]))
    grads = project_per_sample(per_sample_gradients(module, loss, batch), trainable_parameters(module))
    flat = torch.cat([g.reshape(2, -1) for _, g in sorted(grads.items())], dim=1)
    return flat * clip_factors(torch.linalg.vector_norm(flat, dim=1), clip).unsqueeze(1)


def audit_spdnet_classifier(eps: float, *, delta: float = 1e-5, n_rounds: int = 5, n_runs: int = 200,
                            clip: float = 1e-4, lr: float = 1e-6, random_state: int = 0,
                            confidence: float = 0.95) -> AuditResult:
    """Audit ``n_runs`` FederatedSPDNetClassifier fits on D and as many on D' (see the module docstring).

    Parameters
    ----------
    eps : float
        The target each fit is calibrated to.
    delta : float, default=1e-5
    n_rounds : int, default=5
        T rounds of one local step each.
    n_runs : int, default=200
        Fits on each side.
    clip : float, default=1e-4
        C, below every trial's gradient norm.
    lr : float, default=1e-6
    random_state : int, default=0
        Fit j is seeded with ``random_state + j``, so that the auditor can
        rebuild its (public) initial network; each fit's noise is its own.
    confidence : float, default=0.95

    Returns
    -------
    AuditResult
    """
    X = canary_trials()
    inputs = torch.from_numpy(X)
    settings = dict(eps=eps, delta=delta, clip=clip, classes=[0, 1], dims=(2,), n_rounds=n_rounds, local_steps=1,
                    batch_size=2, optimizer="sgd", lr=lr, lr_schedule="constant", dtype="float64")
    groups = np.zeros(2)
    scores: dict[int, list[float]] = {1: [], -1: []}
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeededNoiseWarning)
        for side, label, offset in ((1, 0, 0), (-1, 1, n_runs)):
            y = np.array([label, 1])
            for j in range(n_runs):
                est = FederatedSPDNetClassifier(**settings, random_state=random_state + offset + j)
                start = est.make_trainer(X.shape[1:], classes=np.array([0, 1]), client_sizes=[2]).module
                theta0 = _flat({n: p.detach() for n, p in trainable_parameters(start).items()})
                g = _clipped_canary_gradients(start, inputs, clip)
                direction = (g[0] - g[1]) / torch.linalg.vector_norm(g[0] - g[1])
                est.fit(X, y, groups=groups)
                theta = _flat({n: p.detach() for n, p in trainable_parameters(est.module_).items()})
                scores[side].append(float((theta0 - theta) @ direction) / lr)
    return audit_scores(scores[1], scores[-1], mu0=est.mu0_, sample_rate=1.0, steps=n_rounds, sampling="fixed",
                        delta=delta, epsilon_certified=est.epsilon_, confidence=confidence, threshold=None,
                        seconds=time.perf_counter() - started)
