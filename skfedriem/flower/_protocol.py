"""The skfedriem protocol over Flower's Message API: what travels, and the server's transport.

Flower only moves arrays here. The local steps (:func:`~skfedriem.federated.client.run_client_round`),
the aggregation and the accountant (:meth:`~skfedriem.federated.FederatedTrainer.serve`) are the
engine's own code. Two message types:

* ``query`` (server → every node): the reply carries the client's ``name`` and
  ``n_records`` (public under substitution neighbours; the server needs the
  smallest m_i to calibrate σ).
* ``train`` (server → selected nodes): θ_t as an ArrayRecord and the round's
  public instructions as a ConfigRecord; the reply carries only Sub(θ_t, θ_i).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict

from ..federated.client import RoundInstructions

__all__ = ["FlowerTransport", "decode_arrays", "decode_instructions", "discover_clients", "encode_arrays",
           "encode_instructions"]


def encode_arrays(tensors: dict[str, torch.Tensor]) -> ArrayRecord:
    """Tensors by name -> ArrayRecord (dtype and shape kept)."""
    return ArrayRecord({name: Array(np.ascontiguousarray(t.detach().cpu().numpy())) for name, t in tensors.items()})


def decode_arrays(record: ArrayRecord) -> dict[str, torch.Tensor]:
    """Inverse of :func:`encode_arrays`."""
    return {name: torch.from_numpy(np.array(array.numpy(), copy=True)) for name, array in record.items()}


def encode_instructions(instructions: RoundInstructions) -> ConfigRecord:
    """The public per-round instructions -> ConfigRecord."""
    return ConfigRecord(asdict(instructions))


def decode_instructions(record: ConfigRecord) -> RoundInstructions:
    """Inverse of :func:`encode_instructions`."""
    return RoundInstructions(**{k: record[k] for k in RoundInstructions.__dataclass_fields__})


def _wait_for_nodes(grid, n_nodes: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= n_nodes:
            return nodes
        if time.monotonic() > deadline:
            raise RuntimeError(f"Only {len(nodes)} of the {n_nodes} expected Flower nodes connected within {timeout} s.")
        time.sleep(0.05)


def discover_clients(grid, n_clients: int, *, timeout: float = 120.0, order: list[str] | None = None):
    """Ask every node for its client name and record count.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    n_clients : int
        Nodes to wait for.
    timeout : float
        Seconds to wait for the nodes and their replies.
    order : list of str, optional
        The client names in the order the trainer indexes them; default sorted.

    Returns
    -------
    node_ids : list of int
        The node of each client, in client order.
    names : list of str
    sizes : list of int
    """
    nodes = _wait_for_nodes(grid, n_clients, timeout)
    query = [Message(RecordDict(), dst_node_id=node, message_type="query") for node in nodes]
    replies = list(grid.send_and_receive(query, timeout=timeout))
    found = {}
    for reply in replies:
        if reply.has_error():
            raise RuntimeError(f"Node {reply.metadata.src_node_id} failed to describe its client: {reply.error.reason}")
        info = reply.content["client"]
        found[str(info["name"])] = (reply.metadata.src_node_id, int(info["n_records"]))
    if len(found) < n_clients:
        raise RuntimeError(f"{len(found)} of the {n_clients} expected clients answered (names {sorted(found)}); "
                           "client names must be unique.")
    names = list(order) if order is not None else sorted(found)
    missing = [n for n in names if n not in found]
    if missing:
        raise RuntimeError(f"No node serves client(s) {missing}; nodes serve {sorted(found)}.")
    return [found[n][0] for n in names], names, [found[n][1] for n in names]


class FlowerTransport:
    """Runs a round's selected clients by messages through a Flower Grid.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    node_ids : list of int
        The node of each client (client order).
    timeout : float or None
        Seconds to wait for a round's replies; None waits for all.
    on_failure : {"raise", "skip"}
        A client that replies with an error, or not at all within ``timeout``:
        ``"raise"`` stops the run (in-process simulation, where a failure is a
        bug); ``"skip"`` warns and averages the submissions that arrived (a
        deployment, where a site can go down). Either way the round's privacy
        cost is charged: the accountant charges every round for every client.
    """

    def __init__(self, grid, node_ids: list[int], *, timeout: float | None = None, on_failure: str = "raise"):
        if on_failure not in ("raise", "skip"):
            raise ValueError(f"The 'on_failure' parameter must be 'raise' or 'skip'. Got {on_failure!r} instead.")
        self.grid = grid
        self.node_ids = node_ids
        self.timeout = timeout
        self.on_failure = on_failure

    def run_round(self, t: int, selected: list[int], theta: dict[str, torch.Tensor],
                  instructions: dict[int, RoundInstructions]) -> dict[int, tuple[dict, float]]:
        """Send θ_t and the instructions to the selected clients; decode the submissions that come back."""
        online = set(self.grid.get_node_ids())
        weights = encode_arrays(theta)
        sent = {i: Message(RecordDict({"theta": weights, "instructions": encode_instructions(instructions[i])}),
                           dst_node_id=self.node_ids[i], message_type="train", group_id=str(t + 1))
                for i in selected if self.node_ids[i] in online}
        replies = self.grid.send_and_receive(list(sent.values()), timeout=self.timeout)
        # the grid set each message's id when pushing it; an error reply may come from the SuperLink itself
        client_of = {message.metadata.message_id: i for i, message in sent.items()}
        out, failures = {}, {i: "offline" for i in selected if i not in sent}
        for reply in replies:
            client = client_of[reply.metadata.reply_to_message_id]
            if reply.has_error():
                failures[client] = reply.error.reason
            else:
                out[client] = (decode_arrays(reply.content["submission"]),
                               float(reply.content["metrics"]["submission_seconds"]))
        failures.update({i: "no reply" for i in sent if i not in out and i not in failures})
        if failures:
            text = f"Round {t + 1}: " + "; ".join(f"client {i}: {why}" for i, why in sorted(failures.items()))
            if self.on_failure == "raise":
                raise RuntimeError(text)
            warnings.warn(text + ". Averaging the submissions that arrived; the round is charged in full.",
                          RuntimeWarning, stacklevel=2)
        return out
