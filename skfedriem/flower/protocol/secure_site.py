"""A deployed site's stages of secure aggregation, and its consent to distributed noise.

A site takes a round of distributed noise only when its own node configuration
says ``noise = "distributed"`` (:class:`DistributedNoise`), and only under
secure aggregation: such a round's release carries a share of the noise, so
it must never reach the server but masked. The server sends ``train``
messages whose ``secagg`` record names the stage (what each step checks:
:mod:`skfedriem.secure_aggregation.site`):

* ``keys`` (once per batch of rounds): the encoding's K and t are checked
  against the site's own setting, and the batch's first round against its
  budget, *before* any key is made; the site answers one fresh pair of round
  keys per round of the batch, each signed over the run it sees in the
  message's metadata, that round and the instance.
* ``shares`` (once per batch): every site's signed keys, checked against the
  federation's roster; the site answers its encrypted shares.
* ``round`` (one message a round): θ_t, the instructions, the shares
  addressed to the site and the round's survivors and dropped sites. The
  site checks the iterate, its step plan, that the encoding is the
  instance's, the shares and the lists, which it signs; only then its guard
  charges the round (ε_local and ε_central, :class:`~skfedriem.flower.protocol.client_app.SiteGuard`),
  its one private step runs with fresh secret randomness, its noise share
  sized for the K − (survivors) sites the lists leave out (a dropout allowance d:
  :meth:`~skfedriem.privacy.mechanisms.discrete.DistributedEncoding.round_share`;
  the lists enter its masks), and it answers its masked release and its
  signature, with its unmasking shares when no site is dropped.
* ``final`` (a round with a dropout allowance d > 0): the final lists, once
  the server knows whose masked releases arrived (sites may drop out during
  the round); the site checks and signs them.
* ``unmask`` (a round with dropped sites, or with a dropout allowance): the
  survivors' signatures over the lists; the site reveals its shares only
  when at least T of them signed the lists it signed, and with them, under a
  dropout allowance, the sum of its excess noise components above the
  round's level (K − final survivors), which the server takes out of the
  sum (:func:`~skfedriem.privacy.mechanisms.discrete.remove_excess`).

Each instance's secrets live in this process's memory only (the site's
resident worker) until its round, or until :data:`KEPT_SESSIONS` newer
instances have been made; an instance seen before is refused (a replay), and
a round sent again is answered only by a new instance, with fresh keys, masks
and noise, charged anew: a release is never sent twice under different masks.
"""

from __future__ import annotations

import json
import math
import os
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np
import torch
from flwr.app import ConfigRecord, Message, RecordDict

from ...exceptions import InvalidInstructionsError
from ...federated import client_round
from ...federated.client import ClientState
from ...federated.instructions import ENCODED_RELEASE, EXCESS_NOISE, RoundInstructions, check_iterate, step_plan
from ...privacy.mechanisms.discrete import DistributedEncoding
from ...secure_aggregation import Binding, SignedKeys, SiteIdentity, SiteSession, threshold
from ...secure_aggregation.crypto import load_signing_key, read_roster
from .records import decode_arrays, decode_instructions, encode_arrays
from .replies import ReplyCache

__all__ = ["BATCH_ROUNDS", "KEPT_SESSIONS", "DistributedNoise", "answer_stage", "default_colluders", "round_digest"]

#: The most rounds one batch of keys may cover.
BATCH_ROUNDS = 64
#: Instances a site keeps (its oldest is forgotten: that round can no longer run).
KEPT_SESSIONS = 4 * BATCH_ROUNDS

# site -> (run, instance) -> SiteSession (the secrets: in this process's memory only)
_SESSIONS: dict[str, OrderedDict[tuple[str, str], SiteSession]] = {}
# (site, run, instance) -> the round's encoding and the excess components its release carries (a dropout allowance),
# until the unmask stage reveals those above the round's level
_EXCESS: dict[tuple[str, str, str], tuple[DistributedEncoding, np.ndarray]] = {}


def default_colluders(clients: int) -> int:
    """t when the site's node configuration names none: ⌈K / 10⌉, at least 1 when K > 1 (the estimators' default).

    Parameters
    ----------
    clients : int
        K.

    Returns
    -------
    int
    """
    return 0 if clients == 1 else max(1, math.ceil(clients / 10))


