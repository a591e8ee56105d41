"""The ClientApp a deployed site's SuperNode starts for every message: light, it hands the message to a resident worker.

Flower starts a fresh ``flwr-clientapp`` process for every message a
SuperNode receives. Importing torch and skfedriem's estimators there, and
loading the site's records and model, cost seconds per message (most of a
round on a small federation). This ClientApp imports only Flower and the
standard library: it passes the message and the node's context to the site's
**resident worker** (:mod:`skfedriem.flower.deployment.site_worker`), which keeps torch,
the records and the model loaded, answers with the very ClientApp an
in-process site runs (:data:`skfedriem.flower.deployment.apps.client_apps`: the site's
guard, ledger and reply cache), and sends back the reply and the context's
new state. Nothing of the site's privacy moves: the ledger and the replies are
the site's files as before, the site's secret randomness is drawn afresh in
the worker for every message and never travels, and the channel
(:mod:`skfedriem.flower.deployment.channel`) is a Unix socket in a folder of the site's
account, reached through a checked descriptor, with the peer's account checked
at both ends and no pickle in either direction.

The worker is started by the first message that needs it (one per site, kind
and run configuration) and stops when its SuperNode's process is gone, or
after ``IDLE_SECONDS`` without a message. Any failure here (the worker could
not start, the channel was refused) is answered like every failure of a
deployed site: an error reply that names only its kind, the details in the
site's own log. Where the channel cannot run (not Linux), the message is
answered in this process.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import time

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.supercore.task_identity import TaskIdentity

from .channel import (check_peer, decode_reply, encode_request, private_folder, receive_frame, send_frame,
                       socket_address, socket_lock, supported)
from ..protocol.errors import FAILED, error_reply
from .site_files import default_ledger_path

__all__ = ["IDLE_SECONDS", "STARTUP_SECONDS", "default_ledger_path", "exchange", "make_site_client_app",
           "worker_name"]

#: A worker with no message for this long stops (the next message starts a new one).
IDLE_SECONDS = 600.0
#: How long a message waits for a worker to start (a busy machine imports torch slowly).
STARTUP_SECONDS = 180.0

_log = logging.getLogger("skfedriem.flower.site")


def worker_name(kind: str, context: Context) -> str:
    """The socket name of the worker of this site and kind (in the site's private folder).

    One worker per site and kind, whatever the run configuration: it serves
    every run (keeping a few runs' records and models loaded), so a server
    that opens many runs cannot make a site start a process for each.

    Parameters
    ----------
    kind : str
        The deployable kind.
    context : flwr.app.Context
        The node's context (its node configuration).

    Returns
    -------
    str
    """
    identity = json.dumps([kind, dict(context.node_config)], sort_keys=True, default=str)
    return f"{hashlib.sha256(identity.encode()).hexdigest()[:24]}.sock"


def _connect(folder: int, name: str) -> socket.socket | None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(socket_address(folder, name))
        return connection
    except (FileNotFoundError, ConnectionRefusedError):
        connection.close()
        return None


def _start_worker(kind: str, folder: int, name: str) -> subprocess.Popen:
    log = os.open(name.removesuffix(".sock") + ".log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                  | os.O_CLOEXEC, 0o600, dir_fd=folder)
    try:  # -P: the working folder (the SuperNode's, perhaps writable by others) is not on the import path
        return subprocess.Popen([sys.executable, "-P", "-m", "skfedriem.flower.deployment.site_worker", "--kind", kind,
                                 "--folder-fd", str(folder), "--socket-name", name, "--parent-pid", str(os.getppid()),
                                 "--idle-seconds", str(IDLE_SECONDS)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(folder,))
    finally:
        os.close(log)


def _worker_connection(kind: str, folder: int, name: str) -> socket.socket:
    """A connection to the worker, started first if none listens (under the socket's lock: one start at a time)."""
    with socket_lock(folder, name):
        connection = _connect(folder, name)
        if connection is not None:
            return connection
        try:  # a worker that is gone leaves its socket behind
            os.unlink(name, dir_fd=folder)
        except FileNotFoundError:
            pass
        worker = _start_worker(kind, folder, name)
        deadline = time.monotonic() + STARTUP_SECONDS
        while (connection := _connect(folder, name)) is None:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"The site's worker {'exited' if worker.poll() is not None else 'did not start'}"
                                   f"; its log is {name.removesuffix('.sock')}.log in the site's socket folder.")
            time.sleep(0.05)
        return connection


def _reply_seconds(message: Message) -> float:
    """How long to wait for the worker: until Flower would discard the reply (the message's time to live)."""
    left = message.metadata.created_at + message.metadata.ttl - time.time()
    return max(1.0, left)


def exchange(kind: str, message: Message, context: Context) -> Message:
    """The reply of the site's worker to ``message``; the context's state becomes the worker's.

    Parameters
    ----------
    kind : str
    message : flwr.app.Message
    context : flwr.app.Context

    Returns
    -------
    flwr.app.Message

    Raises
    ------
    PermissionError, ConnectionError
        The socket folder or the worker is not this account's, or the
        channel broke (:mod:`skfedriem.flower.deployment.channel`).
    """
    folder = private_folder()
    try:
        with _worker_connection(kind, folder, worker_name(kind, context)) as connection:
            check_peer(connection)
            send_frame(connection, encode_request(message, context, (TaskIdentity.task_id, TaskIdentity.run_id,
                                                                     TaskIdentity.node_id)))
            reply, state = decode_reply(receive_frame(connection, 2, seconds=_reply_seconds(message)))
    finally:
        os.close(folder)
    context.state = state
    return reply


def _answer(kind: str, message: Message, context: Context) -> Message:
    """The site's reply to ``message``: from its worker, or in this process where the channel cannot run."""
    try:
        if supported():
            return exchange(kind, message, context)
        from .apps import client_apps  # torch and the estimators, in this process

        return client_apps[kind](message, context)
    except Exception as error:  # noqa: BLE001 - every failure becomes the generic error reply; details stay here
        _log.warning("%s message %s failed before reaching the site app: %s: %s", message.metadata.message_type,
                     message.metadata.message_id, type(error).__name__, error, exc_info=True)
        return error_reply(message, FAILED)


def make_site_client_app(kind: str) -> ClientApp:
    """The light ClientApp of a deployed site of ``kind``: every message goes to the site's resident worker.

    Parameters
    ----------
    kind : str
        The deployable kind (``"pca"``, ``"spdnet"``, ``"eegnet"``, ``"tangent"`` or one registered).

    Returns
    -------
    flwr.clientapp.ClientApp
    """
    app = ClientApp()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return _answer(kind, msg, context)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return _answer(kind, msg, context)

    return app


# one plain assignment each: Flower finds the apps its projects name by reading this file
pca_client_app = make_site_client_app("pca")
spdnet_client_app = make_site_client_app("spdnet")
eegnet_client_app = make_site_client_app("eegnet")
tangent_client_app = make_site_client_app("tangent")
