"""What binds a protocol instance, and the threshold its shares need: shared by the sites and the server.

Secure aggregation after Bonawitz et al. ("Practical Secure Aggregation for
Privacy-Preserving Machine Learning", CCS 2017), on the complete graph: every
site masks its release with a pairwise mask per peer (cancelling in the sum)
and a self-mask, and Shamir-shares its self-mask seed and its pairwise-mask
key with every peer, so that the server can remove the masks of sites that
drop out, and only those.

**The threshold.** With K sites a round out of the N of the federation's
roster, at most t of which may drop out or collude with the server (the
encoding's ``colluders``), and d more of which may drop out (its
``dropouts``, the dropout allowance), the shares are split with threshold

    T = max(K − t − d, ⌊(N + t) / 2⌋ + 1).

K − t − d: unmasking goes ahead only with at least the K − t − d survivors
whose noise shares the certificate counts (each sized for the dropped sites
the lists announce: :func:`masks_context`). ⌊(N + t) / 2⌋ + 1, so that 2T > N + t:
an honest site reveals, for a peer, either its self-mask share or its
pairwise-mask share, never both, once per instance, and reveals mask-key
shares only against T survivors' signatures over the lists it signed itself
(the consistency check of :mod:`~skfedriem.secure_aggregation.site`). A
server showing different lists to different sites, with c ≤ t colluders
that sign and reveal anything, would need T signatures (or T shares) from
two disjoint groups of the N − c honest sites (each site may be shown its
own K of them): 2T ≤ N + c, which 2T > N + t rules out. When the second term
wins (K ≤ 3t, or K well below N) fewer than t sites may drop out, and a
configuration with T > K is refused; a round whose survivors fall below T is
abandoned (the engine discards it).

**The binding.** Each site signs its fresh round keys over
:meth:`Binding.payload`: the Flower run the site itself sees in the
messages' metadata, the round the keys are for, the instance (fresh for
every batch of rounds the keys are made for), and K, t, the modulus and the
length. A key signed for another run, round or instance fails every peer's
check. What the round computes (θ_t and the instructions, as each site
received them) enters the pairwise masks' key derivation
(:func:`key_context`): two sites sent different rounds mask with keys that do
not cancel, so no sum of their releases can be unmasked.

**The lists enter the masks.** A site draws its noise share for the number
of dropped sites its round's lists announce (the larger the fewer survive:
:meth:`~skfedriem.privacy.mechanisms.discrete.DistributedEncoding.round_share`),
and the lists it signed enter its pairwise masks' key derivation
(:func:`masks_context`): a release sized for one set of lists cancels only
with releases sized for the same lists. So every honest release in a sum the
server can unmask was sized for the same lists, hence for the same dropped
sites, and (the consistency check below) those sites are the ones left out:
a server that shows some sites fewer dropped sites than it leaves out, to
have them draw smaller shares, gets masks that do not cancel.

**One message a round.** The keys and the shares of a batch of rounds are
exchanged ahead (two messages per batch); each round then takes a single
message per site, which carries θ_t, the instructions, the shares addressed
to the site and the lists of survivors and dropped sites, and whose reply is
the masked release with the site's signature over the lists and, when no
site is dropped, its self-mask shares (no mask key is revealed: a release's
pairwise masks cancel only in a sum with its partners'). A site already gone
when the round starts is listed as dropped: a second message carries the
survivors' signatures, against which they reveal the shares of its mask key.
A survivor whose masked release does not arrive cannot have its pairwise
masks removed (that would take its other secret): the round is abandoned.
Under a dropout allowance (d > 0) no share goes with the release: the sites
whose masked releases arrived sign the final lists
(:meth:`~skfedriem.secure_aggregation.site.SiteSession.sign_final`), and a
third message carries their signatures, against which each reveals its
shares; a site that failed during the round is then dropped like one gone
before it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .crypto import digest

__all__ = ["Binding", "key_context", "masks_context", "threshold"]


def threshold(clients: int, colluders: int, roster: int | None = None, dropouts: int = 0) -> int:
    """T = max(K − t − d, ⌊(N + t) / 2⌋ + 1): the shares that unmask, and the survivors unmasking needs.

    Parameters
    ----------
    clients : int
        K, the sites of a round.
    colluders : int
        t < K.
    roster : int, optional
        N ≥ K, the sites of the federation's roster, any K of which a server may ask (default K). Each honest
        site may be shown its own K sites of the N: 2T > N + t keeps two disjoint groups of them from both
        reaching T.
    dropouts : int, default=0
        d, the sites beyond t that may drop out with the noise kept whole.

    Returns
    -------
    int
        ValueError when T > K (no round of K sites could be unmasked: more sites a round, or fewer colluders).

    Examples
    --------
    >>> threshold(5, 1), threshold(3, 1), threshold(10, 1), threshold(1, 0), threshold(7, 2, roster=8)
    (4, 3, 9, 1, 6)
    >>> threshold(7, 1), threshold(7, 1, dropouts=2), threshold(10, 1, dropouts=3)
    (6, 5, 6)
    """
    sites = clients if roster is None else roster
    value = max(clients - colluders - dropouts, (sites + colluders) // 2 + 1)
    if value > clients or sites < clients or not 0 <= dropouts < clients - colluders:
        raise ValueError(f"Secure aggregation with K = {clients} sites a round out of a roster of N = {sites}, "
                         f"t = {colluders}, d = {dropouts}: the threshold max(K − t − d, ⌊(N + t)/2⌋ + 1) = {value} "
                         f"exceeds K (or N < K, or t + d ≥ K). Ask more sites a round (distributed-clients) or "
                         f"assume fewer colluders.")
    return value


def key_context(purpose: str, instance: str, content: bytes = b"") -> bytes:
    """The key-derivation context of ``purpose`` in ``instance`` and the round's ``content`` (the sites' and the
    server's)."""
    return digest("skfedriem secure aggregation", purpose, instance, content)


