"""The server's side of a round of distributed noise on deployed sites: secure aggregation over Flower messages.

:class:`~skfedriem.flower.protocol.messages.FlowerTransport` hands a round
whose instructions carry an encoding to :func:`secure_round`, which drives
the four stages of :mod:`skfedriem.flower.protocol.secure_site` through the
Grid and returns, for every survivor, its release *still pairwise-masked*
(:class:`~skfedriem.secure_aggregation.ServerSession`): the engine sums them
into the sum of the survivors' releases, the only thing it learns. A site
that fails or leaves at any stage is left out of the later ones; one that
leaves after sharing its keys has its pairwise masks removed from the
survivors' releases with the shares the survivors reveal. A stage that
fewer than T sites answer abandons the round: no release is returned, and
the engine discards the round (it was charged when it started).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import numpy as np
import torch
from flwr.app import ConfigRecord, Message, RecordDict

from ...federated.instructions import ENCODED_RELEASE, RoundInstructions
from ...secure_aggregation import ServerSession, SignedKeys, TooFewSites

__all__ = ["secure_round"]


def _stage(send: Callable[[list[Message]], list[Message]], messages: dict[str, Message],
           failures: dict[str, str]) -> dict[str, Message]:
    """The replies to ``messages`` (by site), the failed ones recorded in ``failures``."""
    replies = send(list(messages.values()))
    by_id = {message.metadata.message_id: site for site, message in messages.items()}
    out = {}
    for reply in replies:
        site = by_id[reply.metadata.reply_to_message_id]
        if reply.has_error():
            failures[site] = reply.error.reason
        else:
            out[site] = reply
    failures.update({site: "no reply" for site in messages if site not in out and site not in failures})
    return out


def _message(node: int, t: int, secagg: dict, **records) -> Message:
    return Message(RecordDict({**records, "secagg": ConfigRecord(secagg)}), dst_node_id=node, message_type="train",
                   group_id=str(t + 1))


def secure_round(send: Callable[[list[Message]], list[Message]], t: int, sites: dict[str, int],
                 theta_record, instructions: dict[str, RoundInstructions], encode_instructions,
                 failures: dict[str, str], log: Callable[[str], None] = print) -> dict[str, tuple[dict, float]]:
    """Round ``t`` under secure aggregation: every survivor's pairwise-masked release, by site.

    Parameters
    ----------
    send : callable
        Pushes messages and returns their replies (a stage's wait).
    t : int
        The round (0-based).
    sites : dict of str to int
        The selected sites that can be reached, and their nodes.
    theta_record : flwr.app.ArrayRecord
        θ_t.
    instructions : dict of str to RoundInstructions
        Each site's, with the round's encoding.
    encode_instructions : callable
        Instructions -> ConfigRecord.
    failures : dict of str to str
        Filled with why a site fell out, by site.
    log : callable, default=print
        One line per stage (the deployment's log).

    Returns
    -------
    dict of str to (dict, float)
        Each survivor's ``{ENCODED_RELEASE: release}`` (masked pairwise) and the seconds its step took (NaN unless
        the site opts in); empty when the round was abandoned.
    """
    encoding = next(iter(instructions.values())).encoding
    instance = secrets.token_hex(16)
    session = ServerSession(instance, encoding.clients, encoding.colluders, encoding.bits, encoding.padded)
    try:
        replies = _stage(send, {site: _message(node, t, {"stage": "keys", "instance": instance}, theta=theta_record,
                                               instructions=encode_instructions(instructions[site]))
                                for site, node in sites.items()}, failures)
        keys = session.advertised({site: SignedKeys(bytes(r.content["secagg"]["cipher"]),
                                                    bytes(r.content["secagg"]["masking"]),
                                                    bytes(r.content["secagg"]["signature"]))
                                   for site, r in replies.items()})
        log(f"skfedriem: round {t + 1} secure aggregation: keys of {len(keys)} sites")
        relay = {"stage": "shares", "instance": instance, "sites": list(keys),
                 "cipher": [k.cipher for k in keys.values()], "masking": [k.masking for k in keys.values()],
                 "signature": [k.signature for k in keys.values()]}
        replies = _stage(send, {site: _message(sites[site], t, relay) for site in keys}, failures)
        routes = session.shared({site: dict(zip(r.content["secagg"]["to"], map(bytes, r.content["secagg"]["ciphertext"])))
                                 for site, r in replies.items()})
        log(f"skfedriem: round {t + 1} secure aggregation: shares of {len(routes)} sites routed")
        replies = _stage(send, {site: _message(sites[site], t, {"stage": "masked", "instance": instance,
                                                                "from": list(routes[site]),
                                                                "ciphertext": list(routes[site].values())})
                                for site in routes}, failures)
        seconds = {site: _seconds(r) for site, r in replies.items()}
        active, dropped = session.received({site: _masked(r) for site, r in replies.items()})
        log(f"skfedriem: round {t + 1} secure aggregation: masked releases of {len(active)} sites, "
            f"{len(dropped)} dropped")
        replies = _stage(send, {site: _message(sites[site], t, {"stage": "unmask", "instance": instance,
                                                                "active": active, "dropped": dropped})
                                for site in active}, failures)
        entries = session.unmasked({site: _unmask_shares(r.content["secagg"]) for site, r in replies.items()})
    except TooFewSites as error:
        log(f"skfedriem: round {t + 1} secure aggregation abandoned: {error}")
        return {}
    return {site: ({ENCODED_RELEASE: torch.from_numpy(entry)}, seconds[site]) for site, entry in entries.items()}


def _unmask_shares(record: ConfigRecord) -> tuple[dict[str, bytes], dict[str, bytes]]:
    return (dict(zip(record["survivors"], map(bytes, record["self_mask_shares"]))),
            dict(zip(record["dropped"], map(bytes, record["mask_key_shares"]))))


def _masked(reply: Message) -> np.ndarray:
    return np.array(reply.content["masked"]["y"].numpy(), dtype=np.int64, copy=True)


def _seconds(reply: Message) -> float:
    metrics = reply.content.metric_records.get("metrics")
    return float("nan") if metrics is None else float(metrics["submission_seconds"])
