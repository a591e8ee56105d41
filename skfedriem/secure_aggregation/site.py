"""A site's side of one secure-aggregation instance, and every check it makes before revealing anything.

The stages, each a method, in order (a call out of order is refused; a refused call leaves the
session in the stage it was, so that the legitimate message can follow, and each stage that
reveals something runs once):

1. :meth:`SiteSession.advertise`: two fresh X25519 key pairs (one to
   encrypt shares, one for pairwise masks), signed with the site's own key
   over the instance's :class:`~skfedriem.secure_aggregation.session.Binding`.
2. :meth:`SiteSession.share`: the server relays every site's signed keys.
   The site checks each signature against the federation's roster (never a
   key the server relays), that it is listed with its own keys, that no key
   repeats, that every masking key agrees on a secret (no low-order point),
   and that there are at least T and at most K sites; then it Shamir-shares
   a fresh self-mask seed and its mask key among them and encrypts each
   peer's shares to that peer.
3. :meth:`SiteSession.receive`: the shares addressed to the site, from at
   least T − 1 peers, every one signed in stage 2, each authenticated as
   from that peer to this site.
4. :meth:`SiteSession.sign_lists`: the round's survivors (whose self-masks
   the server will remove) and dropped sites (whose pairwise masks it will
   remove), checked (:meth:`SiteSession.check_unmask`: no site in both, at
   least T survivors, this site among them, only sites it holds shares of),
   kept and signed; a deployed site runs it before it charges or computes
   anything.
5. :meth:`SiteSession.masked`: the release, masked: release + self-mask +
   Σ ± pairwise masks, modulo 2^bits, the pairwise keys derived with the
   round's content.
6. :meth:`SiteSession.sign_final` (a round that tolerates sites dropping
   out *during* it: a dropout allowance): the round's final lists, once the
   server knows whose masked releases arrived: the survivors among those the
   site masked with, at least T, this site among them, the others dropped;
   kept and signed.
7. :meth:`SiteSession.unmask`: for the lists it signed (the final ones, when
   it signed them), the site's share of each survivor's self-mask seed and
   of each dropped site's mask key. When any site is dropped, or final lists
   were signed, only with the signatures of at least T survivors over the
   same lists (Bonawitz et al.'s consistency check): the honest sites that
   reveal mask-key shares then all hold one view of who dropped, so a server
   cannot drop a site's partners to some sites and keep it alive to others.
   With no site dropped, only self-mask shares are revealed, and a release's
   pairwise masks cancel only in a sum with its partners'.

Every refusal is a :class:`~skfedriem.exceptions.InvalidInstructionsError`
naming the check; a deployed site answers it with its generic refusal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ..exceptions import InvalidInstructionsError
from . import shamir
from .crypto import agree, decrypt, encrypt, fresh_seed, mask, public_bytes, sign, verify
from .session import Binding, masks_context

__all__ = ["SiteIdentity", "SiteSession", "SignedKeys"]


@dataclass(frozen=True)
class SignedKeys:
    """A site's public round keys and its signature over them.

    Parameters
    ----------
    cipher : bytes
        The X25519 public key peers encrypt its shares to.
    masking : bytes
        The X25519 public key of its pairwise masks.
    signature : bytes
        By the site's own key, over the binding, its name and both keys.
    """

    cipher: bytes
    masking: bytes
    signature: bytes


@dataclass(frozen=True)
class SiteIdentity:
    """Who a site is in the federation: its name, its signing key and the roster of every site's public key.

    Parameters
    ----------
    name : str
    signing_key : EC or Ed25519 private key
        The site's own (its SuperNode's) key.
    roster : dict of str to public key
        The federation's sites, as the operator gave them to this site.
    """

    name: str
    signing_key: object
    roster: dict

    def __post_init__(self) -> None:
        own = self.roster.get(self.name)
        if own is None:
            raise ValueError(f"Site {self.name!r} is not in the federation's roster ({sorted(self.roster)}).")
        der = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        if own.public_bytes(*der) != self.signing_key.public_key().public_bytes(*der):
            raise ValueError(f"Site {self.name!r}'s signing key is not the one the roster lists for it.")


def _refuse(text: str) -> None:
    raise InvalidInstructionsError(f"Secure aggregation refused: {text}")


def _lists(active: list[str], dropped: list[str]) -> tuple[list[str], list[str]]:
    return sorted({str(s) for s in active}), sorted({str(s) for s in dropped})


def sign_keys(identity: SiteIdentity, binding: Binding, cipher: bytes, masking: bytes) -> SignedKeys:
    """``cipher`` and ``masking`` signed by ``identity`` for ``binding``."""
    return SignedKeys(cipher, masking, sign(identity.signing_key, binding.payload(identity.name, cipher, masking)))


@dataclass
class SiteSession:
    """One site's state in one instance (its secrets never leave it but as the shares the protocol sends).

    Parameters
    ----------
    identity : SiteIdentity
    binding : Binding
        Built by the site from what it saw itself (the run in the messages' metadata, the round, the instance,
        and the encoding it checked).

    Attributes
    ----------
    stage : str
        The last stage run.
    """

    identity: SiteIdentity
    binding: Binding
    stage: str = field(default="new", init=False)
    _cipher: X25519PrivateKey = field(default_factory=X25519PrivateKey.generate, init=False, repr=False)
    _masking: X25519PrivateKey = field(default_factory=X25519PrivateKey.generate, init=False, repr=False)
    _self_seed: bytes = field(default_factory=fresh_seed, init=False, repr=False)
    _keys: dict = field(default_factory=dict, init=False, repr=False)  # the signed keys of stage 2, by site
    _shares: dict = field(default_factory=dict, init=False, repr=False)  # peer -> (self-mask share, mask-key share)
    _lists: tuple = field(default=((), ()), init=False, repr=False)  # the survivors and dropped sites it signed
    _final: tuple | None = field(default=None, init=False, repr=False)  # the final lists it signed, if any

    @property
    def name(self) -> str:
        return self.identity.name

    def _expect(self, expected: str, to: str) -> None:
        """Refuse a ``to`` stage unless the last stage run is ``expected``. A stage moves :attr:`stage` on only
        once its checks passed and it is about to reveal something: a refused message leaves the session where
        it was, for the legitimate message to follow, and what was revealed is never revealed twice."""
        if self.stage != expected:
            _refuse(f"a '{to}' message in stage '{self.stage}' (expected after '{expected}'): each stage once, "
                    "in order.")

    def advertise(self) -> SignedKeys:
        """Stage 1: the site's fresh public round keys, signed for this instance.

        Returns
        -------
        SignedKeys
        """
        self._expect("new", "advertised")
        self.stage = "advertised"
        return sign_keys(self.identity, self.binding, public_bytes(self._cipher), public_bytes(self._masking))

    def share(self, keys: dict[str, SignedKeys]) -> dict[str, bytes]:
        """Stage 2: check every site's signed keys; each peer's encrypted shares of this site's two secrets.

        Parameters
        ----------
        keys : dict of str to SignedKeys
            Every site of the instance, as the server relays them.

        Returns
        -------
        dict of str to bytes
            The ciphertext for each peer (this site keeps its own share).
        """
        self._expect("advertised", "shared")
        self._check_keys(keys)
        self.stage = "shared"
        self._keys = dict(keys)
        order = sorted(keys)
        t = self.binding.threshold
        masking_key = self._masking.private_bytes_raw()
        pairs = zip(shamir.split(self._self_seed, t, len(order)), shamir.split(masking_key, t, len(order)))
        out = {}
        for peer, (self_share, key_share) in zip(order, pairs):
            if peer == self.name:
                self._shares[peer] = (self_share, key_share)
                continue
            secret = agree(self._cipher, keys[peer].cipher, self.binding.context("shares"))
            out[peer] = encrypt(secret, self_share + key_share, self.binding.payload(self.name, "to", peer))
        return out

    def _check_keys(self, keys: dict[str, SignedKeys]) -> None:
        b, roster = self.binding, self.identity.roster
        if not b.threshold <= len(keys) <= b.clients:
            _refuse(f"{len(keys)} sites' keys; the instance needs between T = {b.threshold} and K = {b.clients}.")
        unknown = sorted(set(keys) - set(roster))
        if unknown:
            _refuse(f"sites {unknown} are not in the federation's roster.")
        mine = keys.get(self.name)
        if mine is None or (mine.cipher, mine.masking) != (public_bytes(self._cipher), public_bytes(self._masking)):
            _refuse("this site's own keys are missing or replaced in the server's list.")
        publics = [k.cipher for k in keys.values()] + [k.masking for k in keys.values()]
        if len(set(publics)) != len(publics):
            _refuse("a round key appears twice in the server's list.")
        self._check_signatures(keys)
        self._check_agreement(keys)

    def _check_agreement(self, keys: dict[str, SignedKeys]) -> None:
        """Every peer's masking key agrees on a secret with this site's (a low-order key would fail only when
        masking, after the charge)."""
        for peer, signed in keys.items():
            if peer != self.name:
                try:
                    agree(self._masking, signed.masking, b"check")
                except ValueError:
                    _refuse(f"the masking key of site {peer!r} agrees on no secret.")

    def _check_signatures(self, keys: dict[str, SignedKeys]) -> None:
        """Every site's keys signed by its roster key over this instance's binding (unsigned, swapped or replayed
        keys are refused)."""
        for site, signed in keys.items():
            if not verify(self.identity.roster[site], signed.signature,
                          self.binding.payload(site, signed.cipher, signed.masking)):
                _refuse(f"the keys of site {site!r} are not signed by its roster key for this run, round and "
                        "instance (unsigned, swapped or replayed).")

    def receive(self, ciphertexts: dict[str, bytes]) -> None:
        """Stage 3: the shares peers sent this site, each authenticated; at least T sites with this one.

        Parameters
        ----------
        ciphertexts : dict of str to bytes
            By sender.
        """
        self._expect("shared", "received")
        strangers = sorted(set(ciphertexts) - set(self._keys) | ({self.name} & set(ciphertexts)))
        if strangers:
            _refuse(f"shares from {strangers}, which are not this instance's peers.")
        if len(ciphertexts) + 1 < self.binding.threshold:
            _refuse(f"shares from {len(ciphertexts)} peers: with this site fewer than T = {self.binding.threshold}.")
        received = {}
        for peer, ciphertext in ciphertexts.items():
            secret = agree(self._cipher, self._keys[peer].cipher, self.binding.context("shares"))
            plain = decrypt(secret, ciphertext, self.binding.payload(peer, "to", self.name))
            if plain is None or len(plain) != 2 * shamir.SHARE_BYTES:
                _refuse(f"the shares from {peer!r} do not decrypt as that peer's to this site.")
            received[peer] = (plain[:shamir.SHARE_BYTES], plain[shamir.SHARE_BYTES:])
        self._shares.update(received)  # all or none: a refused message keeps none of its shares
        self.stage = "received"

    def sign_lists(self, active: list[str], dropped: list[str]) -> bytes:
        """Stage 4: the round's lists checked (:meth:`check_unmask`), kept, and signed by this site.

        Parameters
        ----------
        active, dropped : list of str
            The survivors and the dropped sites, as the server sent them to this site.

        Returns
        -------
        bytes
            The site's signature over them (what the other sites' consistency check counts).
        """
        self._expect("received", "signed")
        self.check_unmask(active, dropped)
        self.stage = "signed"
        self._lists = _lists(active, dropped)
        return sign(self.identity.signing_key, self._lists_payload(self.name))

    def _lists_payload(self, site: str) -> bytes:
        if self._final is not None:
            return self.binding.payload(site, "final survivors and dropped", json.dumps(self._final))
        return self.binding.payload(site, "survivors and dropped", json.dumps(self._lists))

    @property
    def masked_with(self) -> tuple[list[str], list[str]]:
        """The lists this site signed before masking (its pairwise masks' key derivation reads them)."""
        return list(self._lists[0]), list(self._lists[1])

    def sign_final(self, active: list[str], dropped: list[str]) -> bytes:
        """Stage 6 (a round tolerating dropouts during it): the final lists checked, kept and signed.

        Parameters
        ----------
        active, dropped : list of str
            The survivors whose masked releases arrived, and every other site of the lists signed before masking.

        Returns
        -------
        bytes
            The site's signature over them.
        """
        self._expect("masked", "finally signed")
        self.check_unmask(active, dropped)
        final = _lists(active, dropped)
        signed_active, signed_dropped = self._lists
        if not set(final[0]) <= set(signed_active) or set(final[0]) | set(final[1]) != set(signed_active) | set(
                signed_dropped):
            _refuse("the final lists are not the signed survivors, less some that dropped out since.")
        self.stage = "finally signed"
        self._final = final
        return sign(self.identity.signing_key, self._lists_payload(self.name))

    def check_unmask(self, active: list[str], dropped: list[str]) -> None:
        """Refuse survivor and dropped lists :meth:`unmask` would refuse (nothing changes).

        Parameters
        ----------
        active, dropped : list of str
        """
        self._check_disjoint(active, dropped)
        self._check_survivors(active)
        if self.name not in active:
            _refuse("this site is not among the survivors of a round it is asked to mask its release for.")
        unknown = sorted((set(active) | set(dropped)) - set(self._shares))
        if unknown:
            _refuse(f"sites {unknown} whose shares this site does not hold.")

    @staticmethod
    def _check_disjoint(active: list[str], dropped: list[str]) -> None:
        """Never both shares of one site: a site listed as survivor and as dropped is refused."""
        both = sorted(set(active) & set(dropped))
        if both:
            _refuse(f"sites {both} are listed both as survivors and as dropped.")

    def _check_survivors(self, active: list[str]) -> None:
        """No unmasking with fewer than T (≥ K − t − d) survivors: their sum would be too few sites' releases."""
        b = self.binding
        if len(set(active)) < b.threshold:
            _refuse(f"{len(set(active))} survivors, fewer than T = {b.threshold} (at least K − t − d = "
                    f"{b.clients - b.colluders - b.dropouts}).")

    def masked(self, release: np.ndarray, content: bytes) -> np.ndarray:
        """Stage 5: the release masked: + self-mask + Σ_{peers v} ± mask(s_uv), modulo 2^bits.

        Parameters
        ----------
        release : ndarray of int64, shape (length,)
            In [0, 2^bits).
        content : bytes
            A digest of what the round computes, as this site received it: it
            enters the pairwise keys with the lists this site signed
            (:func:`~skfedriem.secure_aggregation.session.masks_context`), so
            that the masks of two sites sent different rounds, or different
            lists (for which they sized their noise shares), do not cancel.

        Returns
        -------
        ndarray of int64, shape (length,)
        """
        b = self.binding
        release = np.asarray(release, dtype=np.int64)
        if release.shape != (b.length,):
            raise ValueError(f"The release has shape {release.shape}; the instance's length is {b.length}.")
        self._expect("signed", "masked")
        self.stage = "masked"
        total = np.mod(release + mask(self._self_seed, b.length, b.bits), 1 << b.bits)
        for peer in self._shares:
            if peer == self.name:
                continue
            pairwise = mask(agree(self._masking, self._keys[peer].masking, masks_context(b.instance, content,
                                                                                        *self._lists)),
                            b.length, b.bits)
            total = np.mod(total + pairwise if self.name < peer else total - pairwise, 1 << b.bits)
        return total

    def unmask(self, active: list[str], dropped: list[str],
               signatures: dict[str, bytes] | None = None) -> tuple[dict[str, bytes], dict[str, bytes]]:
        """Stage 6 (once): this site's shares of the survivors' self-mask seeds and of the dropped sites' mask keys.

        Parameters
        ----------
        active : list of str
            The sites whose masked releases the server sums.
        dropped : list of str
            Sites that shared keys but whose releases it does not sum.
        signatures : dict of str to bytes, optional
            Survivors' signatures over these lists (:meth:`sign_lists`), by site: at least T are needed when any
            site is dropped.

        Returns
        -------
        self_mask_shares : dict of str to bytes
            For each site of ``active``, this site's share of its self-mask seed.
        mask_key_shares : dict of str to bytes
            For each site of ``dropped``, this site's share of its mask key.
        """
        self._expect("masked" if self._final is None else "finally signed", "unmasked")
        if self.binding.dropouts and self._final is None:  # what the site reveals follows the final lists alone
            _refuse("a round with a dropout allowance unmasks only against the final lists this site signed.")
        if _lists(active, dropped) != (self._lists if self._final is None else self._final):
            _refuse("the survivors and dropped sites differ from the lists this site signed.")
        if dropped or self._final is not None:
            self._check_consistency(active, signatures or {})
        self.stage = "unmasked"
        return ({site: self._shares[site][0] for site in set(active)},
                {site: self._shares[site][1] for site in set(dropped)})

    def _check_consistency(self, active: list[str], signatures: dict[str, bytes]) -> None:
        """Mask-key shares only when at least T survivors signed the very lists this site signed."""
        roster = self.identity.roster
        signers = {site for site, signature in signatures.items() if site in set(active) and site in roster
                   and verify(roster[site], bytes(signature), self._lists_payload(site))}
        if len(signers) < self.binding.threshold:
            _refuse(f"{len(signers)} survivors signed these lists, fewer than T = {self.binding.threshold}: the "
                    "sites may have been shown different survivors.")
