"""What binds a protocol instance, and the threshold its shares need: shared by the sites and the server.

Secure aggregation after Bonawitz et al. ("Practical Secure Aggregation for
Privacy-Preserving Machine Learning", CCS 2017), on the complete graph: every
site masks its release with a pairwise mask per peer (cancelling in the sum)
and a self-mask, and Shamir-shares its self-mask seed and its pairwise-mask
key with every peer, so that the server can remove the masks of sites that
drop out, and only those.

**The threshold.** With K sites a round, at most t of which may drop out or
collude with the server (the encoding's ``colluders``), the shares are
split with threshold

    T = max(K − t, ⌊(K + t) / 2⌋ + 1).

K − t: unmasking goes ahead only with at least the K − t survivors whose
noise shares the certificate counts. ⌊(K + t) / 2⌋ + 1: an honest site
reveals, for a peer, either its self-mask share or its pairwise-mask share,
never both (the lists it is given are disjoint; it answers one unmasking per
instance). To rebuild both secrets of one site, a server that shows the
honest sites two different views (that site alive to some, dropped to
others) needs T shares of each; the c ≤ t colluders give both, the K − c
honest sites one each, so it needs 2T ≤ K + c ≤ K + t. With 2T > K + t it
cannot, whatever views it shows: Bonawitz et al.'s consistency round,
which lets their protocol run with a lower threshold, is not needed. For
K ≤ 3t the second term wins and fewer than t sites may drop out; a round
whose survivors fall below T is abandoned (the engine discards it).

**The binding.** Each site signs its fresh round keys over
:meth:`Binding.payload`: the Flower run and round the site itself saw in the
message's metadata, the instance (fresh for every attempt at a round), a
digest of θ_t and the round's instructions as the site received them, and K,
t, the modulus and the length. A key signed for another run, round or
instance, or by a site that was sent another θ or other instructions, fails
every peer's check.
"""

from __future__ import annotations

from dataclasses import dataclass

from .crypto import digest

__all__ = ["Binding", "key_context", "threshold"]


def threshold(clients: int, colluders: int) -> int:
    """T = max(K − t, ⌊(K + t) / 2⌋ + 1), capped at K: the shares that unmask, and the survivors unmasking needs.

    Parameters
    ----------
    clients : int
        K.
    colluders : int
        t < K.

    Returns
    -------
    int

    Examples
    --------
    >>> threshold(5, 1), threshold(3, 1), threshold(10, 1), threshold(1, 0)
    (4, 3, 9, 1)
    """
    return min(clients, max(clients - colluders, (clients + colluders) // 2 + 1))


def key_context(purpose: str, instance: str) -> bytes:
    """The key-derivation context of ``purpose`` in ``instance`` (the sites' and the server's)."""
    return digest("skfedriem secure aggregation", purpose, instance)


@dataclass(frozen=True)
class Binding:
    """Everything a round key is signed for: run, round, instance, round content, K, t, modulus and length.

    Parameters
    ----------
    run : str
        The Flower run, as the site's own metadata names it.
    round : str
        The round (the message's group), as the site's metadata names it.
    instance : str
        The attempt at this round (the server draws a fresh one each time).
    content : bytes
        A digest of θ_t and the round's instructions as the site received them.
    clients, colluders : int
        K and t.
    bits : int
        The modulus is 2^bits.
    length : int
        The release's length.
    """

    run: str
    round: str
    instance: str
    content: bytes
    clients: int
    colluders: int
    bits: int
    length: int

    @property
    def threshold(self) -> int:
        """T (:func:`threshold`)."""
        return threshold(self.clients, self.colluders)

    def payload(self, site: str, *parts: bytes | str) -> bytes:
        """The bytes ``site`` signs: the binding, the site's name and ``parts``."""
        return digest("skfedriem secure aggregation", self.run, self.round, self.instance, self.content,
                      str(self.clients), str(self.colluders), str(self.bits), str(self.length), site, *parts)

    def context(self, purpose: str) -> bytes:
        """The key-derivation context of ``purpose`` in this instance (:func:`key_context`)."""
        return key_context(purpose, self.instance)