def round_digest(theta: dict[str, torch.Tensor], instructions: RoundInstructions) -> bytes:
    """What every site of a round must compute alike: θ_t bit for bit and the instructions but each site's size.

    Parameters
    ----------
    theta : dict of str to Tensor
    instructions : RoundInstructions

    Returns
    -------
    bytes
    """
    return bytes.fromhex(ReplyCache.key(theta, replace(instructions, planned_records=0)))


def instance_of(batch: str, round_: int) -> str:
    """The instance id of ``round_`` in ``batch``."""
    return f"{batch}/{int(round_)}"


@dataclass(frozen=True)
class DistributedNoise:
    """A site's consent to rounds of distributed noise, from its own node configuration.

    Parameters
    ----------
    identity : SiteIdentity
        The site's name, its signing key (its SuperNode's) and the federation's roster.
    clients : int
        K: the sites of every round, as the operator told this site.
    colluders : int
        t: how many of them may drop out or collude with the server.
    dropouts : int, default=0
        d, the dropout allowance: how many more may drop out of a round with
        its noise kept whole (node setting ``distributed-dropouts``).
    semi_honest_server : bool, default=False
        The operator trusts the server to run the protocol as written: the
        site's ``max-epsilon`` then bounds ε_central (its guarantee when the
        server learns only the sum of K − t honest sites' releases) rather
        than ε_local (its own share's, its guarantee against any server).
    deviating_server : bool, default=False
        The operator trusts no more than that at most t sites collude with the
        server, which may deviate from the protocol: ``max-epsilon`` then
        bounds the deviating certificate (the K − 2t honest shares such a
        server can leave in a sum), between the two.
    """

    identity: SiteIdentity
    clients: int
    colluders: int
    dropouts: int = 0
    semi_honest_server: bool = False
    deviating_server: bool = False

    def __post_init__(self) -> None:
        if self.semi_honest_server and self.deviating_server:
            raise ValueError("semi-honest-server and deviating-server each say what max-epsilon bounds: set one.")
        if not 0 <= self.colluders < self.clients:
            raise ValueError(f"distributed-colluders must be in [0, distributed-clients): got t = {self.colluders}, "
                             f"K = {self.clients}.")
        if not 0 <= self.dropouts < self.clients - self.colluders:
            raise ValueError(f"distributed-dropouts must be in [0, distributed-clients − distributed-colluders): got "
                             f"d = {self.dropouts}, K = {self.clients}, t = {self.colluders}.")
        threshold(self.clients, self.colluders, len(self.identity.roster), self.dropouts)  # ValueError when T > K

    @classmethod
    def from_node_config(cls, node, name: str) -> DistributedNoise | None:
        """The setting from a node configuration (None unless ``noise = "distributed"``); ValueError naming a
        missing or wrong key."""
        noise = str(node.get("noise", "local"))
        if noise not in ("local", "distributed"):
            raise ValueError(f"The node setting 'noise' must be 'local' or 'distributed'. Got {noise!r} instead.")
        if noise == "local":
            given = [key for key in ("semi-honest-server", "deviating-server")
                     if str(node.get(key, "false")).lower() == "true"]
            if given:  # what max-epsilon bounds under distributed noise: with local noise, ε_local always
                raise ValueError(f"The node settings {given} say what max-epsilon bounds under distributed noise; "
                                 "this site's noise is 'local'. Set noise = 'distributed', or drop them.")
            return None
        if str(node.get("client-timings", "false")).lower() == "true":
            raise ValueError("The site's node config sets noise = 'distributed' and client-timings = true: timings of "
                             "a site's work on its records would reach the server, which distributed noise keeps to "
                             "the sum of the releases. Drop client-timings.")
        missing = [key for key in ("federation-keys", "signing-key") if not str(node.get(key, ""))]
        if missing:
            raise ValueError(f"noise = 'distributed' needs the node settings {missing}: the federation's roster of "
                             "site keys and this site's own (SuperNode) private key.")
        roster = read_roster(str(node["federation-keys"]))
        identity = SiteIdentity(name, load_signing_key(str(node["signing-key"])), roster)
        clients = int(node.get("distributed-clients", len(roster)))
        colluders = int(node.get("distributed-colluders", default_colluders(clients)))
        return cls(identity, clients, colluders, int(node.get("distributed-dropouts", 0)),
                   str(node.get("semi-honest-server", "false")).lower() == "true",
                   str(node.get("deviating-server", "false")).lower() == "true")

    @property
    def bounded(self) -> str:
        """The certificate the site's ``max-epsilon`` bounds: ``"central"``, ``"deviating"`` or ``"local"``."""
        return "central" if self.semi_honest_server else "deviating" if self.deviating_server else "local"

    def check(self, encoding: DistributedEncoding) -> None:
        """InvalidInstructionsError unless the round's K, t and d are the site's own and it announces nothing (the
        site reads the dropped sites from the lists it signs)."""
        if (encoding.clients, encoding.colluders, encoding.dropouts) != (self.clients, self.colluders, self.dropouts):
            raise InvalidInstructionsError(
                f"The round's encoding is for K = {encoding.clients} sites, t = {encoding.colluders}, d = "
                f"{encoding.dropouts}; this site was told K = {self.clients}, t = {self.colluders}, d = "
                f"{self.dropouts} (node settings distributed-clients, distributed-colluders and distributed-dropouts).")
        if encoding.announced is not None:
            raise InvalidInstructionsError("The round's encoding announces dropped sites: a site reads them from the "
                                           "lists it signs, never from the instructions.")


