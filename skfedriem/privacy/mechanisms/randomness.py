"""A client's secret randomness: which records each batch holds, and the Gaussian noise.

Both must be unguessable by the server and by anyone holding the fitted
model, because whoever can regenerate them can subtract the noise from what
the server saw. Two sources:

:class:`SeededRandomness`
    numpy's PCG64 generator from a :class:`numpy.random.SeedSequence`. With
    ``SeedSequence()`` (what every estimator uses when ``random_state=None``)
    the 128-bit state comes from the operating system's entropy and never
    passes through a small integer; with a seed the run is bit-reproducible,
    and not private against anyone who knows the seed.
:class:`SecureRandomness`
    The operating system's cryptographically secure generator (``os.urandom``),
    with the defence of Holohan & Braghin (2021, "Secure random sampling in
    differential privacy", ESORICS) against floating-point attacks on
    Gaussian sampling (Mironov 2012; Jin et al. 2022): every noise coordinate
    is the sum of four independent standard normals divided by two, which has
    the same law but no longer lands on the sparse set of values one sample
    of the transform can produce. Opacus' ``secure_mode`` does the same. It
    cannot be seeded. numpy has no cryptographically secure bit generator, so
    the uniforms, the Box–Muller transform and the subset draw are written here.
"""

from __future__ import annotations

import json
import math
import os
from abc import ABC, abstractmethod

import numpy as np
import torch

__all__ = ["SecretRandomness", "SecureRandomness", "SeededRandomness", "as_randomness"]

_NUMPY_NORMAL_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}


class SecretRandomness(ABC):
    """Where a client's batches and noise come from; it never leaves the client."""

    @abstractmethod
    def uniform(self, size: int) -> np.ndarray:
        """``size`` independent uniforms on [0, 1), float64."""

    @abstractmethod
    def subset(self, n: int, k: int) -> np.ndarray:
        """A uniformly random k-subset of ``range(n)``, as indices (order carries no information)."""

    @abstractmethod
    def standard_normal(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """Independent N(0, 1) coordinates in a tensor of ``shape``."""

    @abstractmethod
    def poisson(self, lam: float, size: int) -> np.ndarray:
        """``size`` independent Poisson(λ) counts, int64 (a share of distributed noise is a difference of two)."""

    @abstractmethod
    def to_bytes(self) -> bytes:
        """The state to resume from, as JSON (no pickle: reading it back runs no code)."""

    @staticmethod
    def from_bytes(data: bytes) -> SecretRandomness:
        """Inverse of :meth:`to_bytes`; ValueError for anything else."""
        try:
            kind, state = json.loads(data)
            if kind == "secure":
                return SecureRandomness()
            if kind == "seeded":
                rng = np.random.Generator(np.random.PCG64())
                rng.bit_generator.state = state
                return SeededRandomness(rng)
        except (TypeError, ValueError, KeyError) as error:
            raise ValueError(f"Not a saved SecretRandomness: {error}") from None
        raise ValueError(f"Not a saved SecretRandomness: unknown kind {kind!r}.")


class SeededRandomness(SecretRandomness):
    """numpy's PCG64 generator seeded from a :class:`numpy.random.SeedSequence`.

    Parameters
    ----------
    seed : numpy.random.SeedSequence or numpy.random.Generator
        ``SeedSequence()`` draws 128 bits of OS entropy; a seeded sequence
        gives a reproducible run that anyone knowing the seed can replay. A
        Generator is used as is.
    """

    def __init__(self, seed: np.random.SeedSequence | np.random.Generator) -> None:
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.Generator(np.random.PCG64(seed))

    def uniform(self, size: int) -> np.ndarray:
        return self.rng.random(size)

    def subset(self, n: int, k: int) -> np.ndarray:
        return self.rng.choice(n, size=k, replace=False, shuffle=False)

    def standard_normal(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        np_dtype = _NUMPY_NORMAL_DTYPES.get(dtype, np.float64)
        return torch.from_numpy(self.rng.standard_normal(shape, dtype=np_dtype)).to(dtype)

    def poisson(self, lam: float, size: int) -> np.ndarray:
        return self.rng.poisson(lam, size).astype(np.int64)

    def to_bytes(self) -> bytes:
        return json.dumps(["seeded", self.rng.bit_generator.state]).encode()

    def __repr__(self) -> str:
        return "SeededRandomness(PCG64)"


def _urandom_uint64(size: int) -> np.ndarray:
    return np.frombuffer(os.urandom(8 * size), dtype=np.uint64)


class SecureRandomness(SecretRandomness):
    """The OS's cryptographically secure generator, hardened Gaussian noise; never seeded."""

    def uniform(self, size: int) -> np.ndarray:
        # the top 53 bits of each 64-bit draw: every double k / 2^53 in [0, 1) equally likely
        return (_urandom_uint64(size) >> np.uint64(11)).astype(np.float64) * 2.0**-53

    def subset(self, n: int, k: int) -> np.ndarray:
        if k >= n:
            return np.arange(n)
        while True:  # the k smallest of n iid 64-bit keys: uniform unless the k-th and (k+1)-th tie
            keys = _urandom_uint64(n)
            order = np.argpartition(keys, k)
            if keys[order[:k]].max() < keys[order[k]]:
                return order[:k]

    def _box_muller(self, size: int) -> np.ndarray:
        half = (size + 1) // 2
        u = self.uniform(2 * half)
        radius = np.sqrt(-2.0 * np.log1p(-u[:half]))  # log of a value in (0, 1]
        angle = 2.0 * math.pi * u[half:]
        return np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:size]

    def standard_normal(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        size = math.prod(shape)
        draws = self._box_muller(4 * size).reshape(4, size)
        return torch.from_numpy(draws.sum(0) / 2.0).reshape(shape).to(dtype)

    def poisson(self, lam: float, size: int) -> np.ndarray:
        # numpy's Poisson sampler on a Philox generator keyed by 128 fresh bits of OS entropy at every call:
        # the counts are integers (no low-order float bits to leak, unlike Gaussian floats), and no state outlives
        # the call. No cryptographic library offers a Poisson sampler.
        key = int.from_bytes(os.urandom(16), "little")
        return np.random.Generator(np.random.Philox(key=key)).poisson(lam, size).astype(np.int64)

    def to_bytes(self) -> bytes:
        return json.dumps(["secure", None]).encode()

    def __repr__(self) -> str:
        return "SecureRandomness(os.urandom)"


def as_randomness(source: SecretRandomness | np.random.Generator) -> SecretRandomness:
    """A :class:`SecretRandomness` from itself or from a numpy Generator."""
    if isinstance(source, SecretRandomness):
        return source
    if isinstance(source, np.random.Generator):
        return SeededRandomness(source)
    raise TypeError(f"Expected a SecretRandomness or a numpy Generator. Got {type(source).__name__} instead.")
