"""Distributed noise on deployed sites, under secure aggregation: the deployment's ServerApp against real site apps
over an in-memory grid. The server learns the sum and nothing else, a site that leaves mid-round is recovered, and
a site refuses what its own node configuration does not allow — each refusal shown to be what stops the attack."""

from __future__ import annotations

import json
import math
import pickle
import uuid

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Context, Message, RecordDict  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from skfedriem import FederatedPCA  # noqa: E402
from skfedriem.federated.instructions import RoundInstructions  # noqa: E402
from skfedriem.flower.deployment import apps  # noqa: E402
from skfedriem.flower.deployment.apps import client_apps  # noqa: E402
from skfedriem.flower.operations.certificates import make_supernode_keys  # noqa: E402
from skfedriem.flower.protocol.messages import encode_arrays, encode_instructions  # noqa: E402
from skfedriem.flower.protocol import secure_rounds, secure_site  # noqa: E402
from skfedriem.flower.protocol.secure_site import DistributedNoise  # noqa: E402
from skfedriem.privacy import PrivacyBudget  # noqa: E402
from skfedriem.privacy.mechanisms.discrete import DistributedEncoding  # noqa: E402
from skfedriem.secure_aggregation import ServerSession, SiteSession  # noqa: E402

from .test_apps import SitesGrid  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Round .*:RuntimeWarning")
SITES = [f"site-{i}" for i in range(5)]
SETTINGS = {"solver": "riemannian", "n-rounds": 3, "batch-size": 10, "local-steps": 1, "eps": 4.0, "clip": 1.0,
            "n-components": 2, "noise": "distributed"}


@pytest.fixture(autouse=True)
def inside_a_server_app(monkeypatch):
    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)
    apps._SITES.clear()


@pytest.fixture
def federation(tmp_path):
    """Five sites' files, SuperNode keys and the operator's roster of them."""
    return _sites(tmp_path, SITES)


def _sites(tmp_path, names):
    """The sites' files, SuperNode keys and the operator's roster of them."""
    lines, keys, files = [], {}, {}
    for i, name in enumerate(names):
        private, public = make_supernode_keys(tmp_path / "keys", name)
        keys[name] = str(private)
        lines.append(f"{name} {public.read_text().strip()}")
        X = np.random.default_rng(i).normal(size=(100, 5)) / 3
        np.save(tmp_path / f"{name}.npy", X)
        files[name] = str(tmp_path / f"{name}.npy")
    (tmp_path / "roster.txt").write_text("\n".join(lines) + "\n")
    return tmp_path, files, keys


class SecureGrid(SitesGrid):
    """The sites consent to distributed noise; ``drop`` = {(round, stage): site} loses a site at that stage."""

    def __init__(self, folder, files, keys, node=None, drop=None, per_site=None, restart=None, crash=(), kind="pca",
                 **settings):
        self.folder, self.keys, self.node, self.drop = folder, keys, node or {}, dict(drop or {})
        self.per_site, self.restart, self.files, self.crash = per_site or {}, dict(restart or {}), files, set(crash)
        config = {"n-clients": len(files), "output": str(folder / "out"), "round-timeout": 5.0,
                  **(SETTINGS if kind == "pca" else {}), **settings}
        super().__init__(kind, files, config)

    def _join(self, name, path):
        self.node_config = {"noise": "distributed", "federation-keys": str(self.folder / "roster.txt"),
                            "signing-key": self.keys[name], **self.node, **self.per_site.get(name, {})}
        super()._join(name, path)

    def push_messages(self, messages):
        for message in messages:
            secagg = message.content.config_records.get("secagg")
            stage = None if secagg is None else secagg["stage"]
            node = message.metadata.dst_node_id
            gone = self.drop.get((message.metadata.group_id, stage), ())
            if node in self.nodes and self.nodes[node][0] in ((gone,) if isinstance(gone, str) else gone):
                del self.nodes[node]  # the site's SuperNode died before it could answer
            if (message.metadata.group_id, stage) in self.crash and message is messages[-1]:
                super().push_messages(messages)  # every site answers, then the server dies
                self.crash.discard((message.metadata.group_id, stage))
                raise RuntimeError("server crash")
            back = self.restart.pop((message.metadata.group_id, stage), None)
            if back is not None:  # a new process under a new node: its secrets are gone
                secure_site._SESSIONS.pop(back, None)
                self._join(back, self.files[back])
        return super().push_messages(messages)

    def serve(self) -> dict:
        apps._serve(self.kind, self, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                             run_config=self.run_config))
        return json.loads((self.folder / "out" / "result.json").read_text())