def _field(record: ConfigRecord, key: str):
    if key not in record:
        raise InvalidInstructionsError(f"The secure-aggregation message lacks {key!r}.")
    return record[key]


def _columns(record: ConfigRecord, *keys: str) -> list[list]:
    columns = [list(_field(record, key)) for key in keys]
    if len({len(column) for column in columns}) > 1:
        raise InvalidInstructionsError(f"The secure-aggregation lists {keys} differ in length.")
    return columns


def _plan(client, instructions: RoundInstructions):
    """The step plan of ``instructions`` at this site, checked against its own setting (nothing is charged)."""
    plan = step_plan(instructions, client.n_records, client.recipe.module, client.recipe.unit)
    if not plan.mechanism.secure_sum:
        raise InvalidInstructionsError("A secure-aggregation round without an encoding: local noise needs none.")
    client.guard.distributed.check(plan.encoding)
    return plan


def _batch_rounds(record: ConfigRecord) -> list[int]:
    """The rounds a batch's keys are for: 1 to :data:`BATCH_ROUNDS` distinct rounds (numbered from 1)."""
    rounds = [int(r) for r in _field(record, "rounds")]
    if not 1 <= len(rounds) <= BATCH_ROUNDS or len(set(rounds)) != len(rounds) or min(rounds) < 1:
        raise InvalidInstructionsError(f"A batch of secure aggregation covers 1 to {BATCH_ROUNDS} distinct rounds; "
                                       f"got {len(rounds)}.")
    return rounds


