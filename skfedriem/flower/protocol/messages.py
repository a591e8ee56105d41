"""The skfedriem protocol over Flower's Message API: what travels, and the server's transport.

Flower only moves arrays here. The local steps (:func:`~skfedriem.federated.client.run_client_round`),
the aggregation and the accountant (:meth:`~skfedriem.federated.FederatedTrainer.serve`) are the
engine's own code. Two message types:

* ``query`` (server → every node): the reply carries the client's ``name``,
  ``n_records`` (a deployed site's: the records in its data file, whatever the
  run; public under substitution neighbours; the server needs the smallest m_i
  to calibrate σ) and ``input_shape``, the shape of one record.
* ``train`` (server → selected nodes): θ_t as an ArrayRecord and the round's
  public instructions as a ConfigRecord (with the m_i the server planned the
  client's round for, which a client holding another number refuses); the reply carries only Sub(θ_t, θ_i)
  (and the time Sub took, from a site that opts in).
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from flwr.app import Message, RecordDict

from ...federated.instructions import RoundInstructions
from ...federated.noise_placement import placement_of
from .records import decode_arrays, decode_instructions, encode_arrays, encode_instructions
from .secure_rounds import SecureAggregation

__all__ = ["ClientInfo", "FlowerTransport", "NodeDirectory", "decode_arrays", "decode_instructions", "encode_arrays",
           "encode_instructions"]


@dataclass(frozen=True)
class ClientInfo:
    """What a node says of its client in reply to ``query``: all public.

    Parameters
    ----------
    name : str
        The client's name.
    n_records : int
        m_i.
    input_shape : tuple of int
        The shape of one record's input.
    """

    name: str
    n_records: int
    input_shape: tuple[int, ...]


def _describe(reply) -> ClientInfo:
    info = reply.content["client"]
    return ClientInfo(str(info["name"]), int(info["n_records"]), tuple(int(s) for s in info["input_shape"]))


class NodeDirectory:
    """Which Flower node serves which client, kept up to date as sites leave and come back.

    A site that restarts gets a new node id; the directory learns it by
    asking every node it does not know yet for its client's name.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    query_timeout : float, default=30
        Seconds to wait for an unknown node's description in one attempt.
    """

    def __init__(self, grid, *, query_timeout: float = 30.0) -> None:
        self.grid = grid
        self.query_timeout = query_timeout
        self.clients: dict[str, ClientInfo] = {}
        self.node_of: dict[str, int] = {}
        self._asked: set[int] = set()
        self._pending: dict[str, int] = {}  # query message id -> node, until its reply is in

    def _ask(self, nodes: list[int], timeout: float) -> None:
        """Ask ``nodes`` who they are, and collect every reply that has come in within ``timeout``.

        A query stays pending until its node answers: on a loaded machine a
        site's ClientApp may take longer than one attempt to start, and its late
        reply still counts (asking again would only queue another query behind it).
        """
        waiting = set(self._pending.values())
        fresh = [node for node in nodes if node not in waiting]
        if fresh:
            queries = [Message(RecordDict(), dst_node_id=node, message_type="query") for node in fresh]
            self._pending.update(zip(self.grid.push_messages(queries), fresh))
        deadline = time.monotonic() + timeout
        while self._pending:
            for reply in self.grid.pull_messages(list(self._pending)):
                node = self._pending.pop(reply.metadata.reply_to_message_id, None)
                if node is None or reply.has_error():
                    continue  # asked again at the next refresh: a node may answer once its app is up
                info = _describe(reply)
                self._asked.add(node)
                self.clients[info.name] = info  # a site that restarted describes itself anew
                self.node_of[info.name] = node
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)

    def refresh(self, timeout: float | None = None) -> None:
        """Ask the nodes that joined since the last call which client they serve."""
        online = set(self.grid.get_node_ids())
        self._pending = {message: node for message, node in self._pending.items() if node in online}
        self._ask(sorted(online - self._asked), self.query_timeout if timeout is None else timeout)

    def _wait(self, done, timeout: float, starting: float = 0.0) -> bool:
        """Refresh until ``done()`` or ``timeout`` seconds have passed; whether it is done.

        Past ``timeout``, keep waiting, up to ``starting`` seconds in all, while a
        node the SuperLink counts online (its heartbeat is alive) has not answered
        yet: its ClientApp is still starting on a busy machine, it is not gone.
        """
        started = time.monotonic()
        deadline, limit = started + timeout, started + max(timeout, starting)
        while True:
            end = limit if self._pending else deadline
            self.refresh(timeout=max(1.0, min(self.query_timeout, end - time.monotonic())))
            if done():
                return True
            now = time.monotonic()
            if now > deadline and (not self._pending or now > limit):
                return False
            time.sleep(0.2)

    def discover(self, n_clients: int, *, timeout: float, order: list[str] | None = None):
        """Wait until ``n_clients`` distinct clients have described themselves (or raise, naming what is missing).

        Returns
        -------
        names : list of str
            In ``order`` (default: sorted).
        sizes : list of int
        input_shapes : list of tuple of int
        """
        def done() -> bool:
            return set(self.clients) >= set(order) if order is not None else len(self.clients) >= n_clients

        if not self._wait(done, timeout):
            have = set(self.clients)
            wanted = sorted(set(order) - have) if order is not None else f"{n_clients - len(have)} more"
            raise RuntimeError(
                f"{len(have)} of the {n_clients} expected clients described themselves within {timeout:g} s "
                f"(answered: {sorted(have)}; missing: {wanted}; nodes online: {len(self.grid.get_node_ids())}). "
                "Client names must be unique, and every site must reach the SuperLink."
            )
        names = list(order) if order is not None else sorted(self.clients)[:n_clients]
        return names, [self.clients[n].n_records for n in names], [self.clients[n].input_shape for n in names]

    def rejoin(self, names: list[str], *, timeout: float, starting: float = 120.0) -> list[str]:
        """Wait up to ``timeout`` seconds for the clients of a resumed run; return those that came back.

        A resumed run knows its clients from its checkpoint, so a site that left
        for good does not stop it: it is skipped like any offline site. A node
        that is online but still starting its ClientApp is waited for up to
        ``starting`` seconds. Raises when none of them came back.
        """
        self._wait(lambda: all(n in self.clients for n in names), timeout, starting)
        back = [n for n in names if n in self.clients]
        if not back:
            raise RuntimeError(f"None of the run's clients {names} described themselves within {timeout:g} s "
                               f"(nodes online: {len(self.grid.get_node_ids())}).")
        return back


#: Seconds between two pulls of the replies (Flower's own ``Grid.send_and_receive`` waits 3 s).
PULL_INTERVAL = 0.1
#: Seconds between two looks at which SuperNodes the SuperLink still counts online.
ONLINE_INTERVAL = 2.0


def _send_and_receive(grid, messages: list[Message], timeout: float | None) -> list[Message]:
    """Push ``messages``, then pull their replies until each came or its node is gone (or ``timeout`` passed).

    A round follows the deployment's state rather than a fixed wait: a site
    whose SuperNode the SuperLink still counts online (its heartbeat is alive)
    is waited for, however long its ClientApp takes to start on a busy
    machine, up to ``timeout``; a site whose node went offline is not waited
    for. Replies are pulled every :data:`PULL_INTERVAL` seconds.
    """
    node_of = dict(zip(grid.push_messages(messages), (m.metadata.dst_node_id for m in messages)))
    waiting = set(node_of)
    deadline = None if timeout is None else time.monotonic() + timeout
    replies: list[Message] = []
    looked = time.monotonic()
    while waiting:
        pulled = list(grid.pull_messages(list(waiting)))
        replies.extend(pulled)
        waiting -= {reply.metadata.reply_to_message_id for reply in pulled}
        if time.monotonic() - looked > ONLINE_INTERVAL:
            online, looked = set(grid.get_node_ids()), time.monotonic()
            waiting = {m for m in waiting if node_of[m] in online}  # a node that is gone will not answer
        if not waiting or _past(deadline):
            break
        time.sleep(PULL_INTERVAL)
    return replies


def _past(deadline: float | None) -> bool:
    """Whether ``deadline`` (monotonic seconds; None: none) has passed."""
    return deadline is not None and time.monotonic() >= deadline


class FlowerTransport:
    """Runs a round's selected clients by messages through a Flower Grid.

    Parameters
    ----------
    directory : NodeDirectory
        Which node serves which client (refreshed every round, so a site that
        restarts under a new node id rejoins).
    names : list of str
        The client names, in the order the trainer indexes them.
    sizes : list of int
        Each client's m_i as the run was planned for. Every round's
        instructions state it (``planned_records``), and a client now holding
        another number refuses the round before anything is charged or run;
        a client that described itself with another size since is not sent the
        round at all (a warning names it). Either way no client runs at a size
        the run's certificate was not computed for.
    timeout : float or None
        Seconds to wait for a round's replies; None waits for all.
    on_failure : {"raise", "skip"}
        A client that replies with an error, or not at all within ``timeout``:
        ``"raise"`` stops the run (in-process simulation, where a failure is a
        bug); ``"skip"`` warns and averages the submissions that arrived (a
        deployment, where a site can go down). Either way the round's privacy
        cost is charged: the accountant charges every round for every client.
    """

    def __init__(self, directory: NodeDirectory, names: list[str], sizes: list[int], *, timeout: float | None = None,
                 on_failure: str = "raise"):
        if on_failure not in ("raise", "skip"):
            raise ValueError(f"The 'on_failure' parameter must be 'raise' or 'skip'. Got {on_failure!r} instead.")
        if len(sizes) != len(names):
            raise ValueError(f"FlowerTransport needs one size per client: {len(names)} names, {len(sizes)} sizes.")
        self.directory = directory
        self.names = names
        self.sizes = [int(m) for m in sizes]
        self.timeout = timeout
        self.on_failure = on_failure
        self._secure = None  # a run's secure aggregation, from its first round of distributed noise

    def run_round(self, t: int, selected: list[int], theta: dict[str, torch.Tensor],
                  instructions: dict[int, RoundInstructions]) -> dict[int, tuple[dict, float]]:
        """Send θ_t and the instructions to the selected clients; decode the submissions that come back."""
        self.directory.refresh(timeout=min(5.0, self.timeout or 5.0))
        online = set(self.directory.grid.get_node_ids())
        nodes = {i: self.directory.node_of.get(self.names[i]) for i in selected}
        if not any(nodes[i] in online for i in selected):
            raise RuntimeError(f"Round {t + 1}: none of the selected sites {[self.names[i] for i in selected]} is "
                               f"online (the SuperLink counts {len(online)} SuperNode(s) online). Check that the sites' "
                               "SuperNodes run and reach the SuperLink; resume=true continues from this round.")
        resized = self._resized(selected)
        reachable = [i for i in selected if nodes[i] in online and i not in resized]
        failures = self._not_sent(selected, reachable, resized)
        out = self._round_for(instructions, selected)(t, theta, instructions, reachable, nodes, failures)
        self._report(t, failures)
        return out

    def _round_for(self, instructions: dict[int, RoundInstructions], selected: list[int]) -> Callable:
        """How the round runs: under secure aggregation where the run's noise placement releases into a secure sum
        (:attr:`~skfedriem.federated.noise_placement.NoisePlacement.secure_sum`), else a message each."""
        secure = any(placement_of(instructions[i].encoding).secure_sum for i in selected)
        return self._secure_round if secure else self._local_round

    def _local_round(self, t: int, theta: dict[str, torch.Tensor], instructions: dict[int, RoundInstructions],
                     clients: list[int], nodes: dict[int, int], failures: dict[int, str]) -> dict[int, tuple]:
        """A round of local noise: one train message to each client, its submission back."""
        sent = self._messages(t, theta, instructions, clients, nodes)
        replies = _send_and_receive(self.directory.grid, list(sent.values()), self.timeout)
        out = _decoded(replies, {message.metadata.message_id: i for i, message in sent.items()}, failures)
        failures.update({i: "no reply" for i in sent if i not in out and i not in failures})
        return out

    def _secure_round(self, t: int, theta: dict[str, torch.Tensor], instructions: dict[int, RoundInstructions],
                      clients: list[int], nodes: dict[int, int], failures: dict[int, str]) -> dict[int, tuple]:
        """A round of distributed noise under secure aggregation
        (:class:`~skfedriem.flower.protocol.secure_rounds.SecureAggregation`): each survivor's pairwise-masked
        release."""
        if self._secure is None:
            self._secure = SecureAggregation(lambda messages: _send_and_receive(self.directory.grid, messages,
                                                                                self.timeout))
        index = {str(self.names[i]): i for i in clients}
        why: dict[str, str] = {}
        out = self._secure.run_round(t, {site: nodes[i] for site, i in index.items()}, theta,
                                     {site: dataclasses.replace(instructions[i], planned_records=self.sizes[i])
                                      for site, i in index.items()}, why)
        failures.update({index[site]: reason for site, reason in why.items()})
        return {index[site]: reply for site, reply in out.items()}

    def _not_sent(self, selected: list[int], sent: dict, resized: dict[int, int]) -> dict[int, str]:
        """Why each selected client was sent nothing: offline, or holding another size than planned."""
        failures = {i: "offline" for i in selected if i not in sent and i not in resized}
        failures.update({i: f"now holds {m} records, the run was planned for {self.sizes[i]}: left out"
                         for i, m in resized.items()})
        return failures

    def _report(self, t: int, failures: dict[int, str]) -> None:
        """A round's failed clients: a RuntimeError (``on_failure="raise"``) or a warning (``"skip"``)."""
        if not failures:
            return
        text = f"Round {t + 1}: " + "; ".join(f"client {i}: {why}" for i, why in sorted(failures.items()))
        if self.on_failure == "raise":
            raise RuntimeError(text)
        warnings.warn(text + ". The round goes on with the submissions that arrived (or is discarded, when too few "
                      "for its noise); it is charged in full.",
                      RuntimeWarning, stacklevel=3)

    def _resized(self, selected: list[int]) -> dict[int, int]:
        """The selected sites whose description now states another size than the run was planned for."""
        described = {i: self.directory.clients.get(self.names[i]) for i in selected}
        return {i: info.n_records for i, info in described.items()
                if info is not None and info.n_records != self.sizes[i]}

    def _messages(self, t: int, theta: dict[str, torch.Tensor], instructions: dict[int, RoundInstructions],
                  clients: list[int], nodes: dict[int, int]) -> dict[int, Message]:
        """Round ``t``'s train message to each client: θ_t and its instructions, planned for its size."""
        weights = encode_arrays(theta)
        return {i: Message(RecordDict({"theta": weights, "instructions": encode_instructions(
                    dataclasses.replace(instructions[i], planned_records=self.sizes[i]))}),
                    dst_node_id=nodes[i], message_type="train", group_id=str(t + 1)) for i in clients}


def _decoded(replies, client_of: dict, failures: dict) -> dict[int, tuple[dict, float]]:
    """Each client's decoded submission and its Sub seconds (NaN unless the site opts in); an error reply goes to
    ``failures``. ``client_of`` maps each sent message's id to its client (the grid set the ids when pushing; an
    error reply may come from the SuperLink itself)."""
    out = {}
    for reply in replies:
        client = client_of[reply.metadata.reply_to_message_id]
        if reply.has_error():
            failures[client] = reply.error.reason
        else:
            metrics = reply.content.metric_records.get("metrics")
            seconds = math.nan if metrics is None else float(metrics["submission_seconds"])  # a site's opt-in
            out[client] = (decode_arrays(reply.content["submission"]), seconds)
    return out