def ledgers(path: str) -> tuple[PrivacyBudget, PrivacyBudget, PrivacyBudget]:
    """A site's ε_local, ε_central and deviating server's ledgers."""
    return (PrivacyBudget(math.inf, path=path + ".privacy-ledger.json"),
            PrivacyBudget(math.inf, path=path + ".privacy-ledger.central.json"),
            PrivacyBudget(math.inf, path=path + ".privacy-ledger.deviating.json"))


@pytest.fixture
def spies(monkeypatch):
    """What each site really released (round, site -> release) and what the server held (its sessions)."""
    released, held = {}, []
    masked, unmasked = SiteSession.masked, ServerSession.unmasked

    def spy_masked(self, release, content):
        released[(self.binding.round, self.name)] = np.asarray(release).copy()
        return masked(self, release, content)

    def spy_unmasked(self, masked_releases, shares, active, dropped, content, **kw):
        entries = unmasked(self, masked_releases, shares, active, dropped, content, **kw)
        held.append({"inputs": dict(self.inputs), "entries": entries, "modulus": 1 << self.bits,
                     "round": self.instance.split("/")[1], "shares": shares, "threshold": self.threshold})
        return entries

    monkeypatch.setattr(SiteSession, "masked", spy_masked)
    monkeypatch.setattr(ServerSession, "unmasked", spy_unmasked)
    return released, held


def test_a_distributed_deployment_certifies_the_in_process_epsilon_and_the_server_learns_only_the_sum(federation,
                                                                                                     spies):
    folder, files, keys = federation
    released, held = spies
    result = SecureGrid(folder, files, keys, node={"semi-honest-server": "true"}).serve()
    X = np.vstack([np.load(files[n]) for n in SITES])
    local = FederatedPCA(2, eps=4.0, solver="riemannian", n_rounds=3, batch_size=10, local_steps=1, clip=1.0,
                         noise="distributed").fit(X, groups=np.repeat(np.arange(5), 100))
    assert result["epsilon"] == local.epsilon_ <= 4.0
    assert all(h["replied"] == [0, 1, 2, 3, 4] and "discarded" not in h for h in result["history"])
    for name in SITES:  # each site's ledgers: ε_central is the server's certificate, ε_local its own share's
        own, central, deviating = ledgers(files[name])
        assert len(own.fits) == len(central.fits) == len(deviating.fits) == 3
        assert central.spent() == pytest.approx(result["epsilon"], rel=1e-6)
        assert own.spent() == pytest.approx(local.local_epsilon_, rel=1e-6) and own.spent() > central.spent()
        assert deviating.spent() == pytest.approx(local.deviating_epsilon_, rel=1e-6)
        assert central.spent() < deviating.spent() < own.spent()  # K = 5, t = 1: 3 honest shares of 4
    assert result["deviating_epsilon"] == pytest.approx(local.deviating_epsilon_, rel=1e-6)
    # the referee: the server's sum is the sites' releases' sum, and nothing it holds is one site's release
    assert [h["round"] for h in held] == ["1", "2", "3"]
    for round_held in held:
        truth, modulus = {s: released[(round_held["round"], s)] for s in SITES}, round_held["modulus"]
        total = np.mod(np.sum(list(round_held["entries"].values()), axis=0), modulus)
        assert np.array_equal(total, np.mod(np.sum(list(truth.values()), axis=0), modulus))
        for release in truth.values():
            for other in [*round_held["inputs"].values(), *round_held["entries"].values()]:
                assert np.mean(other == release) < 0.2
        for site in SITES:  # of no site does the server hold T shares of both secrets that remove its masks
            self_masks = sum(site in pair[0] for pair in round_held["shares"].values())
            mask_keys = sum(site in pair[1] for pair in round_held["shares"].values())
            assert min(self_masks, mask_keys) < round_held["threshold"]