def masks_context(instance: str, content: bytes, active: list[str], dropped: list[str]) -> bytes:
    """The pairwise masks' key-derivation context: the round's ``content`` and its lists of survivors and dropped
    sites (sorted), so that releases sized for different lists never cancel."""
    lists = json.dumps([sorted(map(str, active)), sorted(map(str, dropped))])
    return key_context("masks", instance, digest(content, lists))


@dataclass(frozen=True)
class Binding:
    """Everything a round key is signed for: run, round, instance, K, t, modulus and length.

    Parameters
    ----------
    run : str
        The Flower run, as the site's own metadata names it.
    round : str
        The round (the message's group), as the site's metadata names it.
    instance : str
        The protocol instance (the server draws a fresh one for every batch of rounds).
    clients, colluders : int
        K and t.
    bits : int
        The modulus is 2^bits.
    length : int
        The release's length.
    roster : int, optional
        N, the sites of the roster the site holds (default K): the threshold counts them.
    dropouts : int, default=0
        d, the dropout allowance.
    """

    run: str
    round: str
    instance: str
    clients: int
    colluders: int
    bits: int
    length: int
    roster: int | None = None
    dropouts: int = 0

    @property
    def threshold(self) -> int:
        """T (:func:`threshold`)."""
        return threshold(self.clients, self.colluders, self.roster, self.dropouts)

    def payload(self, site: str, *parts: bytes | str) -> bytes:
        """The bytes ``site`` signs: the binding, the site's name and ``parts``."""
        return digest("skfedriem secure aggregation", self.run, self.round, self.instance,
                      str(self.clients), str(self.colluders), str(self.bits), str(self.length),
                      str(self.clients if self.roster is None else self.roster), f"dropouts {self.dropouts}", site,
                      *parts)

    def context(self, purpose: str, content: bytes = b"") -> bytes:
        """The key-derivation context of ``purpose`` in this instance (:func:`key_context`)."""
        return key_context(purpose, self.instance, content)
