"""The server's side of one secure-aggregation instance: it relays, sums and removes masks; it learns the sum.

:class:`ServerSession` keeps the instance's signed keys and routes, names
the survivors and the dropped sites of its round (:meth:`ServerSession.lists`),
and turns the masked releases and the shares revealed with them into the
survivors' releases *still pairwise-masked*: each survivor's masked release
minus its self-mask and minus its pairwise masks with the dropped sites.
Those entries sum, modulo 2^bits, to the sum of the survivors' releases
(their pairwise masks cancel), while each alone is still masked by its
pairwise masks with the other survivors: the engine's server sums them
(:meth:`~skfedriem.federated.FederatedTrainer.serve`) exactly as it sums the
releases of an in-process federation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from . import shamir
from .crypto import agree, mask
from .session import masks_context, threshold
from .site import SignedKeys

__all__ = ["RoundAbandoned", "ServerSession"]


class RoundAbandoned(RuntimeError):
    """The instance cannot deliver its sum (too few sites, or a survivor's release missing): the round is discarded."""


@dataclass
class ServerSession:
    """What the server holds of one instance.

    Parameters
    ----------
    instance : str
    clients, colluders : int
        K and t (the threshold follows: :func:`~skfedriem.secure_aggregation.session.threshold`).
    bits : int
        The modulus is 2^bits.
    length : int
        The releases' length.
    roster : int, optional
        N, the sites of the roster, as the sites report it (default K).
    dropouts : int, default=0
        d, the dropout allowance (the threshold counts it).

    Attributes
    ----------
    keys : dict of str to SignedKeys
        Each site's signed round keys.
    routes : dict of str to dict of str to bytes
        The shares forwarded to each site, by sender.
    inputs : dict of str to ndarray
        The survivors' masked releases.
    """

    instance: str
    clients: int
    colluders: int
    bits: int
    length: int
    roster: int | None = None
    dropouts: int = 0
    keys: dict = field(default_factory=dict, init=False)  # stage 1: site -> SignedKeys
    routes: dict = field(default_factory=dict, init=False)  # stage 2: recipient -> {sender: ciphertext}
    inputs: dict = field(default_factory=dict, init=False)  # the round: survivor -> masked release

    @property
    def threshold(self) -> int:
        """T (:func:`~skfedriem.secure_aggregation.session.threshold`)."""
        return threshold(self.clients, self.colluders, self.roster, self.dropouts)

    def _enough(self, sites, stage: str) -> None:
        if len(sites) < self.threshold:
            raise RoundAbandoned(f"{len(sites)} sites answered the {stage} stage, fewer than T = {self.threshold}: "
                              f"the round is abandoned ({sorted(sites)}).")

    def advertised(self, keys: dict[str, SignedKeys]) -> dict[str, SignedKeys]:
        """Stage 1's answers; what stage 2 relays to every one of them."""
        self._enough(keys, "keys")
        self.keys = dict(keys)
        return self.keys

    def shared(self, ciphertexts: dict[str, dict[str, bytes]]) -> dict[str, dict[str, bytes]]:
        """Stage 2's answers (by sender, by recipient); what stage 3 forwards to each site that answered."""
        senders = sorted(ciphertexts)
        self._enough(senders, "shares")
        self.routes = {site: {sender: ciphertexts[sender][site] for sender in senders
                              if sender != site and site in ciphertexts[sender]} for site in senders}
        return self.routes

    @property
    def participants(self) -> list[str]:
        """The sites that shared their secrets in stage 2 (sorted)."""
        return sorted(self.routes)

    def lists(self, reachable) -> tuple[list[str], list[str]]:
        """The round's survivors (the participants it reaches) and dropped sites (the other participants).

        Raises
        ------
        RoundAbandoned
            Fewer than T survivors.
        """
        active = [site for site in self.participants if site in set(reachable)]
        self._enough(active, "round")
        return active, [site for site in self.participants if site not in set(active)]

    def unmasked(self, masked: dict[str, np.ndarray], shares: dict[str, tuple[dict[str, bytes], dict[str, bytes]]],
                 active: list[str], dropped: list[str], content: bytes,
                 masked_with: tuple[list[str], list[str]] | None = None) -> dict[str, np.ndarray]:
        """Each survivor's release less its self-mask and its masks with the dropped sites.

        Parameters
        ----------
        masked : dict of str to ndarray
            The survivors' masked releases.
        shares : dict of str to (dict, dict)
            By responder: its self-mask shares and its mask-key shares, by site.
        active, dropped : list of str
            The lists the round was sent with.
        content : bytes
            The round's content digest (the pairwise keys' derivation).
        masked_with : (list of str, list of str), optional
            The lists the sites signed before masking, which the pairwise keys' derivation reads (default
            ``active`` and ``dropped``; a round whose final lists left out sites that dropped out during it
            passes the first lists).

        Raises
        ------
        RoundAbandoned
            A survivor's masked release is missing (its pairwise masks cannot be removed), or fewer than T shares.
        """
        missing = sorted(set(active) - set(masked))
        if missing:
            raise RoundAbandoned(f"survivors {missing} sent no masked release: their pairwise masks cannot be "
                                 "removed (each site unmasks once per instance); the round is abandoned.")
        self.inputs = {site: np.asarray(masked[site], dtype=np.int64) for site in active}
        points = {site: i + 1 for i, site in enumerate(sorted(self.keys))}
        modulus = 1 << self.bits
        out = {}
        for site in active:
            seed = self._recover(site, {r: pair[0] for r, pair in shares.items()}, points)
            out[site] = np.mod(self.inputs[site] - mask(seed, self.length, self.bits), modulus)
        for gone in dropped:
            key = self._recover(gone, {r: pair[1] for r, pair in shares.items()}, points)
            try:
                private = X25519PrivateKey.from_private_bytes(key)
            except ValueError:
                raise RoundAbandoned(f"site {gone!r}'s mask key does not rebuild from its shares.") from None
            self._remove_pairwise(out, gone, private, masks_context(self.instance, content,
                                                                    *(masked_with or (active, dropped))))
        return out

    def _remove_pairwise(self, entries: dict[str, np.ndarray], gone: str, key: X25519PrivateKey,
                         context: bytes) -> None:
        """Take the dropped site's pairwise masks (from its recovered key) out of every survivor's entry."""
        for site, entry in entries.items():
            if gone not in self.routes.get(site, {}):  # never paired with it
                continue
            pairwise = mask(agree(key, self.keys[site].masking, context), self.length, self.bits)
            # the site added +mask when its name sorts first, −mask otherwise: take it back
            entries[site] = np.mod(entry - pairwise if site < gone else entry + pairwise, 1 << self.bits)

    def _recover(self, target: str, shares: dict[str, dict[str, bytes]], points: dict[str, int]) -> bytes:
        held = {points[responder]: answer[target] for responder, answer in shares.items()
                if target in answer and responder in points}
        if len(held) < self.threshold:
            raise RoundAbandoned(f"{len(held)} shares of site {target!r}'s secret, fewer than T = {self.threshold}.")
        try:
            return shamir.combine(held, self.threshold)
        except ValueError as error:  # a malformed share (a colluder's): nothing to unmask with
            raise RoundAbandoned(f"the shares of site {target!r}'s secret do not combine: {error}") from None
