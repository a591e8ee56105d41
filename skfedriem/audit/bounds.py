"""From a distinguisher's scores to lower bounds on ε, at a stated confidence.

An audit runs a mechanism many times on two neighbouring federations D (with
a canary record) and D' (the canary substituted), applies a fixed threshold
to a score of what the server saw, and counts the errors of that test: false
positives (D' called D) and false negatives. One-sided Clopper–Pearson upper
bounds FPR_U, FNR_U hold together with probability ``confidence`` (Bonferroni).
Any mechanism whose tradeoff function f satisfies f(FPR_U) > FNR_U is then
refuted: an f-DP run cannot have a test that good. Two lower bounds follow:

``epsilon_lower_bound_any``
    Assumption-free (Kairouz et al. 2015; Jagielski et al. 2020): no
    (ε, δ)-DP mechanism with ε below max(ln((1 − δ − FNR_U) / FPR_U), ln((1 − δ − FPR_U) / FNR_U))
    has this test. Rigorous for every mechanism, but a few hundred runs can
    never show more than about ln(runs).
``epsilon_lower_bound``
    Within the family the accountant certifies (Nasr et al. 2023 do the same
    with Gaussian DP): the runs use the certified (q, steps, sampling) and
    some per-step μ0; the smallest μ0 whose certified tradeoff function
    (from the same privacy-loss distributions as :func:`~skfedriem.privacy.epsilon_spent`)
    is not refuted, mapped to ε at δ by the accountant. It is directly
    comparable with the certified ε: a run that is what the accountant
    models gives a bound below it with probability >= ``confidence``; a run
    that adds less noise than it is charged for (or none) is exposed as soon
    as the runs resolve its larger μ0.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np
from scipy.stats import beta

from ..privacy.accounting.subsampled_gaussian import epsilon_spent, single_step_pld

__all__ = ["AuditResult", "audit_scores", "clopper_pearson_upper", "family_tradeoff", "mu0_lower_bound"]

#: Grid of the privacy-loss distributions used for tradeoff curves: coarser than
#: the accountant's, hence a lower (more pessimistic) curve and a more cautious bound.
TRADEOFF_DISCRETIZATION = 1e-2
_COARSE_EPS = np.linspace(0.0, 40.0, 201)


def clopper_pearson_upper(errors: int, trials: int, confidence: float) -> float:
    """One-sided Clopper–Pearson upper bound on a rate from ``errors`` in ``trials``.

    Parameters
    ----------
    errors : int
        Errors observed.
    trials : int
        Trials.
    confidence : float
        The bound holds with this probability.

    Returns
    -------
    float

    Examples
    --------
    >>> round(clopper_pearson_upper(0, 100, 0.95), 4)
    0.0295
    """
    if errors >= trials:
        return 1.0
    return float(beta.ppf(confidence, errors + 1, trials - errors))


@lru_cache(maxsize=512)
def _composed(mu0: float, sample_rate: float, steps: int, sampling: str):
    return single_step_pld(mu0, sample_rate, sampling, TRADEOFF_DISCRETIZATION).self_compose(steps)


def family_tradeoff(alpha: float, mu0: float, sample_rate: float, steps: int, sampling: str) -> float:
    """A lower bound on the certified tradeoff function f(α) of ``steps`` steps at (μ0, q).

    f(α) = sup_ε max{1 − δ(ε) − e^ε α, e^{−ε} (1 − δ(ε) − α)} over the
    certified privacy profile δ(ε) (symmetric in both modes), maximised on a
    grid of ε refined around the best coarse point (a grid can only miss the
    supremum from below: the curve errs low, the bound cautious).

    Parameters
    ----------
    alpha : float
        Type I error of a test.
    mu0 : float
        Per-step GDP parameter.
    sample_rate : float
        q.
    steps : int
        Composed steps.
    sampling : {"fixed", "poisson"}
        The subsampling the accountant assumes.

    Returns
    -------
    float
        The smallest type II error any test can reach at type I error ``alpha``.
    """
    pld = _composed(float(mu0), float(sample_rate), int(steps), sampling)

    def best(eps: np.ndarray) -> tuple[float, float]:
        delta = np.asarray(pld.get_delta_for_epsilon(eps), dtype=float)
        values = np.maximum(1 - delta - np.exp(eps) * alpha, (1 - delta - alpha) * np.exp(-eps))
        i = int(np.argmax(values))
        return float(values[i]), float(eps[i])

    _, around = best(_COARSE_EPS)
    step = _COARSE_EPS[1]
    value, _ = best(np.linspace(max(0.0, around - step), around + step, 201))
    return max(0.0, value)


def mu0_lower_bound(fpr_upper: float, fnr_upper: float, sample_rate: float, steps: int, sampling: str,
                    *, mu0_max: float = 20.0) -> float:
    """The smallest per-step μ0 of the certified family not refuted by a test with these error bounds.

    Parameters
    ----------
    fpr_upper : float
        Upper bound on the test's false positive rate.
    fnr_upper : float
        Upper bound on its false negative rate.
    sample_rate : float
        q.
    steps : int
        Composed steps.
    sampling : {"fixed", "poisson"}
        The subsampling the accountant assumes.
    mu0_max : float, default=20.0
        The largest μ0 probed.

    Returns
    -------
    float
        0 when the test shows nothing; ``mu0_max`` when even that is refuted.
    """

    def refuted(mu0: float) -> bool:
        alpha, beta_ = sorted((fpr_upper, fnr_upper))  # f is symmetric: either error may be the type I
        return family_tradeoff(alpha, mu0, sample_rate, steps, sampling) > beta_

    if fpr_upper + fnr_upper >= 1 or not refuted(1e-6):
        return 0.0
    lo, hi = 1e-6, 0.05
    while refuted(hi):  # bracket upwards: large μ0 are slow to account, probe them only when needed
        if hi >= mu0_max:
            return mu0_max
        lo, hi = hi, min(2 * hi, mu0_max)
    lo, hi = math.log(lo), math.log(hi)
    for _ in range(16):  # bisection in log μ0, keeping a refuted lower end: the bound errs low
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if refuted(math.exp(mid)) else (lo, mid)
    return math.exp(lo)


@dataclass(frozen=True)
class AuditResult:
    """What an audit measured and what it proves.

    Parameters
    ----------
    epsilon_certified : float
        The accountant's ε for the audited runs.
    epsilon_lower_bound : float
        ε of the smallest per-step μ0 of the certified family that the test
        does not refute (see the module docstring).
    epsilon_lower_bound_any : float
        The assumption-free (ε, δ) lower bound.
    mu0_certified : float
        The per-step μ0 the runs were calibrated to.
    mu0_lower_bound : float
        The smallest μ0 of the family not refuted.
    delta : float
        δ of both ε.
    confidence : float
        Joint confidence of the Clopper–Pearson bounds.
    sample_rate : float
        q of the audited runs.
    steps : int
        Private steps in each run.
    sampling : str
        ``"fixed"`` or ``"poisson"``.
    n_runs : int
        Runs on each of D and D' whose errors were counted.
    false_positive_rate : float
        Measured on D'.
    false_negative_rate : float
        Measured on D.
    false_positive_upper : float
        Clopper–Pearson upper bound of ``false_positive_rate``.
    false_negative_upper : float
        Clopper–Pearson upper bound of ``false_negative_rate``.
    threshold : float
        The score threshold of the test.
    seconds : float, default=0.0
        Wall time of the runs (0 when scores were given).
    """

    epsilon_certified: float
    epsilon_lower_bound: float
    epsilon_lower_bound_any: float
    mu0_certified: float
    mu0_lower_bound: float
    delta: float
    confidence: float
    sample_rate: float
    steps: int
    sampling: str
    n_runs: int
    false_positive_rate: float
    false_negative_rate: float
    false_positive_upper: float
    false_negative_upper: float
    threshold: float
    seconds: float = 0.0

    @property
    def violated(self) -> bool:
        """Whether the runs refute the certificate (the lower bound exceeds the certified ε)."""
        return self.epsilon_lower_bound > self.epsilon_certified

    @property
    def verdict_bound(self) -> str | None:
        """The bound a violation rests on: ``"distribution-free"`` when the assumption-free lower bound
        (:attr:`epsilon_lower_bound_any`) exceeds the certified ε, a refutation of any mechanism at that ε;
        ``"certified family"`` when only the lower bound within the certified (Gaussian-tradeoff) family does, a
        refutation of the runs as the family the accountant charges; None without a violation."""
        if self.epsilon_lower_bound_any > self.epsilon_certified:
            return "distribution-free"
        return "certified family" if self.violated else None

    def to_dict(self) -> dict:
        """Plain values (for a JSON line)."""
        return {**asdict(self), "violated": self.violated, "verdict_bound": self.verdict_bound}


def audit_scores(scores_d, scores_d_prime, *, mu0: float, sample_rate: float, steps: int, sampling: str,
                 delta: float, epsilon_certified: float, confidence: float = 0.95,
                 threshold: float | None = None, seconds: float = 0.0) -> AuditResult:
    """Lower bounds on ε from a distinguisher's scores on D (higher) and D'.

    Parameters
    ----------
    scores_d, scores_d_prime : array-like of shape (n_runs,)
        One score per run; the test says "D" when the score exceeds the threshold.
    mu0, sample_rate, steps, sampling : the certified run (per-step μ0 = 2C/(Bσ)).
    delta : float
    epsilon_certified : float
    confidence : float, default=0.95
    threshold : float, optional
        Fixed before looking at the scores (e.g. 0 for a symmetric canary
        design). None: chosen on the first half of the runs of each side (the
        midpoint of their medians) and the errors counted on the second half,
        so the Clopper–Pearson bounds stay valid.
    seconds : float, default=0

    Returns
    -------
    AuditResult
    """
    d, d_prime = np.asarray(scores_d, dtype=float), np.asarray(scores_d_prime, dtype=float)
    if threshold is None:
        half = min(len(d), len(d_prime)) // 2
        threshold = 0.5 * (np.median(d[:half]) + np.median(d_prime[:half]))
        d, d_prime = d[half:], d_prime[half:]
    n = min(len(d), len(d_prime))
    d, d_prime = d[:n], d_prime[:n]
    false_positives, false_negatives = int((d_prime > threshold).sum()), int((d <= threshold).sum())
    each = 1 - (1 - confidence) / 2
    fpr_u = clopper_pearson_upper(false_positives, n, each)
    fnr_u = clopper_pearson_upper(false_negatives, n, each)
    mu_lb = mu0_lower_bound(fpr_u, fnr_u, sample_rate, steps, sampling)
    eps_lb = epsilon_spent(mu_lb, sample_rate, steps, delta, sampling) if mu_lb > 0 else 0.0
    bounds = [(1 - delta - fnr_u) / fpr_u, (1 - delta - fpr_u) / fnr_u]
    eps_any = max([0.0] + [math.log(b) for b in bounds if b > 0])
    return AuditResult(
        epsilon_certified=float(epsilon_certified), epsilon_lower_bound=float(eps_lb),
        epsilon_lower_bound_any=float(eps_any), mu0_certified=float(mu0), mu0_lower_bound=float(mu_lb),
        delta=float(delta), confidence=float(confidence), sample_rate=float(sample_rate), steps=int(steps),
        sampling=sampling, n_runs=n, false_positive_rate=false_positives / n, false_negative_rate=false_negatives / n,
        false_positive_upper=fpr_u, false_negative_upper=fnr_u, threshold=float(threshold), seconds=float(seconds),
    )