def _remember_batch(path: str, run: str, batch: str) -> None:
    """Record (run, batch) in the site's file of started batches (next to its ledger, kept across restarts of its
    worker), or refuse a batch started before: a replay, which would have the site sign a second set of lists for
    the same instances."""
    import fcntl  # POSIX (as the resident worker that keeps the secrets); imported here so the module imports anywhere

    entry = json.dumps([run, batch])
    with open(path, "a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        if entry in f.read().splitlines():
            raise InvalidInstructionsError(f"Batch {batch!r} of run {run} was started before: a replay.")
        f.write(entry + "\n")
        f.flush()
        os.fsync(f.fileno())


def _make_keys(client, msg: Message, run: str, record: ConfigRecord) -> RecordDict:
    """Stage ``keys``: the batch checked against the site's own setting and budget; one signed key pair a round."""
    batch, rounds = str(_field(record, "batch")), _batch_rounds(record)
    plan = _plan(client, decode_instructions(msg.content["instructions"]))
    client.guard.check_budget(plan)  # refuse now what the first round's charge would refuse, before any key
    _remember_batch(client.guard.ledger_path + ".secure-aggregation", run, batch)
    encoding = plan.encoding
    keys = []
    for round_ in rounds:
        instance = instance_of(batch, round_)
        binding = Binding(run, str(round_), instance, encoding.clients, encoding.colluders, encoding.bits,
                          encoding.length, roster=len(client.guard.distributed.identity.roster),
                          dropouts=encoding.dropouts)
        session = SiteSession(client.guard.distributed.identity, binding)
        kept = _SESSIONS.setdefault(client.name, OrderedDict())
        kept[(run, instance)] = session
        keys.append(session.advertise())
        while len(kept) > KEPT_SESSIONS:
            (old_run, old_instance), _ = kept.popitem(last=False)
            _EXCESS.pop((client.name, old_run, old_instance), None)
    return RecordDict({"secagg": ConfigRecord({"cipher": [k.cipher for k in keys], "masking": [k.masking for k in keys],
                                               "signature": [k.signature for k in keys],
                                               "roster": len(client.guard.distributed.identity.roster)})})


def _session(client, run: str, instance: str) -> SiteSession:
    session = _SESSIONS.get(client.name, {}).get((run, instance))
    if session is None:
        raise InvalidInstructionsError("A secure-aggregation stage of an instance this site has not made, or has "
                                       "finished or forgotten.")
    return session


def _share(client, run: str, record: ConfigRecord) -> RecordDict:
    """Stage ``shares``: every site's signed keys for each round of the batch; this site's encrypted shares."""
    batch, rounds = str(_field(record, "batch")), [int(r) for r in _field(record, "rounds")]
    sites, cipher, masking, signature = _columns(record, "sites", "cipher", "masking", "signature")
    if len(sites) != len(rounds) * len(set(sites)):
        raise InvalidInstructionsError("The relayed keys are not one per site and round.")
    rows = list(zip(sites, cipher, masking, signature))
    to, ciphertexts, of_round = [], [], []
    for i, round_ in enumerate(rounds):  # the relay lists, for each round, every site's keys
        keys = {s: SignedKeys(bytes(c), bytes(m), bytes(g)) for s, c, m, g in rows[i::len(rounds)]}
        for peer, ciphertext in _session(client, run, instance_of(batch, round_)).share(keys).items():
            to.append(peer)
            ciphertexts.append(ciphertext)
            of_round.append(round_)
    return RecordDict({"secagg": ConfigRecord({"to": to, "ciphertext": ciphertexts, "round": of_round})})


def _round(client, msg: Message, run: str, record: ConfigRecord) -> RecordDict:
    """Stage ``round``: everything checked, then charged, run and masked; with no site dropped and no dropout
    allowance, the unmasking shares come with the release (one message a round)."""
    session = _session(client, run, str(_field(record, "instance")))
    if str(msg.metadata.group_id) != session.binding.round:
        raise InvalidInstructionsError(f"Instance {session.binding.instance!r} is for round {session.binding.round}, "
                                       f"not {msg.metadata.group_id}.")
    theta = check_iterate(client.recipe.module, decode_arrays(msg.content["theta"]))
    instructions = decode_instructions(msg.content["instructions"])
    plan = _plan(client, instructions)
    b, encoding = session.binding, plan.encoding
    if (encoding.clients, encoding.colluders, encoding.dropouts, encoding.bits, encoding.length) != (
            b.clients, b.colluders, b.dropouts, b.bits, b.length):
        raise InvalidInstructionsError("The round's encoding is not the one its keys were made for.")
    senders, ciphertexts = _columns(record, "from", "ciphertext")
    active, dropped = _lists(record)
    session.receive({str(s): bytes(c) for s, c in zip(senders, ciphertexts)})
    signature = session.sign_lists(active, dropped)
    client.guard.charge(plan, label=f"run {run} round {b.round} secure aggregation {b.instance}")
    # fresh OS entropy for every release, seeded client or not (the Flower simulation's): a seed's stream could be
    # restarted in another process and replay a release's noise, which two sums would then cancel
    state = ClientState.fresh(secure_mode=client.secure_mode)
    # the share sized for the K − (survivors) sites the signed lists leave out, dropped or never in the batch (the
    # lists enter the masks: a release sized for other lists cancels with no one's)
    sized = replace(instructions, encoding=replace(encoding, announced=b.clients - len(set(active))))
    [(submission, _)] = client_round.run_round(client.recipe, theta, [client.data], [state], sized)
    masked = session.masked(submission[ENCODED_RELEASE].numpy(), round_digest(theta, instructions))
    for key in [key for key in _EXCESS if key[:2] == (client.name, run)]:  # an earlier round's, never unmasked
        del _EXCESS[key]
    if EXCESS_NOISE in submission:  # kept at the site until the final lists say how much of it to take out
        _EXCESS[(client.name, run, b.instance)] = (sized.encoding, submission[EXCESS_NOISE].numpy())
    content = RecordDict({"masked": encode_arrays({"y": torch.from_numpy(masked)}),
                          "secagg": ConfigRecord({"signature": signature})})
    if not dropped and not b.dropouts:  # no mask key to reveal, no site may drop during the round: the
        content["secagg"].update(_unmasked(client, run, session, active, dropped, {}))  # self-mask shares now
    return content  # never a timing: it would time this site's own work, which only the sum may reveal


def _final(client, run: str, record: ConfigRecord) -> RecordDict:
    """Stage ``final`` (a dropout allowance): the lists of the sites whose masked releases arrived, signed."""
    session = _session(client, run, str(_field(record, "instance")))
    active, dropped = _lists(record)
    return RecordDict({"secagg": ConfigRecord({"signature": session.sign_final(active, dropped)})})


def _lists(record: ConfigRecord) -> tuple[list[str], list[str]]:
    (active,), (dropped,) = _columns(record, "active"), _columns(record, "dropped")
    return [str(s) for s in active], [str(s) for s in dropped]


def _unmasked(client, run: str, session: SiteSession, active: list[str], dropped: list[str],
              signatures: dict[str, bytes]) -> dict:
    """The site's unmasking shares (and, under a dropout allowance, its excess noise above the round's level), as a
    ConfigRecord's fields; the instance is then forgotten."""
    self_masks, mask_keys = session.unmask(active, dropped, signatures)  # the consistency check first
    instance = session.binding.instance
    _SESSIONS[client.name].pop((run, instance), None)
    fields = {"survivors": list(self_masks), "self_mask_shares": list(self_masks.values()),
              "dropped": list(mask_keys), "mask_key_shares": list(mask_keys.values())}
    kept = _EXCESS.pop((client.name, run, instance), None)
    if kept is not None:
        encoding, components = kept
        above = components[encoding.excess_above(encoding.level(session.binding.clients - len(set(active))))]
        fields["excess"] = [int(v) for v in np.mod(above.sum(0), encoding.modulus)]
    return fields


def _unmask(client, run: str, record: ConfigRecord) -> RecordDict:
    """Stage ``unmask`` (a round with dropped sites): the survivors' signatures over the lists; the shares."""
    session = _session(client, run, str(_field(record, "instance")))
    active, dropped = _lists(record)
    signers, signatures = _columns(record, "signers", "signatures")
    shares = _unmasked(client, run, session, active, dropped, {str(s): bytes(g) for s, g in zip(signers, signatures)})
    return RecordDict({"secagg": ConfigRecord(shares)})


def answer_stage(client, msg: Message) -> RecordDict:
    """The site's answer to one secure-aggregation message (its ``secagg`` record names the stage).

    Parameters
    ----------
    client : ClientSetup
        A deployed site's (its guard holds its :class:`DistributedNoise`).
    msg : flwr.app.Message

    Returns
    -------
    flwr.app.RecordDict
    """
    record = msg.content["secagg"]
    stage, run = str(_field(record, "stage")), str(msg.metadata.run_id)
    if client.guard is None or client.guard.distributed is None:
        raise InvalidInstructionsError("This site takes no round of distributed noise (its node setting noise is "
                                       "'local').")
    stages = {"keys": lambda: _make_keys(client, msg, run, record), "shares": lambda: _share(client, run, record),
              "round": lambda: _round(client, msg, run, record), "final": lambda: _final(client, run, record),
              "unmask": lambda: _unmask(client, run, record)}
    if stage not in stages:
        raise InvalidInstructionsError(f"Unknown secure-aggregation stage {stage!r}.")
    return stages[stage]()