def test_a_site_lost_during_a_round_abandons_it_and_is_then_recovered_as_dropped(federation, spies):
    """Site-2 shared its keys for the batch in round 1 and dies when round 2's message reaches it: round 2 is
    abandoned (its pairwise masks cannot be removed from a round that listed it as a survivor) and discarded; from
    round 3 on it is listed as dropped, the survivors' shares remove its masks and the round completes without it."""
    folder, files, keys = federation
    released, held = spies
    result = SecureGrid(folder, files, keys, node={"semi-honest-server": "true"},
                        drop={("2", "round"): "site-2"}).serve()
    rounds = result["history"]
    assert rounds[0]["replied"] == [0, 1, 2, 3, 4] and "discarded" not in rounds[0]
    assert rounds[1]["replied"] == [] and "discarded" in rounds[1]
    assert rounds[2]["replied"] == [0, 1, 3, 4] and "discarded" not in rounds[2]  # its masks removed
    survivors = [s for s in SITES if s != "site-2"]
    third = next(h for h in held if h["round"] == "3")
    assert np.array_equal(np.mod(np.sum([third["entries"][s] for s in survivors], axis=0), third["modulus"]),
                          np.mod(np.sum([released[("3", s)] for s in survivors], axis=0), third["modulus"]))
    for name in SITES:  # each site charged what it ran: the survivors round 2 too (they released, masked)
        own, central, _ = ledgers(files[name])
        assert len(central.fits) == (1 if name == "site-2" else 3)
        assert central.spent() <= result["epsilon"] * (1 + 1e-9)


@pytest.mark.parametrize("dropouts", [2, 0])
def test_with_a_dropout_allowance_two_of_seven_sites_gone_keep_the_rounds_and_the_planned_epsilon(tmp_path, spies,
                                                                                                   monkeypatch,
                                                                                                   dropouts):
    """K = 7 sites, t = 1, d = 2 (T = 5): two sites die when round 2's message reaches them. Under the allowance a
    round takes three messages (round, final, unmask): round 2 completes with the five whose masked releases
    arrived, each of which drew λ plus two excess components and reveals none of them (the round's level is 2);
    round 1, which all seven answered, had every survivor reveal both, leaving λ. From round 3 on the two are listed
    as dropped and the five draw λ_2 = λ (K − t) / (K − t − 2) at once. The sums are the releases' less the excess
    revealed, every round applies, and ε_central is the in-process plan's. Without the allowance (T = 6) round 2
    is abandoned (one message a round: the self-mask shares went with the releases) and so are the next ones."""
    from skfedriem.flower.protocol import secure_rounds as rounds_module
    from skfedriem.privacy.mechanisms import discrete

    names = [f"site-{i}" for i in range(7)]
    folder, files, keys = _sites(tmp_path, names)
    rates, draw = [], discrete._skellam
    monkeypatch.setattr(discrete, "_skellam", lambda source, rate, length: rates.append(rate) or draw(source, rate,
                                                                                                      length))
    revealed, read = [], rounds_module._excess
    monkeypatch.setattr(rounds_module, "_excess", lambda record, length: revealed.append(read(record, length))
                        or revealed[-1])
    released, held = spies
    result = SecureGrid(folder, files, keys, node={"semi-honest-server": "true", "distributed-colluders": "1",
                                                   "distributed-dropouts": str(dropouts)},
                        drop={("2", "round"): ("site-5", "site-6")}, colluders=1, dropouts=dropouts,
                        **{"n-rounds": 4}).serve()
    deployed_rates = list(rates)
    replied = [h["replied"] for h in result["history"]]
    X = np.vstack([np.load(files[n]) for n in names])
    local = FederatedPCA(2, eps=4.0, solver="riemannian", n_rounds=4, batch_size=10, local_steps=1, clip=1.0,
                         noise="distributed", colluders=1, dropouts=dropouts).fit(X,
                                                                                  groups=np.repeat(np.arange(7), 100))
    assert result["epsilon"] == pytest.approx(local.epsilon_, rel=1e-9) and result["epsilon"] <= 4.0
    assert replied[0] == list(range(7))
    if not dropouts:
        assert replied[1:] == [[], [], []]
        return
    assert replied[1:] == [[0, 1, 2, 3, 4]] * 3 and all("discarded" not in h for h in result["history"])
    share = deployed_rates[0]
    level = [share, share / 5, share * 6 / 4 - share * 6 / 5]  # λ, λ_1 − λ, λ_2 − λ_1 (K − t = 6)
    assert deployed_rates[:21] == pytest.approx(level * 7)  # round 1: seven sites, each its three components
    assert deployed_rates[21:36] == pytest.approx(level * 5)  # round 2: the five that got the message
    assert deployed_rates[36:] == [pytest.approx(share * 6 / 4)] * 10  # rounds 3 and 4: λ_2 at once, nothing apart
    revealed = [r for r in revealed if r is not None]  # rounds 3 and 4 keep nothing apart: their level is d
    assert len(revealed) == 7 + 5 and all(r.any() for r in revealed[:7]) and not any(r.any() for r in revealed[7:])
    for round_held, taken in zip(held, (revealed[:7], revealed[7:], [0], [0])):
        truth = [released[(round_held["round"], n)] for n in round_held["entries"]]
        assert np.array_equal(np.mod(np.sum(list(round_held["entries"].values()), axis=0), round_held["modulus"]),
                              np.mod(np.sum(truth, axis=0) - np.sum(taken, axis=0), round_held["modulus"]))
    for name in names:  # each site charged what it ran, at the plan's ε_central per round
        _, central, _ = ledgers(files[name])
        assert len(central.fits) == (1 if name in ("site-5", "site-6") else 4)
        assert central.spent() <= result["epsilon"] * (1 + 1e-9)


