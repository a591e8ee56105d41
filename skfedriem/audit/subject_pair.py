"""An exact lower bound on what a run sampling k records of each subject costs that subject: one concrete pair.

Subject A's k records of a round all have the clipped gradient +C along one
direction, subject B's all −C, every other record 0 (a linear model makes
them so). Substituting B for A changes a step's release, in units of its
noise, from Σ_j w_j N(+j μ0 / 2, 1) to Σ_j w_j N(−j μ0 / 2, 1), where w_j is
the chance that j of the subject's k records are in the batch: Binomial(k, q)
under Poisson sampling, Hypergeometric(m, k, B) for a fixed-size batch of B of
m records. :func:`subject_pair_epsilon` composes that pair over the steps:
binning the release is post-processing and dp-accounting's optimistic
distribution rounds down, so the ε it returns is below the pair's, and any
valid certificate of such a run (its ledger's, for groups of k) is at least
it. Written here because no accountant we know of computes the substitution
of a sampled group, which is why the ledger charges group privacy instead.
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy.stats import binom, hypergeom, norm

__all__ = ["subject_pair_epsilon"]

#: Width of the bins the release is read in (in units of the noise), and how far past the shifts they reach.
_BIN, _REACH = 0.004, 14.0


def subject_pair_epsilon(mu0: float, sample_rate: float, steps: int, group_size: int, delta: float, *,
                         sampling: str = "poisson", n_records: int | None = None) -> float:
    """ε at ``delta`` of the concrete pair above, over ``steps`` steps: a lower bound on any certificate of them.

    Parameters
    ----------
    mu0 : float
        The steps' per-step μ0 (a ledger entry's).
    sample_rate : float
        q.
    steps : int
    group_size : int
        k, the records each subject gives a round.
    delta : float
    sampling : {"poisson", "fixed"}, default="poisson"
    n_records : int, optional
        m, the client's records (its k n slots): needed for ``"fixed"``, whose
        batches hold B = q m of them.

    Returns
    -------
    float

    Examples
    --------
    >>> from skfedriem.privacy import PrivacyAccountant
    >>> ledger = PrivacyAccountant()
    >>> ledger.step(mu0=0.5, sample_rate=0.2, num_steps=10, sampling="poisson", group_size=5)
    >>> subject_pair_epsilon(0.5, 0.2, 10, 5, 1e-5) <= ledger.get_epsilon(1e-5)
    True
    """
    counts = np.arange(group_size + 1)
    if sampling == "poisson":
        weights = binom.pmf(counts, group_size, sample_rate)
    elif sampling == "fixed":
        if n_records is None:
            raise ValueError("subject_pair_epsilon(sampling='fixed') needs n_records, the client's records.")
        weights = hypergeom.pmf(counts, n_records, group_size, int(round(sample_rate * n_records)))
    else:
        raise ValueError(f"The 'sampling' parameter must be 'poisson' or 'fixed'. Got {sampling!r} instead.")
    shifts = counts * mu0 / 2
    edges = np.concatenate([[-np.inf], np.arange(-shifts[-1] - _REACH, shifts[-1] + _REACH, _BIN), [np.inf]])
    upper = sum(w * np.diff(norm.cdf(edges - s)) for w, s in zip(weights, shifts) if w > 0)
    lower = sum(w * np.diff(norm.cdf(edges + s)) for w, s in zip(weights, shifts) if w > 0)
    kept = np.flatnonzero((upper > 0) & (lower > 0))
    pld = pld_lib.from_two_probability_mass_functions(
        {int(i): math.log(lower[i]) for i in kept}, {int(i): math.log(upper[i]) for i in kept},
        pessimistic_estimate=False, value_discretization_interval=1e-3)
    return float(pld.self_compose(int(steps)).get_epsilon_for_delta(delta))
