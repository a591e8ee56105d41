"""Batch samplers whose randomness the privacy amplification relies on."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from .randomness import SecretRandomness, as_randomness

__all__ = ["BatchSampler", "FixedSizeSampler", "PoissonSampler", "make_sampler"]


class BatchSampler(ABC):
    """Draws the records of one local step, fresh and independent at every call.

    Parameters
    ----------
    n_records : int
        Size m of the client's dataset.
    batch_size : int
        B: the exact (fixed) or expected (Poisson) batch size, in [1, n_records].

    Attributes
    ----------
    sample_rate : float
        q = B / m, the rate the accountant uses.
    denominator : float
        What the clipped per-sample gradients are summed and divided by: B.
    """

    sampling: str

    def __init__(self, n_records: int, batch_size: int) -> None:
        if not 1 <= batch_size <= n_records:
            raise ValueError(
                f"The 'batch_size' must be in [1, n_records={n_records}]. Got {batch_size!r} instead."
            )
        self.n_records = int(n_records)
        self.batch_size = int(batch_size)

    @property
    def sample_rate(self) -> float:
        return self.batch_size / self.n_records

    @property
    def denominator(self) -> float:
        return float(self.batch_size)

    def sample(self, randomness: SecretRandomness | np.random.Generator) -> np.ndarray:
        """Indices of the records in the next batch, drawn from the client's secret ``randomness``."""
        return self._sample(as_randomness(randomness))

    @abstractmethod
    def _sample(self, randomness: SecretRandomness) -> np.ndarray:
        """Indices of the records in the next batch."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_records={self.n_records}, batch_size={self.batch_size})"


class FixedSizeSampler(BatchSampler):
    """Exactly B records uniformly without replacement, independently per step.

    Not an epoch shuffle: the subsampling amplification the accountant
    certifies needs every step's batch to be a fresh uniform B-subset.

    Parameters
    ----------
    n_records : int
    batch_size : int

    Examples
    --------
    >>> import numpy as np
    >>> sampler = FixedSizeSampler(n_records=10, batch_size=3)
    >>> len(sampler.sample(np.random.default_rng(0))), sampler.sample_rate
    (3, 0.3)
    """

    sampling = "fixed"

    def _sample(self, randomness: SecretRandomness) -> np.ndarray:
        return randomness.subset(self.n_records, self.batch_size)


class PoissonSampler(BatchSampler):
    """Each record independently with probability q = B / m (batch size varies).

    The clipped gradients are summed and divided by the expected size B, not
    by the realised size, so the sensitivity stays 2C / B.

    Parameters
    ----------
    n_records : int
    batch_size : int
        The expected batch size.
    """

    sampling = "poisson"

    def _sample(self, randomness: SecretRandomness) -> np.ndarray:
        return np.flatnonzero(randomness.uniform(self.n_records) < self.sample_rate)


_SAMPLERS = {"fixed": FixedSizeSampler, "poisson": PoissonSampler}


def make_sampler(sampling: str, n_records: int, batch_size: int) -> BatchSampler:
    """The sampler named ``sampling``.

    Parameters
    ----------
    sampling : {"fixed", "poisson"}
    n_records : int
    batch_size : int

    Returns
    -------
    BatchSampler
    """
    try:
        cls = _SAMPLERS[sampling]
    except KeyError:
        raise ValueError(
            f"The 'sampling' parameter must be one of {sorted(_SAMPLERS)}. Got {sampling!r} instead."
        ) from None
    return cls(n_records, batch_size)