ALLOWANCE = {"semi-honest-server": "true", "distributed-colluders": "1", "distributed-dropouts": "2"}


def test_under_an_allowance_a_malformed_unmask_reply_leaves_its_site_out_not_the_run(tmp_path, monkeypatch):
    """The second review's finding: one site answering the ``unmask`` stage with no secure-aggregation record
    crashed the run (a KeyError outside the replies' parsing); it is that site's failure, and the round completes
    from the others' shares (its excess stays in the sum: more noise, never less)."""
    names = [f"site-{i}" for i in range(7)]
    folder, files, keys = _sites(tmp_path, names)
    original = secure_site._unmask
    monkeypatch.setattr(secure_site, "_unmask", lambda client, run, record: RecordDict({}) if client.name == "site-0"
                        else original(client, run, record))
    result = SecureGrid(folder, files, keys, node=ALLOWANCE, colluders=1, dropouts=2, **{"n-rounds": 1}).serve()
    assert result["history"][0]["replied"] == list(range(7)) and "discarded" not in result["history"][0]


def test_under_an_allowance_a_site_refuses_to_unmask_without_the_final_lists(tmp_path, monkeypatch):
    """The second review's finding, deployed: a server that sends one site ``unmask`` with the round's first lists
    (no ``final``, no signatures) while the round sums fewer sites had it reveal all its excess; the site refuses."""
    names = [f"site-{i}" for i in range(7)]
    folder, files, keys = _sites(tmp_path, names)
    original, refusals = secure_rounds.SecureAggregation._final_round, []

    def skipping(self, session, round_, sites, active, dropped, replies, *rest):
        message = secure_rounds._message(sites["site-4"], str(round_), {
            "stage": "unmask", "instance": session.instance, "active": active, "dropped": dropped, "signers": [],
            "signatures": []})
        [reply] = self.send([message])
        refusals.append(reply.has_error())
        return original(self, session, round_, sites, active, dropped, replies, *rest)

    monkeypatch.setattr(secure_rounds.SecureAggregation, "_final_round", skipping)
    result = SecureGrid(folder, files, keys, node=ALLOWANCE, colluders=1, dropouts=2, **{"n-rounds": 1}).serve()
    assert refusals == [True] and "discarded" not in result["history"][0]


def test_sites_gone_before_the_batch_count_as_dropped_for_the_share(tmp_path, monkeypatch):
    """The review's finding: two of seven sites gone before round 1's keys stage never enter the batch, so no list
    names them dropped; each of the five survivors still draws the share of level 2 (K − survivors), λ (K − t) /
    (K − t − 2), not λ: a share sized by the dropped list alone left 0.83 of V (0.67 with a colluder)."""
    from skfedriem.privacy.mechanisms import discrete

    names = [f"site-{i}" for i in range(7)]
    folder, files, keys = _sites(tmp_path, names)
    rates, draw = [], discrete._skellam
    monkeypatch.setattr(discrete, "_skellam", lambda source, rate, length: rates.append(rate) or draw(source, rate,
                                                                                                      length))
    result = SecureGrid(folder, files, keys, node={"semi-honest-server": "true", "distributed-colluders": "1",
                                                   "distributed-dropouts": "2"},
                        drop={("1", "keys"): ("site-5", "site-6")}, colluders=1, dropouts=2,
                        **{"n-rounds": 2}).serve()
    assert [h["replied"] for h in result["history"]] == [[0, 1, 2, 3, 4]] * 2
    deployed = list(rates)
    X = np.vstack([np.load(files[n]) for n in names])
    FederatedPCA(2, eps=4.0, solver="riemannian", n_rounds=2, batch_size=10, local_steps=1, clip=1.0,
                 noise="distributed", colluders=1, dropouts=2).fit(X, groups=np.repeat(np.arange(7), 100))
    share = rates[len(deployed)]  # the in-process run's first draw: λ, then its excess components
    assert len(deployed) == 10 and deployed == [pytest.approx(share * 6 / 4)] * 10


