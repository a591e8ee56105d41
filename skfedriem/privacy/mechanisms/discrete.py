"""Distributed noise: a step's clipped sum encoded on a public integer grid, plus one client's share of the noise.

With ``noise="distributed"`` no client adds the whole noise: each releases
its clipped per-record gradients' sum, encoded as integers modulo a public
``2**bits``, plus an integer *share* of the noise, and the server learns only
the sum of the releases (secure aggregation), which carries every answering
client's share. The encoding, as in Kairouz, Liu & Steinke ("The Distributed
Discrete Gaussian Mechanism for Federated Learning with Secure Aggregation",
ICML 2021) and TensorFlow Federated's ``DistributedDpSumFactory``:

1. every record's clipped tangent gradient (all blocks, flattened, padded
   with zeros to n = 2^k coordinates) is rotated by a public randomized
   Hadamard transform H D / √n (D random signs from the round's public
   seed), which spreads its norm evenly over the coordinates;
2. scaled by s, and rounded *record by record* with conditional randomized
   rounding: each coordinate to its floor or ceiling with the probability
   that keeps it unbiased, redrawn until the rounded record's L2 norm is at
   most the public bound R (:func:`rounding_bound`; each try passes with
   probability at least 1 − β). Every rounded record is within R, so
   substituting one moves the client's integer sum by at most Δ2 = 2R, and
   by Δ1 = 2R·min(√n, R) in L1: what the accountant is charged, not 2sC;
3. summed, plus the client's share Sk(λ, λ) = Poisson(λ) − Poisson(λ) per
   coordinate drawn from its secret randomness, reduced modulo 2^bits.

With adaptive clipping (``clip="auto"``) the release has one more
coordinate, not rotated: s_b times the client's count of records whose
gradient norm is at most C (Andrew et al., 2021), with its share of the
same noise. Substituting a record moves that count by at most 1, so the
release's sensitivity is (√(Δ2² + s_b²), Δ1 + s_b) and one Skellam
mechanism covers both (:meth:`DistributedEncoding.sensitivity`); s_b is
chosen so that the count takes a fixed share of Δ2² (:func:`count_scale`),
as local noise splits μ0².

The Skellam mechanism (Agarwal, Kairouz & Liu, NeurIPS 2021) rather than the
distributed discrete Gaussian: a sum of independent Skellams is exactly a
Skellam, so the shares of any K − t honest clients add up to exactly the
noise one curator would add (Sk(λ(K − t), λ(K − t))), and its Rényi DP has a
closed form (:mod:`skfedriem.privacy.accounting.skellam`); a sum of discrete Gaussians
is only close to one, and its accounting carries that gap.

The server reduces the sum to centred representatives, divides by s,
rotates back and drops the padding. The modulus is sized so that the true
sum lies within ±2^bits / 4 but with probability :data:`WRAP_PROBABILITY`;
a decoded coordinate beyond that band marks the round as wrapped
(:func:`decode_sum`): a sum that wrapped past ±2^bits / 2 by less than
2^bits / 4 always lands there, so a wrap is detected unless the sum was
three times the band, and a wrapped round is discarded (it was charged when
it started).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from numbers import Integral, Real

import numpy as np
import torch
from scipy.linalg import hadamard

from ...exceptions import InvalidInstructionsError
from .randomness import SecretRandomness

__all__ = ["MAX_BITS", "ROUNDING_BETA", "WRAP_PROBABILITY", "DistributedEncoding", "count_scale", "decode_count",
           "decode_sum", "encode_clients", "encode_records", "group_step", "padded_dimension", "plan_encoding",
           "remove_excess", "rotate", "rounding_bound", "sum_releases", "unrotate"]

#: β of conditional rounding: a try is kept with probability at least 1 − β (TFF's e^{-1/2}).
ROUNDING_BETA = math.exp(-0.5)
#: The probability, per round, that a coordinate of the true sum leaves the band ±2^bits / 4 the modulus is sized for.
WRAP_PROBABILITY = 1e-4
#: The widest modulus: K sums of values below 2^bits stay exact in int64, decoded values in float64.
MAX_BITS = 48
#: The largest Poisson rate of a share (numpy's sampler refuses rates near 2^63; 1e15 is a noise std of 4e7 grid
#: points a coordinate, far beyond any modulus).
MAX_SHARE = 1e15
#: Grid points per coordinate of a record scaled to C after rotation: s C = RESOLUTION √n (rounding then inflates
#: R² by about 1 / (4 RESOLUTION²) + 1 / (RESOLUTION √n), under 0.5 % for n ≥ 16).
RESOLUTION = 16
#: How many times conditional rounding redraws a record before it sends the record as 0 (each try keeps it with
#: probability ≥ 1 − β ≈ 0.39: 200 failures have probability below 1e-40).
MAX_TRIES = 200


def padded_dimension(dimension: int) -> int:
    """n = the smallest power of 2 ≥ d (at least 1): the Hadamard transform's length.

    Parameters
    ----------
    dimension : int
        d.

    Returns
    -------
    int
    """
    return 1 << max(int(dimension) - 1, 0).bit_length()


def rounding_bound(norm: float, padded: int, beta: float = ROUNDING_BETA) -> float:
    """R: the L2 bound a record of norm at most ``norm`` keeps after conditional rounding on the unit grid.

    min(L + √n, √(L² + n/4 + √(2 ln(1/β)) (L + √n / 2))), L the scaled clip
    s C (Kairouz, Liu & Steinke 2021; TensorFlow Federated's
    ``inflated_l2_norm_bound``). The first term holds for any rounding; the
    second is what randomized rounding exceeds with probability at most β.

    Parameters
    ----------
    norm : float
        L = s C.
    padded : int
        n.
    beta : float, default=ROUNDING_BETA

    Returns
    -------
    float
    """
    root = math.sqrt(padded)
    tight = math.sqrt(norm ** 2 + padded / 4 + math.sqrt(2 * math.log(1 / beta)) * (norm + root / 2))
    return min(norm + root, tight)


@lru_cache(maxsize=16)
def _dense_hadamard(n: int) -> np.ndarray:
    """H_n as a dense float64 matrix (n ≤ :data:`DENSE_HADAMARD`)."""
    return hadamard(n).astype(np.float64)


#: The largest Hadamard factor applied as a dense product: H_{ab} = H_a ⊗ H_b splits a longer transform.
DENSE_HADAMARD = 64


def _walsh_hadamard(x: np.ndarray) -> np.ndarray:
    """H x along the last axis (Sylvester order, unnormalised), its length a power of 2.

    H_{ab} = H_a ⊗ H_b (Sylvester), so for x laid out as an a × b matrix X,
    H x is H_a X H_b: dense products with factors of at most
    :data:`DENSE_HADAMARD` (scipy's ``hadamard``), recursively on the a side.
    Written here because no maintained library ships a fast Walsh–Hadamard
    transform for numpy; BLAS products beat a butterfly's strided stages.
    """
    n = x.shape[-1]
    lead = x.shape[:-1]
    return _hadamard_rows(np.asarray(x, dtype=np.float64).reshape(-1, n)).reshape(*lead, n)


def _hadamard_rows(y: np.ndarray) -> np.ndarray:
    n = y.shape[1]
    if n <= DENSE_HADAMARD:
        return y @ _dense_hadamard(n)
    b = DENSE_HADAMARD
    a = n // b
    z = y.reshape(-1, a, b) @ _dense_hadamard(b)  # H_b along each row of X
    if a <= DENSE_HADAMARD:  # H_a along each column: one batched product, no transposed copies
        return (_dense_hadamard(a) @ z).reshape(-1, n)
    z = _hadamard_rows(np.swapaxes(z, 1, 2).reshape(-1, a))
    return np.swapaxes(z.reshape(-1, b, a), 1, 2).reshape(-1, n)


def _signs(seed: int, n: int) -> np.ndarray:
    """The round's public random signs D (n of ±1), from its public seed."""
    return np.random.default_rng(seed).integers(0, 2, n) * 2.0 - 1.0


def rotate(x: torch.Tensor, seed: int) -> torch.Tensor:
    """H D x / √n along the last axis (float64; its length n a power of 2): an orthogonal map.

    Parameters
    ----------
    x : torch.Tensor of shape (..., n)
    seed : int
        The round's public rotation seed.

    Returns
    -------
    torch.Tensor of shape (..., n)
    """
    return torch.from_numpy(_rotated(x.double().numpy(), seed, x.shape[-1]))


def _rotated(rows: np.ndarray, seed: int, n: int) -> np.ndarray:
    """H D x / √n of rows ``(..., d)``, zero-padded to n ≥ d: :func:`rotate`'s map, in a new float64 array."""
    d = rows.shape[-1]
    padded = np.zeros((*rows.shape[:-1], n))
    np.multiply(rows, _signs(seed, n)[:d], out=padded[..., :d])
    out = _walsh_hadamard(padded)
    out /= math.sqrt(n)
    return out


def unrotate(y: torch.Tensor, seed: int) -> torch.Tensor:
    """The inverse of :func:`rotate`: D H y / √n (H is symmetric and H H = n I).

    Parameters
    ----------
    y : torch.Tensor of shape (..., n)
    seed : int
        The round's public rotation seed.

    Returns
    -------
    torch.Tensor of shape (..., n)
    """
    n = y.shape[-1]
    return torch.from_numpy(_walsh_hadamard(y.double().numpy()) / math.sqrt(n) * _signs(seed, n))


@dataclass(frozen=True)
class DistributedEncoding:
    """The public encoding of a round's distributed release: grid, modulus, noise share, clients and colluders.

    Parameters
    ----------
    dimension : int
        d, the model's trainable coordinates (all blocks).
    scale : float
        s: a record's coordinates are multiplied by s before rounding.
    bits : int
        The modulus is 2^bits.
    share : float
        λ: each client adds Sk(λ, λ) to every coordinate (variance 2λ).
    clients : int
        K, the clients the round's shares were sized for.
    colluders : int
        t < K: how many of them may drop out or collude with the server; the
        K − t others' shares alone carry the noise the budget needs.
    dropouts : int, default=0
        d, the dropout allowance: d more of them may drop out of a round
        (t + d < K) and the survivors' honest shares still carry that noise,
        no more (:meth:`level_share`): each client adds the share of the
        level d, in components, and the excess over the round's level is
        taken out once its dropouts are known (:func:`encode_clients`,
        :func:`remove_excess`).
    announced : int, optional
        The sites a round's lists left out when it started (a deployed round's
        signed lists): the clients draw the share of level a = min(announced,
        d) at once and keep apart only the components above it. None: nothing
        is announced (in process), a = 0.
    rotation_seed : int, default=0
        The round's public rotation seed.
    beta : float, default=ROUNDING_BETA
        Conditional rounding's β.
    count_scale : int, default=0
        s_b > 0: the release's last coordinate is s_b times the client's count
        of records within the clip (adaptive clipping); 0: no count.
    """

    dimension: int
    scale: float
    bits: int
    share: float
    clients: int
    colluders: int
    rotation_seed: int = 0
    beta: float = ROUNDING_BETA
    count_scale: int = 0
    dropouts: int = 0
    announced: int | None = None

    def __post_init__(self) -> None:
        _check_integers(self, ("dimension", "bits", "clients", "colluders", "rotation_seed", "count_scale",
                               "dropouts") + (() if self.announced is None else ("announced",)))
        _check_positive(self, ("scale", "share", "beta"))
        if self.rotation_seed < 0 or self.share > MAX_SHARE or self.beta >= 1 or not 0 <= self.count_scale < 2 ** 52:
            raise InvalidInstructionsError(f"The encoding needs rotation_seed >= 0, share <= {MAX_SHARE:g}, beta < 1 "
                                           f"and 0 <= count_scale < 2^52. Got rotation_seed={self.rotation_seed!r}, "
                                           f"share={self.share!r}, beta={self.beta!r}, "
                                           f"count_scale={self.count_scale!r}.")
        if not 1 <= self.bits <= MAX_BITS or self.dimension < 1 or not 0 <= self.colluders < self.clients:
            raise InvalidInstructionsError(
                f"The encoding needs 1 <= bits <= {MAX_BITS}, dimension >= 1 and 0 <= colluders < clients. "
                f"Got bits={self.bits!r}, dimension={self.dimension!r}, clients={self.clients!r}, "
                f"colluders={self.colluders!r}.")
        if not 0 <= self.dropouts < self.clients - self.colluders or not 0 <= (self.announced or 0) < self.clients:
            raise InvalidInstructionsError(
                f"The encoding needs 0 <= dropouts < clients - colluders and 0 <= announced < clients. Got "
                f"dropouts={self.dropouts!r}, announced={self.announced!r}, clients={self.clients!r}, "
                f"colluders={self.colluders!r}.")

    @property
    def padded(self) -> int:
        """n, the rotated vector's length."""
        return padded_dimension(self.dimension)

    @property
    def length(self) -> int:
        """The release's length: n, and one more coordinate for the count of adaptive clipping."""
        return self.padded + (1 if self.count_scale else 0)

    @property
    def modulus(self) -> int:
        """2^bits."""
        return 1 << self.bits

    @property
    def honest(self) -> int:
        """K − t: the shares the noise is counted from when no more than t sites drop out or collude."""
        return self.clients - self.colluders

    @property
    def fewest_answers(self) -> int:
        """K − t − d: the fewest answering clients whose shares, at their round's level, still carry the noise; a
        round with fewer is discarded."""
        return self.clients - self.colluders - self.dropouts

    def level(self, dropped: int) -> int:
        """The level of a round that ``dropped`` of the K clients did not answer: min(dropped, d)."""
        return min(max(int(dropped), 0), self.dropouts)

    def level_share(self, level: int) -> float:
        """λ_j = λ (K − t) / (K − t − j): a client's share at level j ≤ d, so that the K − t − j honest shares of
        a round that j clients (beyond t) did not answer carry V = 2λ (K − t), no more."""
        if not 0 <= level <= self.dropouts:
            raise ValueError(f"A level in [0, d = {self.dropouts}]. Got {level!r}.")
        if level == 0:
            return self.share
        # rounded up: two roundings could leave it up to 2^-52 below λ (K − t) / (K − t − j); the components'
        # rates, differences of consecutive λ_j within a factor 2, are exact (Sterbenz), so they add up to it
        return self.share * self.honest / (self.honest - level) * (1 + 2.0 ** -50)

    @property
    def base_level(self) -> int:
        """a = min(announced, d) (0 with nothing announced): the level a client's share starts at."""
        return self.level(self.announced or 0)

    @property
    def round_share(self) -> float:
        """λ_a: the share a client draws at once, before the components it keeps apart."""
        return self.level_share(self.base_level)

    @property
    def excess_rates(self) -> list[float]:
        """λ_j − λ_{j−1} for j = a + 1 … d: the rates of the excess components a client adds and keeps apart, those
        above the round's level to be taken out once its dropouts are known ([] when a = d)."""
        return [self.level_share(j) - self.level_share(j - 1) for j in range(self.base_level + 1, self.dropouts + 1)]

    def excess_above(self, level: int) -> slice:
        """The rows of a client's excess components (levels a + 1 … d) above ``level``, which a round at that level
        takes out."""
        return slice(max(level - self.base_level, 0), None)

    @property
    def central_variance(self) -> float:
        """V = 2λ (K − t): the variance, per coordinate, of the K − t honest shares' sum."""
        return 2 * self.share * self.honest

    @property
    def local_variance(self) -> float:
        """2λ: one client's share alone."""
        return 2 * self.share

    @property
    def deviating_variance(self) -> float:
        """2λ_d max(K − 2t − d, 1), at most V: the honest shares a server that deviates, with t colluding clients,
        can leave in a sum (it declares t + d honest clients dropped out, and t of the others are its own), and at
        least the client's own share, which goes wherever its release goes. Declaring j ≤ d dropped leaves
        K − t − j honest shares of λ_j, which carry V: the worst case is t + d (at d = 0: 2λ max(K − 2t, 1))."""
        worst = 2 * self.level_share(self.dropouts) * max(self.fewest_answers - self.colluders, 1)
        return min(worst, self.central_variance)

    def bound(self, clip: float) -> float:
        """R for records clipped to ``clip``: :func:`rounding_bound` of s C; InvalidInstructionsError when s C + √n
        reaches 2^52, beyond which rounded values and their norms are no longer exact in float64 and int64."""
        if not self.scale * clip + math.sqrt(self.padded) < 2.0 ** 52:
            raise InvalidInstructionsError(f"The encoding's scale {self.scale!r} puts records clipped to {clip!r} "
                                           "beyond 2^52 grid points a coordinate.")
        return rounding_bound(self.scale * clip, self.padded, self.beta)

    def sensitivity(self, clip: float, diameter: float = 2.0) -> tuple[float, float]:
        """(Δ2, Δ1) of one client's integer release when one record is substituted: (2R, 2R min(√n, R)), and with a
        count (√((2R)² + s_b²), 2R min(√n, R) + s_b): the count moves by at most 1.

        ``diameter`` < 2 is not used: two rounded records are each within R,
        so only 2R bounds their difference.
        """
        radius = self.bound(clip)
        return math.hypot(2 * radius, self.count_scale), 2 * radius * min(math.sqrt(self.padded), radius) + \
            self.count_scale

    def charged_step(self, clip: float, sample_rate: float, group_size: int = 1) -> tuple[float, float, float]:
        """(q, Δ2, Δ1) a step is charged at for a unit owning ``group_size`` of its records (one of
        :func:`group_step` on :meth:`sensitivity`)."""
        return group_step(sample_rate, *self.sensitivity(clip), group_size)

    def with_seed(self, seed: int) -> DistributedEncoding:
        """The same encoding with another round's rotation seed."""
        return dataclasses.replace(self, rotation_seed=int(seed))

    def for_clip(self, clip: float, planned: float) -> DistributedEncoding:
        """The encoding of a round clipped at ``clip`` instead of the ``planned`` clip (adaptive clipping): the grid
        follows the clip, s ← s · planned / clip, nudged down by 1e-12 so that s C never exceeds the planned s C,
        whose bound R (and so every charge) the plan calibrated."""
        if clip == planned:
            return self
        return dataclasses.replace(self, scale=self.scale * (planned / clip) * (1 - 1e-12))


def group_step(sample_rate: float, l2: float, l1: float, group_size: int) -> tuple[float, float, float]:
    """(q, Δ2, Δ1) of a Skellam step protecting a unit that owns ``group_size`` = k of the records it samples.

    k records each within R of any other move a client's sum by at most k Δ2
    in L2 and k Δ1 in L1 (the triangle inequality): the unit's step is the
    Skellam mechanism at those sensitivities. A group of k > 1 is charged at
    q = 1, claiming no amplification by sampling: couple the two neighbours'
    samplings draw for draw and every pair of batches differs in at most the
    unit's k records, so the unsampled mechanism's Rényi divergence at k Δ
    bounds the sampled one's (Rényi divergence is jointly quasi-convex). A
    record or a subject sampled whole (k = 1) keeps its rate.

    Parameters
    ----------
    sample_rate : float
    l2, l1 : float
        One record's Δ2 and Δ1 (:meth:`DistributedEncoding.sensitivity`).
    group_size : int

    Returns
    -------
    tuple of float

    Examples
    --------
    >>> group_step(0.1, 2.0, 6.0, 1)
    (0.1, 2.0, 6.0)
    >>> group_step(0.1, 2.0, 6.0, 3)
    (1.0, 6.0, 18.0)
    """
    if group_size == 1:
        return float(sample_rate), float(l2), float(l1)
    return 1.0, float(group_size * l2), float(group_size * l1)


def _check_integers(encoding: DistributedEncoding, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(encoding, name)
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise InvalidInstructionsError(f"The encoding's {name!r} must be an integer. Got {value!r} instead.")


def _check_positive(encoding: DistributedEncoding, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(encoding, name)
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
            raise InvalidInstructionsError(f"The encoding's {name!r} must be a finite number > 0. "
                                           f"Got {value!r} instead.")


def _conditional_round(scaled: np.ndarray, bound: float, randomness: list[SecretRandomness]) -> np.ndarray:
    """Each record rounded unbiasedly to the integer grid, redrawn until its norm is at most ``bound`` (int64).

    ``scaled`` is ``(K, B, n)``: client k's records draw from ``randomness[k]``
    alone, try after try, exactly as they would alone. A record that fails
    :data:`MAX_TRIES` times is sent as 0 (within the bound).
    """
    scaled = np.asarray(scaled, dtype=np.float64)
    n_clients, batch, n = scaled.shape
    floor = np.floor(scaled)
    fraction = scaled - floor
    limit = bound ** 2
    # the first try of every record at once, each client's draws from its own randomness (in place: K B n floats)
    up = np.empty(scaled.shape, dtype=bool)
    for k, source in enumerate(randomness):
        np.less(source.uniform(batch * n).reshape(batch, n), fraction[k], out=up[k])
    rounded = np.add(floor, up)
    within = np.einsum("kbn,kbn->kb", rounded, rounded) <= limit
    rounded[~within] = 0.0
    pending = [np.flatnonzero(~own) for own in within]
    for _ in range(MAX_TRIES - 1):  # the few records past the bound, redrawn client by client
        if not any(rows.size for rows in pending):
            break
        for k, rows in enumerate(pending):
            if rows.size == 0:
                continue
            draws = randomness[k].uniform(rows.size * n).reshape(rows.size, n)
            again = floor[k, rows] + (draws < fraction[k, rows])
            kept = np.einsum("bn,bn->b", again, again) <= limit
            rounded[k, rows[kept]] = again[kept]
            pending[k] = rows[~kept]
    return rounded.astype(np.int64)


def encode_clients(rows: torch.Tensor, encoding: DistributedEncoding, clip: float,
                   randomness: list[SecretRandomness], counts: list[int] | None = None) -> list[np.ndarray]:
    """Every client's release: Σ_z round(s · rotate(clip_C(g_z))) + Sk(λ, λ) per coordinate, modulo 2^bits.

    K clients at once (one rotation of all their records); client k's
    rounding and share come from ``randomness[k]`` alone, in the order a lone
    client draws them, so its release is what it releases alone.

    Parameters
    ----------
    rows : torch.Tensor of shape (K, B, d)
        Each client's clipped records (each of norm at most C), flattened over
        all blocks; a record that must not count is a row of zeros.
    encoding : DistributedEncoding
    clip : float
        C.
    randomness : list of SecretRandomness
        Client k's secret randomness: its rounding and its share.
    counts : list of int, optional
        Client k's count of records within the clip, which an encoding with
        ``count_scale`` s_b > 0 releases as s_b times it in its last
        coordinate (and needs).

    Returns
    -------
    list of ndarray of int64, shape (length,) or (1 + d − a, length)
        In [0, 2^bits). With excess components (a dropout allowance d above
        the base level a: :attr:`DistributedEncoding.excess_rates`), row 0 is
        the release, which carries them all, and row i the excess component
        of level a + i, Sk(λ_{a+i} − λ_{a+i−1}), which the client keeps apart
        for :func:`remove_excess`.
    """
    if (counts is not None) != bool(encoding.count_scale):
        raise ValueError(f"An encoding with count_scale={encoding.count_scale!r} releases a count exactly when it "
                         f"has one: got counts={counts!r}.")
    scaled = _rotated(rows.detach().to("cpu", torch.float64).numpy(), encoding.rotation_seed, encoding.padded)
    scaled *= encoding.scale
    totals = _conditional_round(scaled, encoding.bound(clip), randomness).sum(1)
    if counts is not None:
        totals = np.concatenate([totals, encoding.count_scale * np.asarray(counts, dtype=np.int64)[:, None]], axis=1)
    releases = []
    rates = encoding.excess_rates
    for total, source in zip(totals, randomness):
        components = [_skellam(source, rate, encoding.length) for rate in [encoding.round_share, *rates]]
        release = np.mod(total + sum(components), encoding.modulus)
        releases.append(np.stack([release, *(np.mod(c, encoding.modulus) for c in components[1:])]) if rates
                        else release)
    return releases


def _skellam(source: SecretRandomness, rate: float, length: int) -> np.ndarray:
    """Sk(rate, rate) per coordinate: Poisson(rate) − Poisson(rate), from ``source``."""
    return source.poisson(rate, length) - source.poisson(rate, length)


def remove_excess(total: np.ndarray, excess: list[np.ndarray], encoding: DistributedEncoding,
                  dropped: int) -> np.ndarray:
    """The summed release less the answering clients' excess over the round's level: the noise kept whole.

    Each client added the share of level d, Sk(λ_d, λ_d), in components:
    Sk(λ_a) and Sk(λ_j − λ_{j−1}) for j = a + 1 … d (a sum of independent
    Skellams is a Skellam, so they add up to it exactly; a the base level,
    0 in process). A round that ``dropped`` clients did not answer is at
    level L = min(dropped, d) ≥ a: each answering client's components j > L
    are taken out, leaving it Sk(λ_L, λ_L), and any K − t − L honest clients of the K − dropped that
    answered carry Sk(V/2, V/2) with V = 2λ (K − t) — what the budget needs,
    no more (the add-then-remove of Dordis, Jiang et al., EuroSys 2024). What
    is taken out is noise alone, drawn apart from every record.

    Parameters
    ----------
    total : ndarray of int64, shape (length,)
        The answering clients' releases summed modulo 2^bits.
    excess : list of ndarray of int64, shape (d − a, length)
        Each answering client's excess components (levels a + 1 … d).
    encoding : DistributedEncoding
    dropped : int
        K less the clients that answered.

    Returns
    -------
    ndarray of int64, shape (length,)
    """
    above = encoding.excess_above(encoding.level(dropped))
    shape = (len(encoding.excess_rates), encoding.length)
    out = np.asarray(total, dtype=np.int64)
    for components in excess:
        components = np.asarray(components, dtype=np.int64)
        if components.shape != shape:
            raise ValueError(f"A client's excess components have shape {components.shape}; the encoding's are "
                             f"{shape}.")
        out = np.mod(out - components[above].sum(0), encoding.modulus)
    return out


def encode_records(rows: torch.Tensor, encoding: DistributedEncoding, clip: float,
                   randomness: SecretRandomness, count: int | None = None) -> np.ndarray:
    """One client's release (:func:`encode_clients` with K = 1).

    Parameters
    ----------
    rows : torch.Tensor of shape (B, d)
        The client's clipped records, flattened over all blocks.
    encoding : DistributedEncoding
    clip : float
        C.
    randomness : SecretRandomness
        The client's secret randomness: the rounding and the share.
    count : int, optional
        Its records within the clip (an encoding with a count needs it).

    Returns
    -------
    ndarray of int64, shape (length,) or (1 + d, length)
        In [0, 2^bits); with excess components, as :func:`encode_clients`.
    """
    return encode_clients(rows.unsqueeze(0), encoding, clip, [randomness], None if count is None else [count])[0]


def sum_releases(releases: list[np.ndarray], encoding: DistributedEncoding) -> np.ndarray:
    """Σ_k release_k modulo 2^bits: what secure aggregation reveals to the server.

    Parameters
    ----------
    releases : list of ndarray of int64, shape (length,)
    encoding : DistributedEncoding

    Returns
    -------
    ndarray of int64, shape (length,)
    """
    total = np.zeros(encoding.length, dtype=np.int64)
    for release in releases:
        total = np.mod(total + np.asarray(release, dtype=np.int64), encoding.modulus)
    return total


def decode_sum(total: np.ndarray, encoding: DistributedEncoding) -> tuple[torch.Tensor, bool]:
    """The summed release decoded: (Σ_z clip_C(g_z) + noise, length d, float64) and whether it wrapped.

    Parameters
    ----------
    total : ndarray of int64, shape (length,)
        The clients' releases summed modulo 2^bits.
    encoding : DistributedEncoding

    Returns
    -------
    decoded : torch.Tensor of shape (d,)
    wrapped : bool
        Whether a coordinate (the count's too) lies beyond ±2^bits / 4, the
        band the modulus was sized for: the round is then discarded.
    """
    centred = _centred(total, encoding)
    wrapped = bool(np.abs(centred).max(initial=0) > encoding.modulus // 4)
    gradient = torch.from_numpy(centred[:encoding.padded].astype(np.float64)) / encoding.scale
    return unrotate(gradient, encoding.rotation_seed)[:encoding.dimension], wrapped


def decode_count(total: np.ndarray, encoding: DistributedEncoding) -> float:
    """The summed release's noisy count of records within the clip (its last coordinate divided by s_b).

    Parameters
    ----------
    total : ndarray of int64, shape (length,)
        The clients' releases summed modulo 2^bits, from an encoding with a
        count.
    encoding : DistributedEncoding

    Returns
    -------
    float
    """
    if not encoding.count_scale:
        raise ValueError("The encoding releases no count (count_scale=0).")
    return float(_centred(total, encoding)[encoding.padded]) / encoding.count_scale


def _centred(total: np.ndarray, encoding: DistributedEncoding) -> np.ndarray:
    """The sum's centred representatives in [−2^bits / 2, 2^bits / 2)."""
    m = encoding.modulus
    return np.mod(np.asarray(total, dtype=np.int64) + m // 2, m) - m // 2


def count_scale(radius: float, count_share: float) -> int:
    """s_b: the count's scale on the grid, so that it takes ``count_share`` of the release's Δ2², rounded up.

    s_b² / ((2R)² + s_b²) = share gives s_b = 2R √(share / (1 − share)).

    Parameters
    ----------
    radius : float
        R, a rounded record's bound.
    count_share : float
        In (0, 1).

    Returns
    -------
    int

    Examples
    --------
    >>> count_scale(100.0, 0.05)
    46
    """
    if not 0 < count_share < 1:
        raise ValueError(f"count_share must be in (0, 1). Got {count_share!r}.")
    return max(1, math.ceil(2 * radius * math.sqrt(count_share / (1 - count_share))))


def plan_encoding(dimension: int, clip: float, total_batch: float, clients: int, colluders: int,
                  calibrate: Callable[[float, float], float], count_share: float = 0.0,
                  dropouts: int = 0) -> DistributedEncoding:
    """The grid and modulus of a run: s from :data:`RESOLUTION`, bits from the sum's and the noise's spread.

    Every coordinate of the rotated true sum (at most B_total records of norm
    R, Hoeffding over the random signs) and of the K shares' noise stays
    within z times its scale but with probability :data:`WRAP_PROBABILITY`,
    z = √(2 ln(2n / p)); the modulus is 4 times that band (so a wrap lands
    beyond ±2^bits / 4, where :func:`decode_sum` detects it). A count
    (``count_share`` > 0, adaptive clipping) lies within s_b B_total.

    Parameters
    ----------
    dimension : int
        d.
    clip : float
        C.
    total_batch : float
        B_total, the records of a round's step summed over its clients.
    clients, colluders : int
        K and t.
    calibrate : callable
        ``calibrate(Δ2, Δ1) -> V``, the variance of the K − t honest shares'
        sum the budget needs for one record's sensitivity on this grid.
    count_share : float, default=0.0
        Adaptive clipping: the share of Δ2² the count of records within the
        clip takes (:func:`count_scale`); 0: no count.
    dropouts : int, default=0
        d, the dropout allowance: the band holds the noise of any round it
        keeps, its K − j answering clients' shares of level j ≤ d (the
        largest at j = d).

    Returns
    -------
    DistributedEncoding
        Rotation seed 0 (each round sets its own).
    """
    n = padded_dimension(dimension)
    scale = RESOLUTION * math.sqrt(n) / clip
    radius = rounding_bound(scale * clip, n)
    counted = count_scale(radius, count_share) if count_share else 0
    central_variance = calibrate(math.hypot(2 * radius, counted), 2 * radius * min(math.sqrt(n), radius) + counted)
    z = math.sqrt(2 * math.log(2 * (n + (1 if counted else 0)) / WRAP_PROBABILITY))  # every coordinate in its band
    share = central_variance / (2 * (clients - colluders))
    # every client adds λ_d before the excess is taken out: K λ_d, the most noise a sum ever carries
    noise = z * math.sqrt(2 * share * clients * (clients - colluders) / (clients - colluders - dropouts))
    band = max(z * total_batch * radius / math.sqrt(n), counted * total_batch) + noise
    bits = math.ceil(math.log2(4 * band + 1))
    if bits > MAX_BITS:
        raise ValueError(f"A round of {total_batch:g} records and noise variance {central_variance:.3g} needs a "
                         f"modulus of 2^{bits}, beyond 2^{MAX_BITS}: use smaller batches or fewer clients a round.")
    return DistributedEncoding(int(dimension), scale, max(bits, 2), share, int(clients), int(colluders),
                               count_scale=counted, dropouts=int(dropouts))
