"""A deployed site's resident worker: torch, its records and its model loaded once, answering its light ClientApp.

Started by :mod:`skfedriem.flower.deployment.site_client` (``python -m
skfedriem.flower.deployment.site_worker``), it listens on a Unix socket in the site's
private folder, whose checked descriptor it inherits
(:mod:`skfedriem.flower.deployment.channel`), and answers each request with the
in-process site ClientApp of its kind (:data:`skfedriem.flower.deployment.apps.client_apps`:
the site's guard, ledger and reply cache are that app's), one message at a
time, returning the reply and the context's new state. A connection from
another account, or anything that is not a request of the channel, is closed
unanswered (and logged). It stops when the process that started its
ClientApps (the SuperNode's SuperExec) is gone, or after a while without a
message.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import time

import torch
from flwr.supercore.task_identity import TaskIdentity

from .channel import (ChannelError, check_folder, check_peer, decode_request, encode_reply, receive_frame, send_frame,
                       socket_address, socket_lock)
from ..protocol.errors import FAILED, error_reply
from .apps import client_apps

__all__ = ["READ_SECONDS", "main", "serve"]

#: How long the worker waits for a connected peer's whole request before hanging up (a stalled or trickling peer
#: blocks the worker at most this long).
READ_SECONDS = 30.0
_log = logging.getLogger("skfedriem.flower.site")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _answer(app, connection: socket.socket) -> None:
    """Answer one connection's request, or hang up on a peer or a frame that is not the site's."""
    try:
        check_peer(connection)
        message, context, (task, run, node) = decode_request(receive_frame(connection, 3, seconds=READ_SECONDS))
    except (ChannelError, OSError) as error:
        _log.warning("the worker refused a connection: %s: %s", type(error).__name__, error)
        return
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = task, run, node
    try:  # the site app answers its own failures; a message it has no handler for (an unknown type) raises
        reply = app(message, context)
    except Exception as error:  # noqa: BLE001 - the worker must not die of it
        _log.warning("the site app could not answer: %s: %s", type(error).__name__, error, exc_info=True)
        reply = error_reply(message, FAILED)
    connection.settimeout(None)
    try:
        send_frame(connection, encode_reply(reply, context.state))
    except OSError as error:  # the ClientApp is gone (Flower timed it out): its next message asks again
        _log.warning("the worker could not send its reply: %s: %s", type(error).__name__, error)


def serve(kind: str, folder_fd: int, name: str, *, parent_pid: int | None = None,
          idle_seconds: float = 600.0) -> None:
    """Answer the site's ClientApp on socket ``name`` of the folder open at ``folder_fd`` until ``parent_pid`` is
    gone or ``idle_seconds`` pass without a message.

    Parameters
    ----------
    kind : str
        The deployable kind whose site app answers.
    folder_fd : int
        The site's private folder (:func:`~skfedriem.flower.deployment.channel.private_folder`).
    name : str
        The socket's file name in it (created; removed on exit).
    parent_pid : int, optional
        Stop when this process is gone.
    idle_seconds : float, default=600.0
    """
    torch.set_num_threads(1)  # tiny-matrix work: one thread per job (see skfedriem.federated.parallel)
    check_folder(folder_fd)
    app = client_apps[kind]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_address(folder_fd, name))
    mine = os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_ino
    os.chmod(name, 0o600, dir_fd=folder_fd, follow_symlinks=False)
    listener.listen()
    listener.settimeout(1.0)
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle_seconds and (parent_pid is None or _alive(parent_pid)):
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                _answer(app, connection)
            last = time.monotonic()
    finally:
        listener.close()  # first: a ClientApp that finds no listener starts a new worker (under the lock)
        with socket_lock(folder_fd, name):  # then remove the socket only if it is still this worker's
            try:
                if os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_ino == mine:
                    os.unlink(name, dir_fd=folder_fd)
            except FileNotFoundError:
                pass


def main(argv: list[str] | None = None) -> None:
    """Command line of the worker (started by the site's ClientApp).

    Parameters
    ----------
    argv : list of str, optional
        ``--kind``, ``--folder-fd``, ``--socket-name``, ``--parent-pid`` and ``--idle-seconds``.
    """
    parser = argparse.ArgumentParser(prog="python -m skfedriem.flower.deployment.site_worker", description=__doc__.split("\n")[0])
    parser.add_argument("--kind", required=True)
    parser.add_argument("--folder-fd", type=int, required=True)
    parser.add_argument("--socket-name", required=True)
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--idle-seconds", type=float, default=600.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    serve(args.kind, args.folder_fd, args.socket_name, parent_pid=args.parent_pid, idle_seconds=args.idle_seconds)


if __name__ == "__main__":
    main()
