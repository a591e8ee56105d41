"""The server's side of rounds of distributed noise on deployed sites: secure aggregation over Flower messages.

:class:`~skfedriem.flower.protocol.messages.FlowerTransport` hands every
round whose instructions carry an encoding to a :class:`SecureAggregation`,
which keeps the run's current batch of protocol instances. A batch is set up
in two messages to each site (``keys`` and ``shares``, for up to
:data:`~skfedriem.flower.protocol.secure_site.BATCH_ROUNDS` rounds ahead);
each round then takes one message per site (``round``; see
:mod:`skfedriem.flower.protocol.secure_site`), and returns, for every
survivor, its release *still pairwise-masked*
(:class:`~skfedriem.secure_aggregation.ServerSession`): the engine sums them
into the sum of the survivors' releases, the only thing it learns.

A participant of the batch that is not reachable when a round starts is
listed as dropped: the round then takes a second message (``unmask``) that
carries the survivors' signatures over the lists, against which they reveal
the shares that remove its pairwise masks, and completes without it. With a
dropout allowance d, up to t + d sites may be listed so, and each survivor
draws its noise share for the K − (survivors) sites its lists leave out, so that the
sum's noise stays what the plan certified. A participant that fails *during* a round (its
masked release missing) makes the round abandoned: nothing is returned and
the engine discards the round (it was charged when it started); it is listed
as dropped from the next round on. Under a dropout allowance (d > 0) a round
instead takes three messages: ``round``, then ``final`` (the sites whose
masked releases arrived sign the final lists), then ``unmask`` (against T
signatures over them: the shares, and each survivor's excess noise above
the round's level, which the server takes out of its entry), so that up to
t + d sites may drop out during the round too, the noise kept whole. A new batch is set up when the current
one runs out, has fewer than T reachable participants, a site joined since
it was made, or a participant restarted (its node changed: its keys are
lost; it is listed as dropped until then).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import numpy as np
import torch
from flwr.app import ConfigRecord, Message, RecordDict

from ...federated.instructions import ENCODED_RELEASE, RoundInstructions
from ...secure_aggregation import RoundAbandoned, ServerSession, SignedKeys
from .records import encode_arrays, encode_instructions
from .secure_site import BATCH_ROUNDS, instance_of, round_digest

__all__ = ["SecureAggregation"]

Send = Callable[[list[Message]], list[Message]]


def _message(node: int, group: str, secagg: dict, **records) -> Message:
    return Message(RecordDict({**records, "secagg": ConfigRecord(secagg)}), dst_node_id=node, message_type="train",
                   group_id=group)


def _parsed(replies: dict[str, Message], parse: Callable[[Message], object],
            failures: dict[str, str]) -> dict[str, object]:
    """Each reply as ``parse`` reads it; a reply it cannot read is that site's failure (a malformed reply from a
    colluding site leaves it out, it does not stop the run)."""
    out = {}
    for site, reply in replies.items():
        try:
            out[site] = parse(reply)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            failures[site] = "a malformed reply"
    return out


def _stage(send: Send, messages: dict[str, Message], failures: dict[str, str]) -> dict[str, Message]:
    """The replies to ``messages`` (by site); why the others failed goes to ``failures``."""
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


class SecureAggregation:
    """A run's secure aggregation at the server: its batches of instances, and one round at a time.

    Parameters
    ----------
    send : callable
        Pushes messages and returns their replies (one stage's wait).
    log : callable, default=print
        One line per batch and per round (the deployment's log).
    batch_rounds : int, default=BATCH_ROUNDS
        Rounds a batch of keys covers.
    """

    def __init__(self, send: Send, *, log: Callable[[str], None] = print, batch_rounds: int = BATCH_ROUNDS) -> None:
        self.send = send
        self.log = log
        self.batch_rounds = int(batch_rounds)
        self.sessions: dict[int, ServerSession] = {}  # round (1-based) -> its instance
        self.nodes: dict[str, int] = {}  # the node of each site asked to join the current batch
        self.declined: set[str] = set()  # sites asked that did not become participants
        self.lost: set[str] = set()  # participants of the current batch that failed during a round

    def run_round(self, t: int, sites: dict[str, int], theta: dict[str, torch.Tensor],
                  instructions: dict[str, RoundInstructions], failures: dict[str, str]) -> dict[str, tuple[dict, float]]:
        """Round ``t`` (0-based): each survivor's pairwise-masked release and its step's seconds, by site.

        Parameters
        ----------
        t : int
        sites : dict of str to int
            The selected sites that can be reached, and their nodes.
        theta : dict of str to Tensor
            θ_t.
        instructions : dict of str to RoundInstructions
            Each reachable site's, with the round's encoding (the same for all).
        failures : dict of str to str
            Filled with why a site fell out, by site.

        Returns
        -------
        dict of str to (dict, float)
            ``{ENCODED_RELEASE: release}`` (masked pairwise) and the seconds its step took (NaN unless the site
            opts in); empty when the round was abandoned.
        """
        round_ = t + 1
        try:
            session = self._session(round_, sites, instructions, failures)
            active, dropped = session.lists(set(sites) - self.lost)
            return self._round(session, round_, sites, active, dropped, theta, instructions, failures)
        except RoundAbandoned as error:
            self.log(f"skfedriem: round {round_} secure aggregation abandoned: {error}")
            return {}

    def _session(self, round_: int, sites: dict[str, int], instructions: dict[str, RoundInstructions],
                 failures: dict[str, str]) -> ServerSession:
        """The round's instance: the current batch's, or a new batch's when it cannot serve the round."""
        session = self.sessions.get(round_)
        joined = set(sites) - set(self.nodes) - self.declined  # new since the batch was made
        restarted = {site for site in sites if self.nodes.get(site, sites[site]) != sites[site]}  # its keys are lost
        self.lost |= restarted
        usable = set(sites) - self.lost
        if session is None or joined or restarted or len(usable & set(session.participants)) < session.threshold:
            self._set_up(round_, sites, instructions, failures)
            session = self.sessions[round_]
        return session

    def _set_up(self, first: int, sites: dict[str, int], instructions: dict[str, RoundInstructions],
                failures: dict[str, str]) -> None:
        """A new batch for rounds ``first`` ... ``first + batch_rounds − 1``: keys, then shares."""
        self.sessions, self.nodes, self.lost = {}, dict(sites), set()
        batch, rounds = secrets.token_hex(16), list(range(first, first + self.batch_rounds))
        self._keys(batch, rounds, sites, instructions, failures)
        participants = self._shares(batch, rounds, sites, failures)
        self.declined = set(sites) - participants
        self.log(f"skfedriem: secure aggregation: keys and shares of {len(participants)} sites for rounds "
                 f"{rounds[0]}-{rounds[-1]}")

    def _keys(self, batch: str, rounds: list[int], sites: dict[str, int],
              instructions: dict[str, RoundInstructions], failures: dict[str, str]) -> None:
        """Stage ``keys``: each site's signed key pairs, one instance a round."""
        encoding = next(iter(instructions.values())).encoding
        replies = _stage(self.send, {site: _message(node, str(rounds[0]), {"stage": "keys", "batch": batch,
                                                                          "rounds": rounds},
                                                    instructions=_encoded(instructions[site]))
                                     for site, node in sites.items()}, failures)
        def read(reply: Message) -> tuple[int, list[SignedKeys]]:
            record = reply.content["secagg"]
            keys = [SignedKeys(bytes(c), bytes(m), bytes(g))
                    for c, m, g in zip(record["cipher"], record["masking"], record["signature"], strict=True)]
            if len(keys) != len(rounds):
                raise ValueError("one key pair a round")
            return int(record["roster"]), keys

        answers = _parsed(replies, read, failures)
        # the roster's size the sites signed for: it sets their threshold, and a site that states another fails
        # their checks; the most common statement, the larger on a tie (a larger N only asks for more shares)
        sizes = sorted((size for size, _ in answers.values()), reverse=True)
        roster = max(sizes, key=sizes.count) if sizes else None
        for i, round_ in enumerate(rounds):
            try:
                session = ServerSession(instance_of(batch, round_), encoding.clients, encoding.colluders,
                                        encoding.bits, encoding.length, roster, encoding.dropouts)
                session.advertised({site: keys[i] for site, (_, keys) in answers.items()})
            except ValueError as error:  # no threshold for that roster: nothing can be unmasked
                raise RoundAbandoned(str(error)) from None
            self.sessions[round_] = session

    def _shares(self, batch: str, rounds: list[int], sites: dict[str, int], failures: dict[str, str]) -> set[str]:
        """Stage ``shares``: every site's keys relayed, the encrypted shares routed; the participants."""
        keyed = sorted(self.sessions[rounds[0]].keys)
        relay = _relay(batch, rounds, keyed, self.sessions)
        replies = _stage(self.send, {site: _message(sites[site], str(rounds[0]), relay) for site in keyed}, failures)
        outgoing: dict[int, dict[str, dict[str, bytes]]] = {r: {} for r in rounds}
        answers = _parsed(replies, lambda reply: _share_rows(reply, self.sessions), failures)
        for site, rows in answers.items():
            for round_, peer, ciphertext in rows:
                outgoing[round_].setdefault(site, {})[peer] = ciphertext
        for round_ in rounds:
            self.sessions[round_].shared(outgoing[round_])
        return set(answers)

    def _round(self, session: ServerSession, round_: int, sites: dict[str, int], active: list[str],
               dropped: list[str], theta: dict[str, torch.Tensor], instructions: dict[str, RoundInstructions],
               failures: dict[str, str]) -> dict[str, tuple[dict, float]]:
        theta_record = encode_arrays(theta)
        messages = {site: _message(sites[site], str(round_), {
            "stage": "round", "instance": session.instance, "from": list(session.routes[site]),
            "ciphertext": list(session.routes[site].values()), "active": active, "dropped": dropped},
            theta=theta_record, instructions=_encoded(instructions[site])) for site in active}
        replies = _stage(self.send, messages, failures)
        self.lost |= set(active) - set(replies)  # listed as dropped from the next round on
        if session.dropouts:
            return self._final_round(session, round_, sites, active, dropped, replies, theta, instructions,
                                     failures)
        missing = sorted(set(active) - set(replies))
        if missing:  # their pairwise masks cannot be removed: abandoned before anyone reveals a mask key
            raise RoundAbandoned(f"survivors {missing} sent no masked release.")
        masked = _parsed(replies, lambda r: _masked(r, session.length), failures)
        if set(masked) != set(active):  # a survivor's release unreadable: its masks cannot be removed
            raise RoundAbandoned(f"survivors {sorted(set(active) - set(masked))} sent no readable masked release.")
        seconds = {site: _seconds(r) for site, r in replies.items()}
        if dropped:  # the mask keys of the dropped: only against T survivors' signatures over the same lists
            signatures = _parsed(replies, lambda r: bytes(r.content["secagg"]["signature"]), failures)
            signed = {"stage": "unmask", "instance": session.instance, "active": active, "dropped": dropped,
                      "signers": list(signatures), "signatures": list(signatures.values())}
            replies = _stage(self.send, {site: _message(sites[site], str(round_), signed) for site in replies},
                             failures)
        shares = _parsed(replies, lambda r: _shares(r.content["secagg"]), failures)
        entries = session.unmasked(masked, shares, active, dropped, round_digest(theta, instructions[active[0]]))
        self.log(f"skfedriem: round {round_} secure aggregation: {len(active)} survivors, {len(dropped)} dropped")
        return {site: ({ENCODED_RELEASE: torch.from_numpy(entry)}, seconds[site]) for site, entry in entries.items()}


    def _final_round(self, session: ServerSession, round_: int, sites: dict[str, int], active: list[str],
                     dropped: list[str], replies: dict[str, Message], theta: dict[str, torch.Tensor],
                     instructions: dict[str, RoundInstructions],
                     failures: dict[str, str]) -> dict[str, tuple[dict, float]]:
        """A round under a dropout allowance, once the masked releases are in: the final lists signed by the sites
        whose releases arrived, then their shares and excess noise against T signatures over them."""
        masked = _parsed(replies, lambda r: _masked(r, session.length), failures)
        final = sorted(masked)
        gone = sorted(set(active) - set(final) | set(dropped))
        if len(final) < session.threshold:
            raise RoundAbandoned(f"{len(final)} masked releases arrived, fewer than T = {session.threshold}.")
        lists = {"instance": session.instance, "active": final, "dropped": gone}
        signed = _stage(self.send, {site: _message(sites[site], str(round_), {"stage": "final", **lists})
                                    for site in final}, failures)
        signatures = _parsed(signed, lambda r: bytes(r.content["secagg"]["signature"]), failures)
        unmask = {"stage": "unmask", **lists, "signers": list(signatures), "signatures": list(signatures.values())}
        answers = _stage(self.send, {site: _message(sites[site], str(round_), unmask) for site in signatures},
                         failures)
        shares = _parsed(answers, lambda r: _shares(r.content["secagg"]), failures)
        excess = {site: above for site, above in _parsed(answers, lambda r: _excess(r.content["secagg"],
                                                                                    session.length),
                                                           failures).items() if above is not None}
        entries = session.unmasked(masked, shares, final, gone, round_digest(theta, instructions[active[0]]),
                                   masked_with=(active, dropped))
        modulus = 1 << session.bits
        for site, above in excess.items():  # a site that revealed none keeps its excess in: more noise, never less
            entries[site] = np.mod(entries[site] - above, modulus)
        # below level d at the start, every survivor kept components apart: one that revealed none keeps them in
        kept = sorted(set(final) - set(excess)) if session.clients - len(active) < session.dropouts else []
        self.log(f"skfedriem: round {round_} secure aggregation: {len(final)} survivors, {len(gone)} dropped"
                 + (f"; {kept} did not answer the unmask stage: their excess noise stays in the sum" if kept else ""))
        return {site: ({ENCODED_RELEASE: torch.from_numpy(entry)}, _seconds(replies[site]))
                for site, entry in entries.items()}


def _excess(record: ConfigRecord, length: int) -> np.ndarray | None:
    """A site's revealed excess noise above the round's level (a dropout allowance), ``(length,)``; None when it
    kept none apart (its share drawn at the round's level)."""
    if "excess" not in record:
        return None
    values = np.asarray(list(record["excess"]), dtype=np.int64)
    if values.shape != (length,):
        raise ValueError(f"excess noise of shape {values.shape}")
    return values


def _encoded(instructions: RoundInstructions) -> ConfigRecord:
    return encode_instructions(instructions)


def _shares(record: ConfigRecord) -> tuple[dict[str, bytes], dict[str, bytes]]:
    return (dict(zip(map(str, record["survivors"]), map(bytes, record["self_mask_shares"]), strict=True)),
            dict(zip(map(str, record["dropped"]), map(bytes, record["mask_key_shares"]), strict=True)))


def _masked(reply: Message, length: int) -> np.ndarray:
    y = np.array(reply.content["masked"]["y"].numpy(), dtype=np.int64, copy=True)
    if y.shape != (length,):
        raise ValueError(f"a masked release of shape {y.shape}")
    return y


def _seconds(reply: Message) -> float:
    metrics = reply.content.metric_records.get("metrics")
    try:
        return float("nan") if metrics is None else float(metrics["submission_seconds"])
    except (KeyError, TypeError, ValueError):
        return float("nan")


def _share_rows(reply: Message, sessions: dict) -> list[tuple[int, str, bytes]]:
    """A site's encrypted shares, (round, recipient, ciphertext) each; ValueError for a round outside the batch."""
    record = reply.content["secagg"]
    rows = [(int(r), str(p), bytes(c)) for p, c, r in zip(record["to"], record["ciphertext"], record["round"],
                                                          strict=True)]
    if any(r not in sessions for r, _, _ in rows):
        raise ValueError("a share for a round outside the batch")
    return rows


def _relay(batch: str, rounds: list[int], keyed: list[str], sessions: dict) -> dict:
    """Stage ``shares``' message: every keyed site's signed keys of every round of the batch."""
    return {"stage": "shares", "batch": batch, "rounds": rounds, "sites": [s for s in keyed for _ in rounds],
            **{key: [getattr(sessions[r].keys[s], key) for s in keyed for r in rounds]
               for key in ("cipher", "masking", "signature")}}
