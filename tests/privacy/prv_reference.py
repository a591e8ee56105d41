"""Independent accountants for cross-checks, built on prv-accountant.

They share no code with skfedriem.privacy.accounting.subsampled_gaussian (which builds on
dp-accounting's connect-the-dots PLDs): here the privacy-loss variables are
written down in closed form (docs: the method, privacy accounting) and composed by prv-accountant's own
discretisation, with its error bounds.
"""

import numpy as np
from prv_accountant import PRVAccountant
from prv_accountant.privacy_random_variables import PoissonSubsampledGaussianMechanism, PrivacyRandomVariable
from scipy.stats import norm


def _scalar_or_array(t, f):
    arr = np.atleast_1d(np.asarray(t, dtype=float))
    out = f(arr)
    return out if np.ndim(t) else float(out[0])


class SymmetrisedSubsampledGaussian(PrivacyRandomVariable):
    """Privacy loss of the symmetrised tradeoff C_q(G_mu) of Dong, Roth & Su.

    Positive losses: the loss log(dM/dP)(X) of M = (1-q)N(0,1) + qN(mu,1)
    against P = N(0,1) under X ~ M, restricted to x > mu/2; negative losses:
    its mirror image (density e^l w(-l)); an atom at 0 carries the rest (the
    linear piece of the convex hull).
    """

    def __init__(self, q: float, mu: float) -> None:
        self.q, self.mu = q, mu

    def _x_of_loss(self, loss):
        q, mu = self.q, self.mu
        return (np.log((np.exp(loss) - (1 - q)) / q) + mu * mu / 2) / mu

    def cdf(self, t):
        return _scalar_or_array(t, self._cdf)

    def _cdf(self, t):
        x = self._x_of_loss(np.abs(t))
        upper_tail = (1 - self.q) * norm.sf(x) + self.q * norm.sf(x - self.mu)  # M(X > x)
        return np.where(t >= 0, 1 - upper_tail, norm.sf(x))  # t < 0: P(X >= x), X ~ N(0, 1)

    def rdp(self, alpha):  # only sizes prv-accountant's domain
        return PoissonSubsampledGaussianMechanism(self.q, 1 / self.mu).rdp(alpha)


class ReplaceOneSubsampledGaussian(PrivacyRandomVariable):
    """Poisson subsampling, one record replaced: (1-q)N(0,1)+qN(a,1) vs (1-q)N(0,1)+qN(-a,1).

    With the mean over B, clip C and noise sigma, a = C/(B sigma) = mu0/2.
    """

    def __init__(self, q: float, mu0: float) -> None:
        self.q, self.a = q, mu0 / 2

    def _loss(self, x):
        q, a = self.q, self.a
        up = np.logaddexp(np.log1p(-q) if q < 1 else -np.inf, np.log(q) + a * x - a * a / 2)
        lo = np.logaddexp(np.log1p(-q) if q < 1 else -np.inf, np.log(q) - a * x - a * a / 2)
        return up - lo

    def cdf(self, t):
        return _scalar_or_array(t, self._cdf)

    def _cdf(self, t):
        lo, hi = np.full_like(t, -40.0), np.full_like(t, 40.0)
        for _ in range(60):  # the loss is increasing in x: bisection for x(t)
            mid = (lo + hi) / 2
            below = self._loss(mid) <= t
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        x = lo
        return (1 - self.q) * norm.cdf(x) + self.q * norm.cdf(x - self.a)

    def rdp(self, alpha):
        return PoissonSubsampledGaussianMechanism(self.q, 1 / (2 * self.a)).rdp(alpha)


def prv_epsilon(prv, steps: int, delta: float, eps_error: float = 5e-3):
    """(lower, estimate, upper) ε of ``steps`` compositions of ``prv``."""
    acc = PRVAccountant(prv, max_self_compositions=steps, eps_error=eps_error, delta_error=delta * 1e-3)
    return acc.compute_epsilon(delta, [steps])


def prv_poisson_add_remove_epsilon(mu0: float, q: float, steps: int, delta: float):
    return prv_epsilon(PoissonSubsampledGaussianMechanism(q, 1 / mu0), steps, delta)
