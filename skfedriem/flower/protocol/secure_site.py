"""A deployed site's stages of secure aggregation, and its consent to distributed noise.

A site takes a round of distributed noise only when its own node configuration
says ``noise = "distributed"`` (:class:`DistributedNoise`), and only under
secure aggregation: such a round's release carries a share of the noise, so
it must never reach the server but masked. The server drives four ``train``
messages per round (their ``secagg`` record names the stage; see
:mod:`skfedriem.secure_aggregation.site` for what each checks):

1. ``keys``: θ_t and the instructions, checked as for any round (the iterate,
   the step plan), then the encoding's K and t against the site's own
   setting, *before* anything is computed or charged; the site answers its
   fresh round keys, signed over the run and round it sees in the message's
   metadata, the instance, and a digest of θ_t and the instructions.
2. ``shares``: every site's signed keys, checked against the federation's
   roster; the site answers its encrypted shares.
3. ``masked``: the shares addressed to the site, authenticated; the site's
   guard charges the round (ε_local and ε_central, :class:`SiteGuard`), its
   one private step runs with fresh secret randomness, and its release
   leaves masked.
4. ``unmask``: survivors and dropped sites, checked; the site's shares.

Each instance's secrets live in this process's memory only (the site's
resident worker), until its unmasking or until :data:`KEPT_SESSIONS` newer
instances have started; an instance seen before is refused (a replay), and
a repeated round is a new instance with fresh keys, masks and noise, charged
anew: a cached release is never sent twice under different masks.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import torch
from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict

from ...exceptions import InvalidInstructionsError
from ...federated import client_round
from ...federated.client import ClientState
from ...federated.instructions import ENCODED_RELEASE, check_iterate, step_plan
from ...privacy.discrete import DistributedEncoding
from ...secure_aggregation import Binding, SignedKeys, SiteIdentity, SiteSession
from ...secure_aggregation.crypto import load_signing_key, read_roster
from .messages import decode_arrays, decode_instructions, encode_arrays
from .replies import ReplyCache

__all__ = ["KEPT_SESSIONS", "STAGES", "DistributedNoise", "answer_stage", "default_colluders"]

#: The stages of a round under secure aggregation, in order.
STAGES = ("keys", "shares", "masked", "unmask")
#: Unfinished instances a site keeps (the oldest is forgotten: its round can no longer be unmasked).
KEPT_SESSIONS = 8

# (site, run, instance) -> (session, θ_t, instructions, plan); and every (site, run, instance) started in this process
_SESSIONS: OrderedDict[tuple[str, str, str], tuple] = OrderedDict()
_STARTED: set[tuple[str, str, str]] = set()


def default_colluders(clients: int) -> int:
    """t when the site's node configuration names none: ⌈K / 10⌉, at least 1 when K > 1 (the estimators' default)."""
    return 0 if clients == 1 else max(1, math.ceil(clients / 10))


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
    semi_honest_server : bool, default=False
        The operator trusts the server to run the protocol as written: the
        site's ``max-epsilon`` then bounds ε_central (its guarantee when the
        server only sees the sum) rather than ε_local (its own share's).
    """

    identity: SiteIdentity
    clients: int
    colluders: int
    semi_honest_server: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.colluders < self.clients:
            raise ValueError(f"distributed-colluders must be in [0, distributed-clients): got t = {self.colluders}, "
                             f"K = {self.clients}.")

    @classmethod
    def from_node_config(cls, node, name: str) -> DistributedNoise | None:
        """The setting from a node configuration (None unless ``noise = "distributed"``); ValueError naming a
        missing or wrong key."""
        noise = str(node.get("noise", "local"))
        if noise not in ("local", "distributed"):
            raise ValueError(f"The node setting 'noise' must be 'local' or 'distributed'. Got {noise!r} instead.")
        if noise == "local":
            return None
        missing = [key for key in ("federation-keys", "signing-key") if not str(node.get(key, ""))]
        if missing:
            raise ValueError(f"noise = 'distributed' needs the node settings {missing}: the federation's roster of "
                             "site keys and this site's own (SuperNode) private key.")
        roster = read_roster(str(node["federation-keys"]))
        identity = SiteIdentity(name, load_signing_key(str(node["signing-key"])), roster)
        clients = int(node.get("distributed-clients", len(roster)))
        colluders = int(node.get("distributed-colluders", default_colluders(clients)))
        return cls(identity, clients, colluders, str(node.get("semi-honest-server", "false")).lower() == "true")

    def check(self, encoding: DistributedEncoding) -> None:
        """InvalidInstructionsError unless the round's K and t are the site's own."""
        if (encoding.clients, encoding.colluders) != (self.clients, self.colluders):
            raise InvalidInstructionsError(
                f"The round's encoding is for K = {encoding.clients} sites, t = {encoding.colluders}; this site "
                f"was told K = {self.clients}, t = {self.colluders} (node settings distributed-clients and "
                "distributed-colluders).")


