"""Shamir's secret sharing of 256-bit secrets, with pycryptodome's maintained implementation.

pycryptodome's :class:`Crypto.Protocol.SecretSharing.Shamir` shares 16-byte
secrets over GF(2^128); a 256-bit secret (an X25519 private key, a self-mask
seed) is shared as its two halves, each with its own random polynomial, at
the same points. Any ``threshold`` shares recover the secret; fewer reveal
nothing about it.
"""

from __future__ import annotations

from Crypto.Protocol.SecretSharing import Shamir

__all__ = ["SHARE_BYTES", "combine", "split"]

_HALF = 16
#: The size of one share of a 256-bit secret (two 16-byte halves).
SHARE_BYTES = 2 * _HALF


def split(secret: bytes, threshold: int, n_shares: int) -> list[bytes]:
    """``n_shares`` shares of ``secret`` (32 bytes), any ``threshold`` of which recover it; share i is at point i + 1.

    Parameters
    ----------
    secret : bytes
        32 bytes.
    threshold : int
        1 ≤ threshold ≤ n_shares.
    n_shares : int

    Returns
    -------
    list of bytes
        Share i (32 bytes) for the party at point i + 1.
    """
    if len(secret) != SHARE_BYTES or not 1 <= threshold <= n_shares:
        raise ValueError(f"split needs a {SHARE_BYTES}-byte secret and 1 <= threshold <= n_shares. Got "
                         f"{len(secret)} bytes, threshold={threshold!r}, n_shares={n_shares!r}.")
    if threshold == 1:  # pycryptodome needs a polynomial of degree >= 1: a threshold of 1 is the secret itself
        return [bytes(secret)] * n_shares
    halves = [Shamir.split(threshold, n_shares, secret[i:i + _HALF]) for i in (0, _HALF)]
    return [low + high for (_, low), (_, high) in zip(*halves)]


def combine(shares: dict[int, bytes], threshold: int) -> bytes:
    """The secret from at least ``threshold`` shares, keyed by point (1-based); ValueError with fewer.

    Parameters
    ----------
    shares : dict of int to bytes
    threshold : int

    Returns
    -------
    bytes
    """
    if len(shares) < threshold:
        raise ValueError(f"{len(shares)} shares cannot recover a secret shared with threshold {threshold}.")
    if threshold == 1:
        return bytes(next(iter(shares.values())))
    chosen = sorted(shares.items())[:threshold]
    low = Shamir.combine([(point, share[:_HALF]) for point, share in chosen])
    high = Shamir.combine([(point, share[_HALF:]) for point, share in chosen])
    return low + high