def test_a_site_that_restarts_loses_its_round_and_joins_a_new_batch(federation):
    """Site-1 restarts as round 3's messages go out (a new node, its secrets gone): round 3, which listed it as a
    survivor, is abandoned; round 4 sets up a new batch of keys with it and completes with all five."""
    folder, files, keys = federation
    result = SecureGrid(folder, files, keys, node={"semi-honest-server": "true"}, restart={("3", "round"): "site-1"},
                        **{"n-rounds": 4}).serve()
    replied = [h["replied"] for h in result["history"]]
    assert replied == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [], [0, 1, 2, 3, 4]]
    assert "discarded" in result["history"][2]


def test_a_resumed_run_sends_the_cut_round_as_a_new_release_charged_again(federation):
    """The server dies once every site has answered round 2 (their masked releases sent); resume=true sends round 2
    again: a new batch, fresh keys, masks and noise, charged again at every site and in the certificate."""
    folder, files, keys = federation
    grid = SecureGrid(folder, files, keys, node={"semi-honest-server": "true"}, crash={("2", "round")})
    with pytest.raises(RuntimeError, match="server crash"):
        grid.serve()
    grid.run_config = {**grid.run_config, "resume": "true"}
    result = grid.serve()
    assert [h["round"] for h in result["history"]] == [1, 2, 3]
    for name in SITES:  # the certificate counts round 2 twice, as every site's ε_central ledger does
        own, central, _ = ledgers(files[name])
        labels = [f["label"].split(" secure aggregation ")[0] for f in central.fits]
        assert labels == ["run 1 round 1", "run 1 round 2", "run 1 round 2", "run 1 round 3"]
        assert central.spent() == pytest.approx(result["epsilon"], rel=1e-6)


@pytest.mark.parametrize("lie", ["listed both ways", "two survivors"])
def test_a_site_sent_lists_it_must_refuse_is_not_charged_and_reveals_nothing(federation, monkeypatch, lie):
    """The server sends site-0 (node 1) lists that put site-1 among both survivors and dropped, or only two
    survivors: site-0 refuses before its charge (its ledgers stay empty) and answers nothing but the generic
    refusal; round 1 is abandoned (the others' releases, masked with it, stay masked), and from round 2 on the
    server lists site-0 as dropped and the rounds complete without it."""
    original = secure_rounds._message

    def lying(node, group, secagg, **records):
        if node == 1 and secagg.get("stage") == "round":
            others = [s for s in SITES if s != "site-0"]
            secagg = {**secagg, **({"dropped": ["site-1"]} if lie == "listed both ways" else
                                   {"active": ["site-0", "site-1"], "dropped": others[1:]})}
        return original(node, group, secagg, **records)

    monkeypatch.setattr(secure_rounds, "_message", lying)
    folder, files, keys = federation
    result = SecureGrid(folder, files, keys, node={"semi-honest-server": "true"}).serve()
    first, *later = result["history"]
    assert first["replied"] == [] and "discarded" in first  # abandoned: site-0's masks stay in the others'
    assert all(h["replied"] == [1, 2, 3, 4] and "discarded" not in h for h in later)  # then listed as dropped
    own, central, deviating = ledgers(files["site-0"])
    assert own.fits == [] and central.fits == [] and deviating.fits == []
    assert all(len(ledgers(files[n])[1].fits) == 3 for n in SITES[1:])  # round 1 too: they released, masked


