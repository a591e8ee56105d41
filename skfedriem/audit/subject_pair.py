"""An exact lower bound on what a run sampling k records of each subject costs that subject: concrete pairs.

A linear model makes every record's clipped gradient what a pair needs, along
one direction. w_j is the chance that j of the subject's k records are in a
step's batch: Binomial(k, q) under Poisson sampling, Hypergeometric(m, k, B)
for a fixed-size batch of B of m records. In units of the step's noise,
substituting the subject's k records changes a step's release:

* **±C** (every other record 0; the subject's records at +C, or at −C): from
  Σ_j w_j N(+j μ0 / 2, 1) to Σ_j w_j N(−j μ0 / 2, 1);
* **+C against nothing** (every record 0 but the subject's, at +C or at 0):
  from Σ_j w_j N(j μ0 / 2, 1) to N(0, 1);
* **+C against the rest** (fixed-size batches; every other record at −C, the
  subject's at +C or at −C): a batch of B then sums to −B C whatever it holds
  when the subject is at −C, so the release goes from Σ_j w_j N(j μ0, 1) to
  N(0, 1), one Gaussian against a mixture, which two mixtures never are.

:func:`subject_pair_epsilon` composes each pair over the steps, in both
directions, and returns the largest ε: binning the release is post-processing
and dp-accounting's optimistic distribution rounds down, so each ε is below
its pair's, and any valid certificate of such a run (its ledger's, for groups
of k) is at least it. Written here because no accountant we know of computes
the substitution of a sampled group, which is why the ledger charges group
privacy instead.
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
    """The largest ε at ``delta`` of the concrete pairs above, over ``steps`` steps: a lower bound on any certificate.

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
    weights = _weights(counts, group_size, sample_rate, sampling, n_records)
    half = counts * mu0 / 2
    pairs = [([(w, s) for w, s in zip(weights, half)], [(w, -s) for w, s in zip(weights, half)]),
             ([(w, s) for w, s in zip(weights, half)], [(1.0, 0.0)])]
    if sampling == "fixed":
        pairs.append(([(w, 2 * s) for w, s in zip(weights, half)], [(1.0, 0.0)]))
    reach = 2 * float(half[-1]) + _REACH
    edges = np.concatenate([[-np.inf], np.arange(-reach, reach, _BIN), [np.inf]])
    return max(_pair_epsilon(_binned(p, edges), _binned(q, edges), steps, delta)
               for p, q in pairs for p, q in ((p, q), (q, p)))


def _weights(counts: np.ndarray, group_size: int, sample_rate: float, sampling: str,
             n_records: int | None) -> np.ndarray:
    """w_j, the chance that j of the subject's k records are in a step's batch."""
    if sampling == "poisson":
        return binom.pmf(counts, group_size, sample_rate)
    if sampling == "fixed":
        if n_records is None:
            raise ValueError("subject_pair_epsilon(sampling='fixed') needs n_records, the client's records.")
        return hypergeom.pmf(counts, n_records, group_size, int(round(sample_rate * n_records)))
    raise ValueError(f"The 'sampling' parameter must be 'poisson' or 'fixed'. Got {sampling!r} instead.")


def _binned(mixture: list[tuple[float, float]], edges: np.ndarray) -> np.ndarray:
    """Σ (weight) N(shift, 1), as the mass of each bin between ``edges``."""
    return sum(w * np.diff(norm.cdf(edges - s)) for w, s in mixture if w > 0)


def _pair_epsilon(upper: np.ndarray, lower: np.ndarray, steps: int, delta: float) -> float:
    """ε at ``delta`` of ``steps`` compositions of the binned pair (upper against lower), rounded down."""
    kept = np.flatnonzero((upper > 0) & (lower > 0))
    pld = pld_lib.from_two_probability_mass_functions(
        {int(i): math.log(lower[i]) for i in kept}, {int(i): math.log(upper[i]) for i in kept},
        pessimistic_estimate=False, value_discretization_interval=1e-3)
    return float(pld.self_compose(int(steps)).get_epsilon_for_delta(delta))
