"""Audits of FederatedPCA: a worst-case canary, whole runs, a distinguisher on what the server sees.

:func:`audit_federated_pca` fits :class:`~skfedriem.FederatedPCA` end to end
(validation, seeds, sampling, clipping, noise, aggregation, accounting) many
times on two neighbouring federations and tests them on the released model.
The design follows the white-box audits of Nasr et al. (2021, 2023): the
adversary picks the worst case, here a federation of one client whose other
records are zero (zero gradient) and a canary whose clipped gradient has the
full norm C and points along the one tangent direction of Gr(2, 1) at a
public initial subspace; D holds the canary s(e₁ + e₂)/√2, D' its mirror
s(e₁ − e₂)/√2, whose clipped gradient is exactly opposite, so one
substitution moves each step's mean by the full 2C/B. With a tiny learning
rate the final projector's off-diagonal entry is, to first order, the sum of
every step's noisy gradient along that direction: at q = 1 that sum is the
likelihood-ratio test of the composed Gaussian mechanisms, so the audit is
tight there. At q < 1 the sum is not the optimal test of subsampled steps,
and this substitution pair is not the worst case the symmetrised bound
covers, so the bound is loose by design.

:func:`audit_covariance_release` audits the one-shot second-moment release
(the default solver) with the worst-case pair of records for its √2 C sensitivity.

:func:`audit_off_manifold_server` audits one client's step against a server
that sends θ off the manifold (the receipt check, which refuses such a θ,
is bypassed so that the mechanism alone is audited).
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
import torch

from ..decomposition import FederatedPCA
from ..exceptions import SeededNoiseWarning
from ..models import PCAProjector
from ..privacy import PrivateManifoldOptimizer, SeededRandomness, epsilon_spent
from .bounds import AuditResult, audit_scores

__all__ = ["audit_covariance_release", "audit_federated_pca", "audit_off_manifold_server", "audit_subject_level",
           "canary_federation"]


def canary_federation(n_records: int, clip: float, sign: int) -> np.ndarray:
    """One client's records: the canary s(e₁ + sign·e₂)/√2 first, then zeros.

    s puts the canary's gradient norm s²/√2 at the initial subspace e₁e₁ᵀ at
    100 C, so it is clipped to exactly C at every step of a short run.

    Parameters
    ----------
    n_records : int
        Records of the client.
    clip : float
        C.
    sign : {1, -1}
        Which of the two neighbouring canaries (D or D').

    Returns
    -------
    ndarray of shape (n_records, 2)
    """
    X = np.zeros((n_records, 2))
    s = math.sqrt(100 * math.sqrt(2) * clip)
    X[0] = s / math.sqrt(2) * np.array([1.0, sign])
    return X


def _seed(random_state: int | None, offset: int) -> int | None:
    return None if random_state is None else random_state + offset


def audit_federated_pca(eps: float, *, delta: float = 1e-5, sampling: str = "fixed", n_records: int = 2,
                        batch_size: int = 2, n_rounds: int = 10, n_runs: int = 200, clip: float = 1.0,
                        lr: float = 1e-6, secure_mode: bool = False, random_state: int | None = None,
                        confidence: float = 0.95) -> AuditResult:
    """Audit ``n_runs`` FederatedPCA fits on D and as many on D' (see the module docstring).

    Parameters
    ----------
    eps, delta : float
        The target each fit is calibrated to.
    sampling : {"fixed", "poisson"}
    n_records, batch_size : int
        The client's size and B: q = batch_size / n_records (1 by default, where the audit is tight).
    n_rounds : int
        T rounds of one local step each.
    n_runs : int
        Fits on each side.
    clip, lr : float
    secure_mode : bool
    random_state : int, optional
        None: every fit draws OS entropy (the estimator's private default).
        An int seeds fit j with ``random_state + j``: reproducible audits.
    confidence : float, default=0.95

    Returns
    -------
    AuditResult
    """
    settings = dict(n_components=1, eps=eps, delta=delta, clip=clip, n_rounds=n_rounds, local_steps=1,
                    batch_size=batch_size, lr=lr, sampling=sampling, init=[[1.0, 0.0]], secure_mode=secure_mode)
    started = time.perf_counter()
    scores, est = _canary_scores(settings, lambda side: canary_federation(n_records, clip, side), {}, n_runs,
                                 random_state)
    return audit_scores(scores[1], scores[-1], mu0=est.mu0_, sample_rate=batch_size / n_records,
                        steps=n_rounds, sampling=sampling, delta=delta, epsilon_certified=est.epsilon_,
                        confidence=confidence, threshold=0.0, seconds=time.perf_counter() - started)


def _canary_scores(settings: dict, records, fit_params: dict, n_runs: int, random_state: int | None):
    """Each side's scores, the projector's off-diagonal entry, of ``n_runs`` FederatedPCA fits on ``records(side)``
    (one client), and the last fit (its certified μ0 and ε)."""
    scores: dict[int, list[float]] = {1: [], -1: []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeededNoiseWarning)  # a seeded audit is reproducible on purpose
        for side, offset in ((1, 0), (-1, n_runs)):
            X = records(side)
            for j in range(n_runs):
                est = FederatedPCA(**settings, random_state=_seed(random_state, offset + j))
                w = est.fit(X, groups=np.zeros(len(X)), **fit_params).components_[0]
                scores[side].append(float(w[0] * w[1]))
    return scores, est


def audit_subject_level(eps: float, *, privacy_unit: str = "subject", records_per_subject: int | None = None,
                        n_trials: int = 5, delta: float = 1e-5, n_rounds: int = 10, n_runs: int = 200,
                        clip: float = 1.0, lr: float = 1e-6, random_state: int | None = None,
                        confidence: float = 0.95) -> AuditResult:
    """Audit FederatedPCA fits against a subject-level claim: D and D' differ in one whole subject of ``n_trials``.

    One client holds two subjects: the canary subject, all of whose
    ``n_trials`` trials are the canary of :func:`canary_federation` (D) or its
    mirror (D'), and a subject of one zero trial. Every step uses the whole
    client (q = 1, where the audit is tight), with the score of
    :func:`audit_federated_pca`.

    With ``privacy_unit="subject"`` the subject's trials enter as one clipped
    mean, and the run's ε (for one subject) must hold. With ``"record"`` the
    run is calibrated for one trial, and each of the subject's trials moves
    every step by its own clipped gradient: the audit's lower bound for the
    subject then exceeds the run's ε (a record-level ε is not a subject's).
    With ``records_per_subject`` k (subject-level) each subject gives k
    records a step, each clipped alone, and the run is charged by group
    privacy over k: the subject's ``n_trials`` trials (k of them) must hold
    the run's ε for one subject.

    Parameters
    ----------
    eps : float
        The target each fit is calibrated to.
    privacy_unit : {"subject", "record"}, default="subject"
    records_per_subject : int, optional
        k records of each subject a step (subject-level only); None: each
        subject's clipped mean.
    n_trials : int, default=5
        The canary subject's trials.
    delta : float, default=1e-5
    n_rounds : int, default=10
        T rounds of one local step each.
    n_runs : int, default=200
        Fits on each side.
    clip, lr : float
    random_state : int, optional
        Seeds fit j with ``random_state + j``; None: OS entropy.
    confidence : float, default=0.95

    Returns
    -------
    AuditResult
        ``epsilon_certified`` is the run's ε (for one subject, or one trial);
        ``mu0_certified`` is the per-step μ0 of the unit the run protects
        (with ``records_per_subject`` k, k times a record's: at q = 1 a
        subject's k records are in every step).
    """
    # every unit of the client a step (q = 1): 2 subjects, their 2 k slots, or the n_trials + 1 records
    batch = n_trials + 1 if privacy_unit == "record" else 2 * (records_per_subject or 1)
    settings = dict(n_components=1, eps=eps, delta=delta, clip=clip, n_rounds=n_rounds, local_steps=1,
                    batch_size=batch, lr=lr, init=[[1.0, 0.0]], solver="riemannian", privacy_unit=privacy_unit,
                    records_per_subject=records_per_subject)

    def records(side: int) -> np.ndarray:
        X = np.zeros((n_trials + 1, 2))
        X[:n_trials] = canary_federation(1, clip, side)[0]
        return X

    # a record-level fit protects trials: the subjects are for the subject-level one only
    fit_params = {"subjects": np.array([0] * n_trials + [1])} if privacy_unit == "subject" else {}
    started = time.perf_counter()
    scores, est = _canary_scores(settings, records, fit_params, n_runs, random_state)
    # at q = 1 a subject's k slots are all in every step: a Gaussian of k μ0 (est.mu0_ is a record's μ0)
    mu0 = est.mu0_ * (records_per_subject or 1)
    return audit_scores(scores[1], scores[-1], mu0=mu0, sample_rate=1.0, steps=n_rounds, sampling="fixed",
                        delta=delta, epsilon_certified=est.epsilon_, confidence=confidence, threshold=0.0,
                        seconds=time.perf_counter() - started)


def audit_covariance_release(eps: float, *, delta: float = 1e-5, n_records: int = 2, n_runs: int = 500,
                             clip: float = 1.0, secure_mode: bool = False, random_state: int | None = None,
                             confidence: float = 0.95) -> AuditResult:
    """Audit ``n_runs`` one-shot FederatedPCA releases (the default solver) on D and as many on D'.

    One client holds the canary and zeros; D's canary is 10 √C e₁, D''s 10 √C e₂:
    both are clipped to squared norm C, and their moments C e₁e₁ᵀ and C e₂e₂ᵀ
    are the worst-case pair, √2 C apart (:class:`~skfedriem.models.SecondMoment`).
    The score is A₁₁ − A₂₂ of the released mean moment A (``module_``), the
    likelihood-ratio test of that one Gaussian release: the audit is tight, so
    a release calibrated to a smaller sensitivity than it has is caught.

    Parameters
    ----------
    eps : float
        The target each fit is calibrated to.
    delta : float, default=1e-5
    n_records : int, default=2
        The client's size m (the release's noise scales as 1/m).
    n_runs : int, default=500
        Fits on each side.
    clip : float, default=1.0
    secure_mode : bool, default=False
    random_state : int, optional
        Seeds fit j with ``random_state + j``; None: OS entropy.
    confidence : float, default=0.95

    Returns
    -------
    AuditResult
    """
    groups = np.zeros(n_records)
    settings = dict(n_components=1, eps=eps, delta=delta, clip=clip, solver="covariance", secure_mode=secure_mode)
    scores: dict[int, list[float]] = {1: [], -1: []}
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeededNoiseWarning)
        for side, offset in ((1, 0), (-1, n_runs)):
            X = np.zeros((n_records, 2))
            X[0, 0 if side == 1 else 1] = 10 * math.sqrt(clip)
            for j in range(n_runs):
                est = FederatedPCA(**settings, random_state=_seed(random_state, offset + j)).fit(X, groups=groups)
                moment = est.module_.weight.detach()
                scores[side].append(float(moment[0, 0] - moment[1, 1]))
    return audit_scores(scores[1], scores[-1], mu0=est.mu0_, sample_rate=1.0, steps=1, sampling="fixed",
                        delta=delta, epsilon_certified=est.epsilon_, confidence=confidence, threshold=0.0,
                        seconds=time.perf_counter() - started)


def audit_off_manifold_server(*, mu0: float = 0.5, norm_sq: float = 0.99, n_features: int = 20, lr: float = 50.0,
                              n_runs: int = 500, clip: float = 1.0, delta: float = 1e-5,
                              random_state: int | None = None, confidence: float = 0.95) -> AuditResult:
    """Audit one private step of a client whose server sent θ = √norm_sq · e₁, off St(n, 1).

    The client holds one record: D a canary whose tangent gradient at that θ
    points along θ itself (P_θ keeps only 1 − norm_sq of it), D' a zero
    record. The server sees the client's θ_i after one SGD step at ``lr``
    and scores how far it moved along θ against the noise it sees elsewhere.
    The step is certified μ0-GDP (σ = 2C/μ0 with B = 1).

    Parameters
    ----------
    mu0 : float, default=0.5
        The step's certified GDP parameter.
    norm_sq : float, default=0.99
        ‖θ‖² of the malicious iterate.
    n_features : int, default=20
        n.
    lr : float, default=50.0
        The client's SGD rate.
    n_runs : int, default=500
        Steps on each side.
    clip : float, default=1.0
        C.
    delta : float, default=1e-5
        δ of the reported ε.
    random_state : int, optional
        Seeds run j with ``random_state + j``; None: OS entropy.
    confidence : float, default=0.95
        Joint confidence of the bounds.

    Returns
    -------
    AuditResult
    """
    sigma = 2 * clip / mu0
    theta = torch.zeros(n_features, 1, dtype=torch.float64)
    theta[0, 0] = math.sqrt(norm_sq)
    canary = torch.zeros(1, n_features, dtype=torch.float64)
    canary[0, 0] = 100.0 * math.sqrt(clip)
    scores: dict[str, list[float]] = {"d": [], "d_prime": []}
    started = time.perf_counter()
    for side, records, offset in (("d", canary, 0), ("d_prime", torch.zeros_like(canary), n_runs)):
        for j in range(n_runs):
            module = PCAProjector(n_features, 1, "stiefel")
            with torch.no_grad():
                module.weight.copy_(theta)
            seed = _seed(random_state, offset + j)
            randomness = SeededRandomness(np.random.SeedSequence(seed))
            step = PrivateManifoldOptimizer(module, torch.optim.SGD(module.parameters(), lr=lr),
                                            loss_fn=lambda losses: losses, clip=clip, noise_std=sigma,
                                            randomness=randomness)
            step.step((records,), denominator=1.0)
            released = module.weight.detach()[:, 0]
            scores[side].append(float(released[0] / released[1:].norm()))
    return audit_scores(scores["d"], scores["d_prime"], mu0=mu0, sample_rate=1.0, steps=1, sampling="fixed",
                        delta=delta, epsilon_certified=epsilon_spent(mu0, 1.0, 1, delta), confidence=confidence,
                        seconds=time.perf_counter() - started)