def _field(record: ConfigRecord, key: str):
    if key not in record:
        raise InvalidInstructionsError(f"The secure-aggregation message lacks {key!r}.")
    return record[key]


def _listed(record: ConfigRecord, *keys: str) -> list[list]:
    columns = [list(_field(record, key)) for key in keys]
    if len({len(column) for column in columns}) > 1:
        raise InvalidInstructionsError(f"The secure-aggregation lists {keys} differ in length.")
    return columns


def _start(client, msg: Message, key: tuple[str, str, str]) -> RecordDict:
    """Stage ``keys``: check the round against the site's own settings; its signed keys."""
    guard = client.guard
    if guard is None or guard.distributed is None:
        raise InvalidInstructionsError("This site takes no round of distributed noise (its node setting noise is "
                                       "'local').")
    _, run, instance = key
    if key in _STARTED:
        raise InvalidInstructionsError(f"Instance {instance!r} of run {run} was started before: a replay.")
    theta = check_iterate(client.recipe.module, decode_arrays(msg.content["theta"]))
    instructions = decode_instructions(msg.content["instructions"])
    plan = step_plan(instructions, client.n_records, client.recipe.module, client.recipe.unit)
    if plan.encoding is None:
        raise InvalidInstructionsError("A secure-aggregation round without an encoding: local noise needs none.")
    guard.distributed.check(plan.encoding)
    guard.check_budget(plan)  # refuse now what the charge would refuse, before any key is made
    binding = Binding(run, str(msg.metadata.group_id), instance, bytes.fromhex(ReplyCache.key(theta, instructions)),
                      plan.encoding.clients, plan.encoding.colluders, plan.encoding.bits, plan.encoding.padded)
    session = SiteSession(guard.distributed.identity, binding)
    _STARTED.add(key)
    _SESSIONS[key] = session, theta, instructions, plan
    while len(_SESSIONS) > KEPT_SESSIONS:
        _SESSIONS.popitem(last=False)
    keys = session.advertise()
    return RecordDict({"secagg": ConfigRecord({"cipher": keys.cipher, "masking": keys.masking,
                                               "signature": keys.signature})})


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
    stage, instance, run = str(_field(record, "stage")), str(_field(record, "instance")), str(msg.metadata.run_id)
    key = (str(client.name), run, instance)
    if stage == "keys":
        return _start(client, msg, key)
    if stage not in STAGES or key not in _SESSIONS:
        raise InvalidInstructionsError(f"A secure-aggregation stage {stage!r} of an instance this site has not "
                                       "started, or has finished or forgotten.")
    session, theta, instructions, plan = _SESSIONS[key]
    if str(msg.metadata.group_id) != session.binding.round:
        raise InvalidInstructionsError("A secure-aggregation stage sent in another round than its instance's.")
    if stage == "shares":
        sites, cipher, masking, signature = _listed(record, "sites", "cipher", "masking", "signature")
        out = session.share({s: SignedKeys(c, m, g) for s, c, m, g in zip(sites, cipher, masking, signature)})
        return RecordDict({"secagg": ConfigRecord({"to": list(out), "ciphertext": list(out.values())})})
    if stage == "masked":
        senders, ciphertexts = _listed(record, "from", "ciphertext")
        session.receive(dict(zip(senders, ciphertexts)))
        client.guard.charge(plan, label=f"run {run} round {session.binding.round} secure aggregation {instance}")
        state = ClientState.fresh(secure_mode=client.secure_mode)  # fresh OS entropy, never a cached release
        [(submission, seconds)] = client_round.run_round(client.recipe, theta, [client.data], [state], instructions)
        masked = session.masked(submission[ENCODED_RELEASE].numpy())
        content = RecordDict({"masked": encode_arrays({"y": torch.from_numpy(masked)})})
        if client.timings:
            content["metrics"] = MetricRecord({"submission_seconds": seconds})
        return content
    active, = _listed(record, "active")
    dropped, = _listed(record, "dropped")
    del _SESSIONS[key]  # one unmasking per instance, whatever it answers
    self_masks, mask_keys = session.unmask([str(s) for s in active], [str(s) for s in dropped])
    return RecordDict({"secagg": ConfigRecord({"survivors": list(self_masks), "self_mask_shares": list(self_masks.values()),
                                               "dropped": list(mask_keys), "mask_key_shares": list(mask_keys.values())})})


