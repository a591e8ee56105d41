"""Secure aggregation between sites and a server in this process: the sum is exact, dropouts are recovered, and a
malicious server is refused at every check — each test also shows that the check is what stops the attack."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from skfedriem.exceptions import InvalidInstructionsError
from skfedriem.secure_aggregation import Binding, RoundAbandoned, ServerSession, SiteIdentity, SiteSession, threshold
from skfedriem.secure_aggregation import shamir
from skfedriem.secure_aggregation.crypto import agree, decrypt, digest, encrypt, mask, public_bytes, sign
from skfedriem.secure_aggregation.session import key_context, masks_context
from skfedriem.secure_aggregation.site import SignedKeys

BITS, LENGTH = 20, 16
NAMES = [f"site-{i}" for i in range(5)]
KEYS = {name: ec.generate_private_key(ec.SECP384R1()) for name in NAMES}
ROSTER = {name: key.public_key() for name, key in KEYS.items()}
TARGET = "site-0"


def binding(instance: str = "a1", round_: str = "3", clients: int = 5, colluders: int = 1) -> Binding:
    return Binding("7", round_, instance, clients, colluders, BITS, LENGTH)


def releases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {name: rng.integers(0, 1 << BITS, LENGTH) for name in NAMES}


class Federation:
    """Five honest sites and an honest server, run stage by stage (a test plays the server's part where it lies)."""

    content = b"theta and instructions"

    def __init__(self, b: Binding | None = None):
        self.binding = b or binding()
        self.sites = {n: SiteSession(SiteIdentity(n, KEYS[n], ROSTER), self.binding) for n in NAMES}
        self.server = ServerSession(self.binding.instance, self.binding.clients, self.binding.colluders, BITS, LENGTH)
        self.x = releases()
        self.signatures: dict[str, bytes] = {}

    def keys(self) -> dict[str, SignedKeys]:
        return self.server.advertised({n: s.advertise() for n, s in self.sites.items()})

    def set_up(self) -> None:
        """Keys and shares exchanged, every site holding its peers' shares."""
        relay = self.keys()
        routes = self.server.shared({n: s.share(relay) for n, s in self.sites.items()})
        for n in routes:
            self.sites[n].receive(routes[n])

    def answer(self, site: str, active: list[str], dropped: list[str], content: bytes | None = None) -> np.ndarray:
        """One site's round: it signs the lists it was sent and masks its release."""
        session = self.sites[site]
        self.signatures[site] = session.sign_lists(active, dropped)
        return session.masked(self.x[site], self.content if content is None else content)

    def reveal(self, site: str, active: list[str], dropped: list[str], signatures=None) -> tuple:
        """Its unmasking shares (with every signature collected so far, unless told which)."""
        return self.sites[site].unmask(active, dropped, self.signatures if signatures is None else signatures)

    def run(self, reachable=NAMES, fail=()) -> dict[str, np.ndarray]:
        self.set_up()
        active, dropped = self.server.lists(reachable)
        masked = {n: self.answer(n, active, dropped) for n in active if n not in fail}
        shares = {n: self.reveal(n, active, dropped) for n in masked}
        return self.server.unmasked(masked, shares, active, dropped, self.content)


def modular_sum(arrays) -> np.ndarray:
    return np.mod(np.sum(list(arrays), axis=0), 1 << BITS)


def target_context(session: SiteSession, content: bytes) -> bytes:
    """The key-derivation context of a site's pairwise masks: the round's content and the lists the server showed
    it (the server knows both)."""
    return masks_context(session.binding.instance, content, *session._lists)


def unmask_target(fed: Federation, y: np.ndarray, self_seed: bytes, peer_keys: dict[str, bytes]) -> np.ndarray:
    """TARGET's release from its masked release, its self-mask seed and every peer's mask key (one side of each
    pairwise mask is enough: X25519 agrees from either)."""
    y = y - mask(self_seed, LENGTH, BITS)
    context = target_context(fed.sites[TARGET], fed.content)
    for peer, key in peer_keys.items():
        pairwise = mask(agree(X25519PrivateKey.from_private_bytes(key), fed.server.keys[TARGET].masking, context),
                        LENGTH, BITS)
        y = y - pairwise if TARGET < peer else y + pairwise
    return np.mod(y, 1 << BITS)


def combined(fed: Federation, shares: dict[str, bytes]) -> bytes | None:
    """The secret behind ``shares`` (by responder), or None below the threshold."""
    points = {n: i + 1 for i, n in enumerate(NAMES)}
    if len(shares) < fed.binding.threshold:
        return None
    return shamir.combine({points[r]: share for r, share in shares.items()}, fed.binding.threshold)


# ---------------------------------------------------------------- an honest run
def test_the_server_learns_the_exact_sum_and_no_entry_is_a_release():
    fed = Federation()
    entries = fed.run()
    assert sorted(entries) == NAMES
    assert np.array_equal(modular_sum(entries.values()), modular_sum(fed.x.values()))
    for n in NAMES:  # each entry is still pairwise-masked: it agrees with its release by chance only
        assert np.mean(entries[n] == fed.x[n]) < 0.2


def test_a_site_gone_when_the_round_starts_has_its_masks_removed_and_the_sum_covers_the_survivors():
    fed = Federation()
    entries = fed.run(reachable=[n for n in NAMES if n != "site-2"])
    survivors = [n for n in NAMES if n != "site-2"]
    assert sorted(entries) == survivors
    assert np.array_equal(modular_sum(entries.values()), modular_sum(fed.x[n] for n in survivors))


def test_a_survivor_whose_release_does_not_arrive_abandons_the_round():
    fed = Federation()
    with pytest.raises(RoundAbandoned, match="site-2.*sent no masked release"):
        fed.run(fail={"site-2"})


def test_a_round_with_fewer_reachable_sites_than_the_threshold_is_abandoned():
    fed = Federation()
    with pytest.raises(RoundAbandoned, match="fewer than T = 4"):
        fed.run(reachable=NAMES[:3])


def test_a_deviating_server_can_leave_t_minus_t_honest_releases_in_a_sum_as_the_docs_say():
    """The documented limit of ε_central (docs: deployment, "Two ledgers"): at K = N = 5, t = 1 (T = 4), a server
    that lists an honest site as dropped and colludes with another unmasks a sum of T − t = 3 honest releases, not
    K − t = 4; and no fewer."""
    fed = Federation()
    entries = fed.run(reachable=[n for n in NAMES if n != "site-4"])  # site-4 is honest and alive: "dropped"
    colluder = "site-3"
    honest_sum = np.mod(modular_sum(entries.values()) - fed.x[colluder], 1 << BITS)
    assert np.array_equal(honest_sum, modular_sum(fed.x[n] for n in ("site-0", "site-1", "site-2")))
    assert fed.binding.threshold - fed.binding.colluders == 3
    with pytest.raises(RoundAbandoned, match="fewer than T = 4"):  # one more "dropped": nothing to unmask
        Federation().run(reachable=NAMES[:3])


def test_sites_sent_different_rounds_have_masks_that_do_not_cancel():
    """The round's content enters the pairwise keys: a server that sends one site another θ gets no usable sum."""
    fed = Federation()
    fed.set_up()
    masked = {n: fed.answer(n, NAMES, [], b"another theta" if n == "site-3" else None) for n in NAMES}
    entries = fed.server.unmasked(masked, {n: fed.reveal(n, NAMES, []) for n in NAMES}, NAMES, [], fed.content)
    assert np.mean(modular_sum(entries.values()) == modular_sum(fed.x.values())) < 0.2


def test_the_threshold_keeps_two_views_of_one_site_from_reaching_both_secrets():
    """2T > N + t: the shares the honest sites reveal of one kind and the t colluders' cannot reach T twice."""
    for clients in range(1, 40):
        for colluders in range(clients):
            for roster in range(clients, clients + 6):
                try:
                    t_ = threshold(clients, colluders, roster)
                except ValueError:
                    assert max(clients - colluders, (roster + colluders) // 2 + 1) > clients
                    continue
                assert clients - colluders <= t_ <= clients
                assert 2 * t_ > roster + colluders or clients == 1


def test_masks_come_from_a_full_strength_prg():
    """Two seeds equal in their low 32 bits (Flower's fold into numpy's Mersenne Twister made their masks equal)
    give unrelated masks; one seed gives the same mask every time."""
    a = bytes(28) + (5).to_bytes(4, "big")
    b = bytes([1]) + bytes(27) + (5).to_bytes(4, "big")
    assert np.array_equal(mask(a, 64, 40), mask(a, 64, 40))
    assert np.mean(mask(a, 64, 40) == mask(b, 64, 40)) == 0.0
    values = mask(bytes(range(32)), 40000, 8)
    assert values.min() >= 0 and values.max() < 256 and abs(values.mean() - 127.5) < 1.5


def test_fewer_shares_than_the_threshold_recover_nothing():
    secret = bytes(range(32))
    shares = dict(enumerate(shamir.split(secret, 3, 5), start=1))
    assert shamir.combine({i: shares[i] for i in (1, 3, 5)}, 3) == secret
    with pytest.raises(ValueError):
        shamir.combine({i: shares[i] for i in (1, 2)}, 3)
    assert shamir.combine({i: shares[i] for i in (1, 2)}, 2) != secret


# ---------------------------------------------------------------- a malicious server, refused; and the variant
def _lists_target_both_ways(fed: Federation) -> np.ndarray | None:
    """The target is told everyone survives; every other site that the target dropped: both its secrets."""
    fed.set_up()
    y = fed.answer(TARGET, NAMES, [])
    fed.reveal(TARGET, NAMES, [])
    others = [n for n in NAMES if n != TARGET]
    for n in others:
        fed.answer(n, NAMES, [TARGET])
    answers = {n: fed.reveal(n, NAMES, [TARGET]) for n in others}  # four signed the same lists: T = 4
    seed = combined(fed, {n: a[0][TARGET] for n, a in answers.items()})
    key = combined(fed, {n: a[1][TARGET] for n, a in answers.items()})
    if seed is None or key is None:
        return None
    own = X25519PrivateKey.from_private_bytes(key)  # the target's mask key: every pairwise mask from its side
    y = y - mask(seed, LENGTH, BITS)
    for peer in others:
        pairwise = mask(agree(own, fed.server.keys[peer].masking, target_context(fed.sites[TARGET], fed.content)),
                        LENGTH, BITS)
        y = y - pairwise if TARGET < peer else y + pairwise
    return np.mod(y, 1 << BITS)


def test_a_site_listed_both_as_survivor_and_dropped_is_refused():
    with pytest.raises(InvalidInstructionsError, match="both as survivors and as dropped"):
        _lists_target_both_ways(Federation())


def test_without_the_disjoint_check_the_server_rebuilds_one_sites_release(monkeypatch):
    monkeypatch.setattr(SiteSession, "_check_disjoint", staticmethod(lambda active, dropped: None))
    fed = Federation()
    assert np.array_equal(_lists_target_both_ways(fed), fed.x[TARGET])


COLLUDER = "site-4"
HONEST = ["site-1", "site-2", "site-3"]


def _sums_the_target_with_a_colluder(fed: Federation) -> np.ndarray | None:
    """Survivor lists of two or three: the sum of the target's and the colluder's releases, less the colluder's.
    The colluder signs whatever the server asks."""
    fed.set_up()
    views = {TARGET: ([TARGET, COLLUDER], HONEST), **{h: ([h, TARGET, COLLUDER], [o for o in HONEST if o != h])
                                                      for h in HONEST}}
    y = fed.answer(TARGET, *views[TARGET])
    for h in HONEST:
        fed.answer(h, *views[h])
    answers = {}
    for site, (active, dropped) in views.items():
        colluder = sign(KEYS[COLLUDER], fed.sites[site]._lists_payload(COLLUDER))
        answers[site] = fed.reveal(site, active, dropped, {site: fed.signatures[site], COLLUDER: colluder})
    held = fed.sites[COLLUDER]._shares  # the colluder hands over the shares it holds
    seed = combined(fed, {**{s: a[0][TARGET] for s, a in answers.items()}, COLLUDER: held[TARGET][0]})
    peer_keys = {h: combined(fed, {**{s: answers[s][1][h] for s in views if h in answers[s][1]},
                                   COLLUDER: held[h][1]}) for h in HONEST}
    peer_keys[COLLUDER] = fed.sites[COLLUDER]._masking.private_bytes_raw()
    if seed is None or None in peer_keys.values():
        return None
    return unmask_target(fed, y, seed, peer_keys)


def test_unmasking_with_fewer_survivors_than_the_threshold_is_refused():
    with pytest.raises(InvalidInstructionsError, match="2 survivors, fewer than T = 4"):
        _sums_the_target_with_a_colluder(Federation())


def test_without_the_survivor_check_only_the_consistency_check_stops_the_server(monkeypatch):
    monkeypatch.setattr(SiteSession, "_check_survivors", lambda self, active: None)
    with pytest.raises(InvalidInstructionsError, match="survivors signed these lists, fewer than T"):
        _sums_the_target_with_a_colluder(Federation())
    monkeypatch.setattr(SiteSession, "_check_consistency", lambda self, active, signatures: None)
    fed = Federation()
    assert np.array_equal(_sums_the_target_with_a_colluder(fed), fed.x[TARGET])


def _drops_the_targets_partners(k: int, t: int, check: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """K = 7, t = 2 (T = 5): the target is given shares from T − 1 partners only (the colluders and D); every other
    honest site is shown its own lists, dropping members of D, so that together they reveal D's mask keys.
    Returns the target's release and what the server rebuilds of it."""
    names = [f"s{i:02d}" for i in range(k)]
    keys = {n: ec.generate_private_key(ec.SECP384R1()) for n in names}
    roster = {n: key.public_key() for n, key in keys.items()}
    b = Binding("7", "1", "b/1", k, t, BITS, LENGTH)
    T = b.threshold
    colluders, honest = names[k - t:], names[:k - t]
    target, partners, others = honest[0], honest[1:T - t], honest[T - t:]
    sites = {n: SiteSession(SiteIdentity(n, keys[n], roster), b) for n in names}
    relay = {n: sites[n].advertise() for n in names}
    ciphertexts = {n: sites[n].share(relay) for n in names}
    x = {n: np.random.default_rng(i).integers(0, 1 << BITS, LENGTH) for i, n in enumerate(names)}
    content, load, views = b"round", {v: 0 for v in partners}, {}
    for w in partners + others:  # each drops up to K − T of the target's partners, spreading the load
        views[w] = sorted((v for v in partners if v != w), key=lambda v: load[v])[:k - T]
        for v in views[w]:
            load[v] += 1
    answers, masked = {}, {}
    for n in honest:
        frm = {p: ciphertexts[p][n] for p in (colluders + partners if n == target else names) if p != n}
        dropped = [] if n == target else views[n]
        active = [target] + colluders + partners if n == target else [p for p in names if p not in dropped]
        sites[n].receive(frm)
        own = sites[n].sign_lists(active, dropped)
        masked[n] = sites[n].masked(x[n], content)
        forged = {c: sign(keys[c], sites[n]._lists_payload(c)) for c in colluders}  # colluders sign anything
        answers[n] = sites[n].unmask(active, dropped, {n: own, **forged})
    points = {n: i + 1 for i, n in enumerate(names)}

    def rebuild(whose: str, which: int) -> bytes:
        held = {points[r]: a[which][whose] for r, a in answers.items() if whose in a[which]}
        for c in colluders:
            plain = decrypt(agree(sites[c]._cipher, relay[whose].cipher, b.context("shares")),
                            ciphertexts[whose][c], b.payload(whose, "to", c)) if whose != c else None
            held[points[c]] = plain[32 * which:32 * (which + 1)]
        return shamir.combine(held, T)

    y = masked[target] - mask(rebuild(target, 0), LENGTH, BITS)
    context = target_context(sites[target], content)
    for p in colluders + partners:
        key = sites[p]._masking if p in colluders else X25519PrivateKey.from_private_bytes(rebuild(p, 1))
        pairwise = mask(agree(key, relay[target].masking, context), LENGTH, BITS)
        y = y - pairwise if target < p else y + pairwise
    return x[target], np.mod(y, 1 << BITS)


def test_showing_each_site_its_own_dropped_partners_is_refused_by_the_consistency_check():
    """The review's attack (K = 7, t = 2): every honest site's lists are its own; at most 1 + t survivors sign
    any one of them, fewer than T = 5."""
    with pytest.raises(InvalidInstructionsError, match="survivors signed these lists, fewer than T = 5"):
        _drops_the_targets_partners(7, 2)


def test_without_the_consistency_check_the_server_reads_one_sites_release(monkeypatch):
    monkeypatch.setattr(SiteSession, "_check_consistency", lambda self, active, signatures: None)
    release, rebuilt = _drops_the_targets_partners(7, 2)
    assert np.array_equal(rebuilt, release)


def _views_from_a_larger_roster(roster: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The second review's attack: K = 7, t = 2 out of a roster of 8. Each honest site is shown its own key set
    (between T and K roster-signed sites): the target's partners' mask keys come from T signers of one list who sit
    in the partners' sets but not in the target's. ``roster``: the N the sites count T over (None: K)."""
    k, t, names_n = 7, 2, 8
    b = Binding("7", "3", "b/3", k, t, BITS, LENGTH, roster=roster)
    T = threshold(k, t)  # what the attack is built for: the threshold counted over K (5)
    m, ns = T - 1 - t, T - t  # the target's honest partners, the honest signers of the recovery list
    u, partners, signers = "u", [f"h{i}" for i in range(m)], [f"s{i}" for i in range(ns)]
    colluders = [f"z{i}" for i in range(t)]
    names = [u] + partners + signers + colluders
    assert len(names) == names_n
    keys = {n: ec.generate_private_key(ec.SECP384R1()) for n in names}
    roster_keys = {n: key.public_key() for n, key in keys.items()}
    sites = {n: SiteSession(SiteIdentity(n, keys[n], roster_keys), b) for n in names}
    relay = {n: site.advertise() for n, site in sites.items()}
    view = {u: [u] + partners + colluders, **{h: [h, u] + signers + colluders for h in partners},
            **{s: signers + colluders + partners for s in signers}}
    out = {n: sites[n].share({p: relay[p] for p in view[n]}) for n in [u] + partners + signers}

    def from_colluder(z: str, to: str) -> bytes:
        key = agree(sites[z]._cipher, relay[to].cipher, b.context("shares"))
        return encrypt(key, bytes(2 * shamir.SHARE_BYTES), b.payload(z, "to", to))

    senders = {u: partners + colluders, **{h: [u] + colluders + signers[:T - 2 - t] for h in partners},
               **{s: [x for x in signers if x != s] + colluders + partners for s in signers}}
    for n, frm in senders.items():
        sites[n].receive({p: out[p][n] if p in out else from_colluder(p, n) for p in frm})
    x = {n: np.random.default_rng(i).integers(0, 1 << BITS, LENGTH) for i, n in enumerate(names)}
    lists = {u: ([u] + partners + colluders, []),
             **{h: ([h, u] + colluders + signers[:T - 2 - t], []) for h in partners},
             **{s: (signers + colluders, partners) for s in signers}}
    signatures, masked, revealed = {}, {}, {}
    for n, (active, dropped) in lists.items():
        signatures[n] = sites[n].sign_lists(active, dropped)
        masked[n] = sites[n].masked(x[n], b"content")
    for z in colluders:  # they sign whatever the server asks
        signatures[z] = sign(keys[z], sites[signers[0]]._lists_payload(z))
    for n, (active, dropped) in lists.items():
        revealed[n] = sites[n].unmask(active, dropped, signatures)

    def colluder_share(z: str, owner: str) -> bytes:
        key = agree(sites[z]._cipher, relay[owner].cipher, b.context("shares"))
        return decrypt(key, out[owner][z], b.payload(owner, "to", z))

    def recover(owner: str, held: dict[str, bytes]) -> bytes:
        return shamir.combine({sorted(view[owner]).index(r) + 1: share for r, share in held.items()}, T)

    seed = recover(u, {r: revealed[r][0][u] for r in [u] + partners} | {z: colluder_share(z, u)[:32]
                                                                         for z in colluders})
    y = masked[u] - mask(seed, LENGTH, BITS)
    for p in partners + colluders:
        private = sites[p]._masking if p in colluders else X25519PrivateKey.from_private_bytes(recover(
            p, {s: revealed[s][1][p] for s in signers} | {z: colluder_share(z, p)[32:] for z in colluders}))
        pairwise = mask(agree(private, relay[u].masking, target_context(sites[u], b"content")), LENGTH, BITS)
        y = y - pairwise if u < p else y + pairwise
    return x[u], np.mod(y, 1 << BITS)


def test_a_roster_larger_than_k_raises_the_threshold_and_the_views_attack_is_refused():
    """Counted over the roster (N = 8), T = 6 and 2T > N + t again: the target refuses the key set of five the
    attack shows it."""
    with pytest.raises(InvalidInstructionsError, match="between T = 6 and K = 7"):
        _views_from_a_larger_roster(roster=8)


def test_with_the_threshold_counted_over_k_a_larger_roster_lets_the_server_read_one_release():
    release, rebuilt = _views_from_a_larger_roster(roster=None)
    assert np.array_equal(rebuilt, release)


def test_a_setting_whose_threshold_exceeds_k_is_refused():
    with pytest.raises(ValueError, match="exceeds K"):
        threshold(5, 1, roster=12)


def test_a_low_order_masking_key_is_refused_before_anything_is_charged():
    """A colluder signs a masking key that agrees on no secret: caught when the keys are checked, not after the
    honest sites were charged for a release that cannot be masked."""
    fed = Federation()
    relay = fed.keys()
    cipher = relay[COLLUDER].cipher
    relay[COLLUDER] = SignedKeys(cipher, bytes(32), sign(KEYS[COLLUDER], fed.binding.payload(COLLUDER, cipher,
                                                                                            bytes(32))))
    with pytest.raises(InvalidInstructionsError, match="agrees on no secret"):
        fed.sites[TARGET].share(relay)


def _swaps_the_peers_keys(fed: Federation) -> tuple[dict, dict]:
    """The server replaces every peer's round keys by its own (keeping their signatures): a Sybil attack."""
    relay = fed.keys()
    own = {n: (X25519PrivateKey.generate(), X25519PrivateKey.generate()) for n in NAMES if n != TARGET}
    swapped = {n: relay[n] if n == TARGET else SignedKeys(public_bytes(own[n][0]), public_bytes(own[n][1]),
                                                          relay[n].signature) for n in NAMES}
    return fed.sites[TARGET].share(swapped), own


def test_swapped_keys_are_refused():
    with pytest.raises(InvalidInstructionsError, match="not signed by its roster key"):
        _swaps_the_peers_keys(Federation())


def test_without_the_signature_check_the_server_decrypts_both_secrets_of_a_site(monkeypatch):
    """The swapped cipher keys are the server's: it decrypts every share of the site's self-mask seed and mask key,
    enough to remove every mask from the site's release."""
    monkeypatch.setattr(SiteSession, "_check_signatures", lambda self, keys: None)
    fed = Federation()
    ciphertexts, own = _swaps_the_peers_keys(fed)
    target = fed.sites[TARGET]
    seeds, keys = {}, {}
    for peer, ciphertext in ciphertexts.items():
        secret = agree(own[peer][0], public_bytes(target._cipher), fed.binding.context("shares"))
        plain = decrypt(secret, ciphertext, fed.binding.payload(TARGET, "to", peer))
        seeds[peer], keys[peer] = plain[:32], plain[32:]
    assert combined(fed, seeds) == target._self_seed
    assert combined(fed, keys) == target._masking.private_bytes_raw()


def test_a_replayed_key_of_another_instance_or_round_is_refused():
    earlier = Federation(binding("a0", "2"))
    replayed = earlier.sites["site-3"].advertise()
    for later in (Federation(binding("a1", "2")), Federation(binding("a0", "3"))):
        relay = later.keys()
        relay["site-3"] = replayed
        with pytest.raises(InvalidInstructionsError, match="site-3"):
            later.sites[TARGET].share(relay)


def test_without_the_binding_a_replayed_key_is_accepted(monkeypatch):
    monkeypatch.setattr(Binding, "payload", lambda self, site, *parts: digest(site, *parts))
    earlier = Federation(binding("a0", "2"))
    replayed = earlier.sites["site-3"].advertise()
    later = Federation(binding("a1", "3"))
    relay = later.keys()
    relay["site-3"] = replayed
    assert "site-3" in later.sites[TARGET].share(relay)  # accepted: its shares go out to the replayed key


def test_an_unsigned_key_and_a_stranger_are_refused():
    fed = Federation()
    relay = fed.keys()
    relay["site-4"] = SignedKeys(relay["site-4"].cipher, relay["site-4"].masking, b"")
    with pytest.raises(InvalidInstructionsError, match="site-4"):
        fed.sites[TARGET].share(relay)
    fed = Federation()
    relay = fed.keys()
    stranger = ec.generate_private_key(ec.SECP384R1())
    relay["stranger"] = SignedKeys(relay["site-4"].cipher, relay["site-4"].masking, sign(stranger, b"x"))
    with pytest.raises(InvalidInstructionsError, match="between T = 4 and K = 5|not in the federation"):
        fed.sites[TARGET].share(relay)


def test_each_stage_runs_once_in_order_and_unmasks_only_the_lists_it_signed():
    fed = Federation()
    fed.set_up()
    fed.answer(TARGET, NAMES[:4], [NAMES[4]])
    with pytest.raises(InvalidInstructionsError, match="differ from the lists this site signed"):
        fed.reveal(TARGET, NAMES, [])
    for site in NAMES[1:4]:
        fed.answer(site, NAMES[:4], [NAMES[4]])
    self_masks, mask_keys = fed.reveal(TARGET, NAMES[:4], [NAMES[4]])  # the refusal revealed nothing: retry runs
    assert sorted(self_masks) == NAMES[:4] and list(mask_keys) == [NAMES[4]]
    with pytest.raises(InvalidInstructionsError, match="each stage once"):
        fed.reveal(TARGET, NAMES[:4], [NAMES[4]])
    with pytest.raises(InvalidInstructionsError, match="each stage once"):
        SiteSession(SiteIdentity(TARGET, KEYS[TARGET], ROSTER), binding()).share({})


def test_a_refused_stage_leaves_the_session_for_the_legitimate_message():
    """A forged key list, a forged share and too few signatures are each refused without consuming the stage:
    the honest message that follows runs, and the instance still sums exactly."""
    fed = Federation()
    relay = fed.keys()
    forged = dict(relay)
    forged["site-4"] = SignedKeys(relay["site-4"].cipher, relay["site-4"].masking, b"")
    with pytest.raises(InvalidInstructionsError, match="site-4"):
        fed.sites[TARGET].share(forged)
    routes = fed.server.shared({n: s.share(relay) for n, s in fed.sites.items()})
    bad = dict(routes[TARGET])
    bad["site-1"] = bytes(len(bad["site-1"]))
    with pytest.raises(InvalidInstructionsError, match="do not decrypt"):
        fed.sites[TARGET].receive(bad)
    assert set(fed.sites[TARGET]._shares) == {TARGET}  # none of the refused message's shares kept
    for n in routes:
        fed.sites[n].receive(routes[n])
    active, dropped = fed.server.lists(NAMES[:4])
    masked = {n: fed.answer(n, active, dropped) for n in active}
    with pytest.raises(InvalidInstructionsError, match="fewer than T"):
        fed.reveal(TARGET, active, dropped, signatures={})
    shares = {n: fed.reveal(n, active, dropped) for n in masked}
    entries = fed.server.unmasked(masked, shares, active, dropped, fed.content)
    assert np.array_equal(modular_sum(entries.values()), modular_sum(fed.x[n] for n in active))


def _target_shown_fewer_dropped(bind_lists: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """K = 7, t = 1, d = 2 (T = 5): the server shows the target lists with no site dropped (it would size its noise
    share for all seven), and the five others lists that drop one site; the five sign theirs, reveal the dropped
    site's mask key, and the server unmasks the six survivors' sum. Returns the sum of their releases and what the
    server unmasks (the target's share would have been sized for one site too many)."""
    k, t, d = 7, 1, 2
    names = [f"s{i}" for i in range(k)]
    keys = {n: ec.generate_private_key(ec.SECP384R1()) for n in names}
    roster = {n: key.public_key() for n, key in keys.items()}
    b = Binding("7", "1", "b/1", k, t, BITS, LENGTH, dropouts=d)
    assert b.threshold == 5
    target, gone, others = names[0], names[1], names[2:]
    sites = {n: SiteSession(SiteIdentity(n, keys[n], roster), b) for n in names}
    server = ServerSession(b.instance, k, t, BITS, LENGTH, dropouts=d)
    relay = server.advertised({n: s.advertise() for n, s in sites.items()})
    routes = server.shared({n: s.share(relay) for n, s in sites.items()})
    x = {n: np.random.default_rng(i).integers(0, 1 << BITS, LENGTH) for i, n in enumerate(names)}
    survivors = [target] + others
    views = {target: (names, []), **{n: (survivors, [gone]) for n in others}}
    masked = {}
    for n in survivors:
        sites[n].receive(routes[n])
        sites[n].sign_lists(*views[n])
        masked[n] = sites[n].masked(x[n], b"content")
    signatures = {n: sites[n].sign_final(survivors, [gone]) for n in survivors}  # the target's gone "since"
    shares = {n: sites[n].unmask(survivors, [gone], signatures) for n in survivors}
    entries = server.unmasked(masked, shares, survivors, [gone], b"content")
    return np.mod(sum(x[n] for n in survivors), 1 << BITS), np.mod(sum(entries.values()), 1 << BITS)


def test_a_site_shown_fewer_dropped_sites_than_the_others_cannot_be_summed_with_them():
    """The lists enter the pairwise masks: a release sized for other lists than its partners' does not cancel with
    theirs, so a server cannot have one site draw a smaller share (fewer dropped announced) and sum it with sites
    whose lists left a site out. Without the lists in the masks the sum unmasks: the binding is what stops it."""
    truth, unmasked = _target_shown_fewer_dropped()
    assert not np.array_equal(truth, unmasked)


def test_without_the_lists_in_the_masks_the_mixed_sum_unmasks(monkeypatch):
    from skfedriem.secure_aggregation import server as server_module, site as site_module

    def unbound(instance, content, active, dropped):
        return key_context("masks", instance, content)

    monkeypatch.setattr(site_module, "masks_context", unbound)
    monkeypatch.setattr(server_module, "masks_context", unbound)
    truth, unmasked = _target_shown_fewer_dropped()
    assert np.array_equal(truth, unmasked)


def test_a_round_with_t_plus_d_sites_dropped_unmasks_and_one_more_is_refused():
    """K = 7, t = 1, d = 2: two sites gone, the five survivors' sum unmasks; without the allowance (T = 6) a site
    refuses lists of five survivors."""
    names = [f"s{i}" for i in range(7)]
    keys = {n: ec.generate_private_key(ec.SECP384R1()) for n in names}
    roster = {n: key.public_key() for n, key in keys.items()}
    for d, works in ((2, True), (0, False)):
        b = Binding("7", "1", f"c/{d}", 7, 1, BITS, LENGTH, dropouts=d)
        sites = {n: SiteSession(SiteIdentity(n, keys[n], roster), b) for n in names}
        server = ServerSession(b.instance, 7, 1, BITS, LENGTH, dropouts=d)
        relay = server.advertised({n: s.advertise() for n, s in sites.items()})
        routes = server.shared({n: s.share(relay) for n, s in sites.items()})
        survivors, gone = names[:5], names[5:]
        x = {n: np.random.default_rng(i).integers(0, 1 << BITS, LENGTH) for i, n in enumerate(names)}
        if not works:
            sites[names[0]].receive(routes[names[0]])
            with pytest.raises(InvalidInstructionsError, match="5 survivors, fewer than T = 6"):
                sites[names[0]].sign_lists(survivors, gone)
            continue
        masked = {}
        for n in survivors:
            sites[n].receive(routes[n])
            sites[n].sign_lists(survivors, gone)
            masked[n] = sites[n].masked(x[n], b"content")
        signatures = {n: sites[n].sign_final(survivors, gone) for n in survivors}
        shares = {n: sites[n].unmask(survivors, gone, signatures) for n in survivors}
        entries = server.unmasked(masked, shares, survivors, gone, b"content")
        assert np.array_equal(np.mod(sum(entries.values()), 1 << BITS), np.mod(sum(x[n] for n in survivors),
                                                                                1 << BITS))


def _allowance_round(d: int = 2):
    """K = 7, t = 1, d sites' keys and shares exchanged, every site masking with all seven listed alive."""
    names = [f"s{i}" for i in range(7)]
    keys = {n: ec.generate_private_key(ec.SECP384R1()) for n in names}
    roster = {n: key.public_key() for n, key in keys.items()}
    b = Binding("7", "1", "f/1", 7, 1, BITS, LENGTH, dropouts=d)
    sites = {n: SiteSession(SiteIdentity(n, keys[n], roster), b) for n in names}
    server = ServerSession(b.instance, 7, 1, BITS, LENGTH, dropouts=d)
    relay = server.advertised({n: s.advertise() for n, s in sites.items()})
    routes = server.shared({n: s.share(relay) for n, s in sites.items()})
    x = {n: np.random.default_rng(i).integers(0, 1 << BITS, LENGTH) for i, n in enumerate(names)}
    masked = {}
    for n in names:
        sites[n].receive(routes[n])
        sites[n].sign_lists(names, [])
        masked[n] = sites[n].masked(x[n], b"content")
    return names, sites, server, x, masked


def test_two_sites_dropping_during_a_round_are_recovered_from_signed_final_lists():
    """Under a dropout allowance the lists are signed again once the masked releases are in: two of seven gone
    during the round, the five sign the final lists, reveal against five signatures, and their sum unmasks (the
    pairwise masks derived with the first lists)."""
    names, sites, server, x, masked = _allowance_round()
    final, gone = names[:5], names[5:]
    signatures = {n: sites[n].sign_final(final, gone) for n in final}
    shares = {n: sites[n].unmask(final, gone, signatures) for n in final}
    entries = server.unmasked({n: masked[n] for n in final}, shares, final, gone, b"content",
                              masked_with=(names, []))
    assert np.array_equal(np.mod(sum(entries.values()), 1 << BITS), np.mod(sum(x[n] for n in final), 1 << BITS))


@pytest.mark.parametrize("final, gone, message", [
    (["s0", "s1", "s2", "s3", "s4", "s9"], ["s5", "s6"], "final lists are not the signed survivors"),
    (["s0", "s1", "s2", "s3"], ["s4", "s5", "s6"], "4 survivors, fewer than T = 5"),
    (["s0", "s1", "s2", "s3", "s4"], ["s5"], "final lists are not the signed survivors"),
])
def test_final_lists_that_add_a_site_or_fall_below_t_are_refused(final, gone, message):
    names, sites, server, x, masked = _allowance_round()
    with pytest.raises(InvalidInstructionsError, match=message if "T =" in message else "final lists|whose shares"):
        sites["s0"].sign_final(final, gone)
    sites["s0"].sign_final(names[:5], names[5:])  # the refusal left the session where it was


def test_final_lists_shown_differently_to_two_groups_reach_no_threshold():
    """The server shows s0, s1, s2 and s5 final lists dropping s6, and s3, s4 lists dropping s5 (the colluder s6
    alive to them, signing anything): neither set of lists gathers T = 5 signatures of its survivors (4 and 3), so
    no mask key is revealed."""
    names, sites, server, x, masked = _allowance_round()
    one = (["s0", "s1", "s2", "s3", "s4", "s5"], ["s6"])
    two = (["s0", "s1", "s2", "s3", "s4", "s6"], ["s5"])
    views = {n: two if n in ("s3", "s4") else one for n in ("s0", "s1", "s2", "s3", "s4", "s5")}
    signatures = {n: sites[n].sign_final(*views[n]) for n in views}
    signatures["s6"] = sign(sites["s6"].identity.signing_key, sites["s3"]._lists_payload("s6"))  # colludes
    for n in ("s0", "s3"):
        with pytest.raises(InvalidInstructionsError, match="fewer than T = 5"):
            sites[n].unmask(*views[n], signatures)


def test_under_an_allowance_a_site_unmasks_only_against_final_lists():
    """The second review's finding: a server that skipped ``final`` for one site (the start lists, no site dropped:
    no consistency check) had it reveal all its excess for a sum that left sites out. A site of a round with a
    dropout allowance unmasks only against the final lists it signed."""
    names, sites, server, x, masked = _allowance_round()
    with pytest.raises(InvalidInstructionsError, match="unmasks only against the final lists"):
        sites["s0"].unmask(names, [], {})
    signatures = {n: sites[n].sign_final(names, []) for n in names}
    assert set(sites["s0"].unmask(names, [], signatures)[0]) == set(names)