def test_a_malformed_reply_leaves_its_site_out_and_the_run_goes_on(federation, monkeypatch):
    """A colluding site answers its keys with a roster size that is no number (the third review's crash): it is
    that site's failure, and the rounds run without it (listed as dropped)."""
    original = secure_site._make_keys

    def malformed(client, msg, run, record):
        out = original(client, msg, run, record)
        if client.name == "site-0":
            out["secagg"]["roster"] = "five"
        return out

    monkeypatch.setattr(secure_site, "_make_keys", malformed)
    folder, files, keys = federation
    result = SecureGrid(folder, files, keys, node={"semi-honest-server": "true"}).serve()
    assert all(h["replied"] == [1, 2, 3, 4] and "discarded" not in h for h in result["history"])


@pytest.mark.parametrize("bound, applied", [("semi-honest-server", 3), ("deviating-server", 1)])
def test_a_site_bounds_the_certificate_its_operator_names(federation, bound, applied):
    """max-epsilon 4.3 above the run's ε_central (≤ 4 for its 3 rounds) and below what a deviating server with
    t = 1 could learn from two of its rounds (4.74; one: 3.91): sites bounding ε_central take every round, sites
    bounding the deviating certificate refuse the second and third."""
    folder, files, keys = federation
    result = SecureGrid(folder, files, keys, node={bound: "true", "max-epsilon": 4.3}).serve()
    assert sum("discarded" not in h for h in result["history"]) == applied
    for name in SITES:
        own, central, deviating = ledgers(files[name])
        bounded = central if bound == "semi-honest-server" else deviating
        assert len(bounded.fits) == applied and bounded.spent() <= 4.3


def test_a_site_refuses_both_bounds(federation):
    folder, files, keys = federation
    name = SITES[0]
    node = {"noise": "distributed", "federation-keys": str(folder / "roster.txt"), "signing-key": keys[name]}
    with pytest.raises(ValueError, match="set one"):
        DistributedNoise.from_node_config({**node, "semi-honest-server": "true", "deviating-server": "true"}, name)
    assert DistributedNoise.from_node_config({**node, "deviating-server": "true"}, name).bounded == "deviating"
    for flag in ("semi-honest-server", "deviating-server"):  # accepted and ignored by a site of local noise before
        with pytest.raises(ValueError, match="this site's noise is 'local'"):
            DistributedNoise.from_node_config({"noise": "local", flag: "true"}, name)


def test_a_site_told_other_k_or_t_refuses_before_anything_is_charged(federation):
    folder, files, keys = federation
    result = SecureGrid(folder, files, keys, node={"semi-honest-server": "true"},
                        per_site={"site-4": {"distributed-clients": 4}}).serve()
    assert all(h["replied"] == [0, 1, 2, 3] for h in result["history"])
    assert ledgers(files["site-4"])[0].fits == [] and not (folder / "site-4.npy.privacy-ledger.central.json").exists()


def test_without_the_k_and_t_check_the_site_is_charged_for_a_round_it_was_not_told_of(federation, monkeypatch):
    monkeypatch.setattr(DistributedNoise, "check", lambda self, encoding: None)
    folder, files, keys = federation
    SecureGrid(folder, files, keys, node={"semi-honest-server": "true"},
               per_site={"site-4": {"distributed-clients": 4}}).serve()
    assert len(ledgers(files["site-4"])[0].fits) == 3


def test_a_site_of_local_noise_takes_no_round_of_distributed_noise(federation):
    folder, files, keys = federation
    result = SecureGrid(folder, files, keys, node={"noise": "local"}).serve()
    assert all(h["replied"] == [] and "discarded" in h for h in result["history"])
    assert all(ledgers(files[n])[0].fits == [] for n in SITES)


def test_by_default_max_epsilon_bounds_the_sites_own_share_and_refuses_before_any_key(federation):
    """One share's ε_local is 9.69 a round here, ε_central 2.98: a site bounding ε_local at 9 refuses every round."""
    folder, files, keys = federation
    result = SecureGrid(folder, files, keys, node={"max-epsilon": 9.0}).serve()
    assert all(h["replied"] == [] for h in result["history"])
    assert all(ledgers(files[n])[0].fits == [] for n in SITES)


