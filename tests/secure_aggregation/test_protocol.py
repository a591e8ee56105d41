"""Secure aggregation between sites and a server in this process: the sum is exact, dropouts are recovered, and a
malicious server is refused at every check — each test also shows that the check is what stops the attack."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from skfedriem.exceptions import InvalidInstructionsError
from skfedriem.secure_aggregation import Binding, ServerSession, SiteIdentity, SiteSession, TooFewSites, threshold
from skfedriem.secure_aggregation import shamir
from skfedriem.secure_aggregation.crypto import agree, decrypt, digest, mask, public_bytes, sign
from skfedriem.secure_aggregation.session import key_context
from skfedriem.secure_aggregation.site import SignedKeys

BITS, LENGTH = 20, 16
NAMES = [f"site-{i}" for i in range(5)]
KEYS = {name: ec.generate_private_key(ec.SECP384R1()) for name in NAMES}
ROSTER = {name: key.public_key() for name, key in KEYS.items()}
TARGET = "site-0"


def binding(instance: str = "a1", round_: str = "3", clients: int = 5, colluders: int = 1) -> Binding:
    return Binding("7", round_, instance, b"theta and instructions", clients, colluders, BITS, LENGTH)


def releases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {name: rng.integers(0, 1 << BITS, LENGTH) for name in NAMES}


class Federation:
    """Five honest sites and an honest server, run stage by stage (a test plays the server's part where it lies)."""

    def __init__(self, b: Binding | None = None):
        self.binding = b or binding()
        self.sites = {n: SiteSession(SiteIdentity(n, KEYS[n], ROSTER), self.binding) for n in NAMES}
        self.server = ServerSession(self.binding.instance, self.binding.clients, self.binding.colluders, BITS, LENGTH)
        self.x = releases()

    def keys(self) -> dict[str, SignedKeys]:
        return self.server.advertised({n: s.advertise() for n, s in self.sites.items()})

    def through_masking(self, leave_after_sharing=()) -> tuple[list[str], list[str]]:
        relay = self.keys()
        routes = self.server.shared({n: s.share(relay) for n, s in self.sites.items()})
        for n in routes:
            self.sites[n].receive(routes[n])
        return self.server.received({n: self.sites[n].masked(self.x[n]) for n in routes if n not in leave_after_sharing})


def modular_sum(arrays) -> np.ndarray:
    return np.mod(np.sum(list(arrays), axis=0), 1 << BITS)


def unmask_target(server: ServerSession, self_seed: bytes, mask_key: bytes) -> np.ndarray:
    """What a server holding TARGET's self-mask seed and mask key computes from its masked release."""
    key = X25519PrivateKey.from_private_bytes(mask_key)
    y = server.inputs[TARGET] - mask(self_seed, LENGTH, BITS)
    for peer in server.routes[TARGET]:
        pairwise = mask(agree(key, server.keys[peer].masking, key_context("masks", server.instance)), LENGTH, BITS)
        y = y - pairwise if TARGET < peer else y + pairwise
    return np.mod(y, 1 << BITS)


def recovered(server: ServerSession, answers: dict) -> np.ndarray | None:
    """TARGET's release, if the revealed shares hold both of its secrets (else None)."""
    points = {n: i + 1 for i, n in enumerate(sorted(server.keys))}
    seeds = {points[r]: a[0][TARGET] for r, a in answers.items() if TARGET in a[0]}
    keys = {points[r]: a[1][TARGET] for r, a in answers.items() if TARGET in a[1]}
    if min(len(seeds), len(keys)) < server.threshold:
        return None
    return unmask_target(server, shamir.combine(seeds, server.threshold), shamir.combine(keys, server.threshold))


# ---------------------------------------------------------------- an honest run
def test_the_server_learns_the_exact_sum_and_no_entry_is_a_release():
    fed = Federation()
    active, dropped = fed.through_masking()
    assert (active, dropped) == (NAMES, [])
    entries = fed.server.unmasked({n: fed.sites[n].unmask(active, dropped) for n in active})
    assert np.array_equal(modular_sum(entries.values()), modular_sum(fed.x.values()))
    for n in NAMES:  # each entry is still pairwise-masked: it agrees with its release by chance only
        assert np.mean(entries[n] == fed.x[n]) < 0.2


def test_a_site_that_leaves_after_sharing_has_its_masks_removed_and_the_sum_covers_the_survivors():
    fed = Federation()
    active, dropped = fed.through_masking(leave_after_sharing={"site-2"})
    assert dropped == ["site-2"]
    entries = fed.server.unmasked({n: fed.sites[n].unmask(active, dropped) for n in active})
    assert sorted(entries) == active
    assert np.array_equal(modular_sum(entries.values()), modular_sum(fed.x[n] for n in active))


def test_a_round_with_fewer_survivors_than_the_threshold_is_abandoned():
    fed = Federation()
    with pytest.raises(TooFewSites, match="fewer than T = 4"):
        fed.through_masking(leave_after_sharing={"site-2", "site-3"})


def test_the_threshold_keeps_two_views_of_one_site_from_reaching_both_secrets():
    """2T > K + t: the shares the honest sites reveal of one kind and the t colluders' cannot reach T twice."""
    for clients in range(1, 40):
        for colluders in range(clients):
            t_ = threshold(clients, colluders)
            assert clients - colluders <= t_ <= clients
            assert 2 * t_ > clients + colluders or clients == 1


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
def _lists_target_both_ways(fed: Federation) -> dict:
    active, _ = fed.through_masking()
    return {n: fed.sites[n].unmask(active, [TARGET]) for n in NAMES}


def test_a_site_listed_both_as_survivor_and_dropped_is_refused():
    fed = Federation()
    with pytest.raises(InvalidInstructionsError, match="both as survivors and as dropped"):
        _lists_target_both_ways(fed)


def test_without_the_disjoint_check_the_server_rebuilds_one_sites_release(monkeypatch):
    monkeypatch.setattr(SiteSession, "_check_disjoint", staticmethod(lambda active, dropped: None))
    fed = Federation()
    answers = _lists_target_both_ways(fed)
    assert np.array_equal(recovered(fed.server, answers), fed.x[TARGET])


def _unmasks_the_target_alone(fed: Federation) -> np.ndarray:
    fed.through_masking()
    others = [n for n in NAMES if n != TARGET]  # the server says everyone else dropped
    answers = {n: fed.sites[n].unmask([TARGET], others) for n in NAMES}
    fed.server.inputs = {TARGET: fed.server.inputs[TARGET]}
    return fed.server.unmasked(answers)[TARGET]


def test_unmasking_with_fewer_survivors_than_the_threshold_is_refused():
    fed = Federation()
    with pytest.raises(InvalidInstructionsError, match="1 survivors, fewer than T = 4"):
        _unmasks_the_target_alone(fed)


def test_without_the_survivor_check_the_server_unmasks_one_sites_release(monkeypatch):
    monkeypatch.setattr(SiteSession, "_check_survivors", lambda self, active: None)
    fed = Federation()
    assert np.array_equal(_unmasks_the_target_alone(fed), fed.x[TARGET])


def _swaps_the_peers_keys(fed: Federation) -> tuple[dict, dict]:
    """The server replaces every peer's round keys by its own (keeping their signatures): a Sybil attack."""
    relay = fed.keys()
    own = {n: (X25519PrivateKey.generate(), X25519PrivateKey.generate()) for n in NAMES if n != TARGET}
    swapped = {n: relay[n] if n == TARGET else SignedKeys(public_bytes(own[n][0]), public_bytes(own[n][1]),
                                                          relay[n].signature) for n in NAMES}
    return fed.sites[TARGET].share(swapped), own


def test_swapped_keys_are_refused():
    fed = Federation()
    with pytest.raises(InvalidInstructionsError, match="not signed by its roster key"):
        _swaps_the_peers_keys(fed)


def test_without_the_signature_check_the_server_decrypts_both_secrets_of_a_site(monkeypatch):
    """The swapped cipher keys are the server's: it decrypts every share of the site's self-mask seed and mask key,
    enough to remove every mask from the site's release."""
    monkeypatch.setattr(SiteSession, "_check_signatures", lambda self, keys: None)
    fed = Federation()
    ciphertexts, own = _swaps_the_peers_keys(fed)
    target = fed.sites[TARGET]
    points = {n: i + 1 for i, n in enumerate(NAMES)}
    seeds, keys = {}, {}
    for peer, ciphertext in ciphertexts.items():
        secret = agree(own[peer][0], public_bytes(target._cipher), fed.binding.context("shares"))
        plain = decrypt(secret, ciphertext, fed.binding.payload(TARGET, "to", peer))
        seeds[points[peer]], keys[points[peer]] = plain[:32], plain[32:]
    assert len(seeds) >= fed.binding.threshold
    assert shamir.combine(seeds, fed.binding.threshold) == target._self_seed
    assert shamir.combine(keys, fed.binding.threshold) == target._masking.private_bytes_raw()


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
    assert TARGET not in later.sites[TARGET].share(relay)  # accepted: shares go out to the replayed key


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


def test_each_stage_runs_once_in_order():
    fed = Federation()
    fed.through_masking()
    fed.sites[TARGET].unmask(NAMES, [])
    with pytest.raises(InvalidInstructionsError, match="each stage once"):
        fed.sites[TARGET].unmask(NAMES, [])
    with pytest.raises(InvalidInstructionsError, match="each stage once"):
        SiteSession(SiteIdentity(TARGET, KEYS[TARGET], ROSTER), binding()).share({})