def _site_message(folder, files, keys, content, group="1") -> tuple:
    config = {"n-clients": 5, "output": str(folder / "out"), **SETTINGS}
    node = {"data-path": files["site-0"], "name": "site-0", "max-epsilon": math.inf, "noise": "distributed",
            "federation-keys": str(folder / "roster.txt"), "signing-key": keys["site-0"]}
    context = Context(run_id=1, node_id=1, node_config=node, state=RecordDict(), run_config=config)
    message = Message(RecordDict(content), dst_node_id=1, message_type="train", group_id=group)
    message.metadata.__dict__["_message_id"] = str(uuid.uuid4())
    return client_apps["pca"](message, context)


def _keys_content(batch: str | None) -> dict:
    from skfedriem.models import PCAProjector
    import torch

    theta = {"weight": PCAProjector(5, 2, "grassmann", generator=torch.Generator().manual_seed(1)).weight.detach()}
    encoding = DistributedEncoding(25, 100.0, 30, 5000.0, 5, 1, rotation_seed=3)
    instructions = RoundInstructions(0.1, 1, 10, 1.0, 0.0, "fixed", "projavg", planned_records=100,
                                     encoding=encoding)
    content = {"theta": encode_arrays(theta), "instructions": encode_instructions(instructions)}
    if batch is not None:
        content["secagg"] = ConfigRecord({"stage": "keys", "batch": batch, "rounds": [1, 2]})
    return content


def test_a_release_of_distributed_noise_never_leaves_unmasked_and_a_batch_runs_once(federation):
    folder, files, keys = federation
    plain = _site_message(folder, files, keys, _keys_content(None))
    assert plain.has_error() and "refused" in plain.error.reason  # no secure aggregation: refused
    first = _site_message(folder, files, keys, _keys_content("b1"))
    assert not first.has_error() and [len(bytes(k)) for k in first.content["secagg"]["cipher"]] == [32, 32]
    again = _site_message(folder, files, keys, _keys_content("b1"))
    assert again.has_error() and "refused" in again.error.reason  # a replayed batch
    stranger = _site_message(folder, files, keys, {"secagg": ConfigRecord({
        "stage": "round", "instance": "b2/1", "from": [], "ciphertext": [], "active": SITES, "dropped": []})})
    assert stranger.has_error()  # an instance it never made: nothing revealed
    assert ledgers(files["site-0"])[0].fits == []


def test_deployed_sites_clip_adaptively_through_the_secure_sum_and_charge_the_count(tmp_path):
    """clip='auto' on deployed tangent sites under secure aggregation: each site's release carries its count in the
    last coordinate, the server steers the clip by the summed count, and every site's ledgers hold the in-process
    certificate (the Skellam step of the sum and the count)."""
    from skfedriem.datasets import make_spd_classification

    X, y, groups = make_spd_classification(5, 30, 4, random_state=0)
    lines, keys, files = [], {}, {}
    for i, name in enumerate(SITES):
        private, public = make_supernode_keys(tmp_path / "keys", name)
        keys[name], files[name] = str(private), str(tmp_path / f"{name}.npz")
        lines.append(f"{name} {public.read_text().strip()}")
        np.savez(files[name], X=X[groups == i], y=y[groups == i])
    (tmp_path / "roster.txt").write_text("\n".join(lines) + "\n")
    settings = {"n-rounds": 3, "eps": 4.0, "classes": "0,1", "batch-size": 10, "noise": "distributed",
                "clip": "auto", "local-steps": 1}
    result = SecureGrid(tmp_path, files, keys, kind="tangent", node={"semi-honest-server": "true"},
                        **settings).serve()
    assert result["epsilon"] <= 4.0
    history = result["history"]
    assert all(h["replied"] == [0, 1, 2, 3, 4] and "discarded" not in h for h in history)
    assert history[0]["clip"] == 1.0 and len({h["clip"] for h in history}) == 3
    assert all(h["clipped_fraction"] is not None for h in history)
    with (tmp_path / "out" / "estimator.pkl").open("rb") as f:
        encoding = pickle.load(f).plan_.privacy.encoding
    assert encoding.count_scale > 0
    for name in SITES:  # each site charged every round the sum's and the count's sensitivity, at the planned grid
        own, central, _ = ledgers(files[name])
        assert central.spent() == pytest.approx(result["epsilon"], rel=1e-6) and own.spent() > central.spent()
        for fit in central.fits:
            (step,) = fit["steps"]
            assert step["skellam"][1:] == pytest.approx(encoding.sensitivity(1.0), rel=1e-9)
