"""The ClientApp a deployed site's SuperNode starts for every message: light, it hands the message to a resident worker.

Flower starts a fresh ``flwr-clientapp`` process for every message a
SuperNode receives. Importing torch and skfedriem's estimators there, and
loading the site's records and model, cost seconds per message (most of a
round on a small federation). This ClientApp imports only Flower and the
standard library: it passes the message and the node's context to the site's
**resident worker** (:mod:`skfedriem.flower.site_worker`), which keeps torch,
the records and the model loaded, answers with the very ClientApp an
in-process site runs (:data:`skfedriem.flower.apps.client_apps`: the site's
guard, ledger and reply cache), and sends back the reply and the context's
new state. Nothing of the site's privacy moves: the ledger and the replies are
the site's files as before, the secret randomness travels in the node's own
context, and the channel is a Unix socket in a folder only the site's account
can open (mode 0700).

The worker is started by the first message that needs it (one per site, kind
and run configuration) and stops when its SuperNode's process is gone, or
after ``IDLE_SECONDS`` without a message.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.supercore.task_identity import TaskIdentity

__all__ = ["IDLE_SECONDS", "STARTUP_SECONDS", "default_ledger_path", "exchange", "make_site_client_app",
           "worker_socket"]

#: A worker with no message for this long stops (the next message starts a new one).
IDLE_SECONDS = 600.0
#: How long a message waits for a worker to start (a busy machine imports torch slowly).
STARTUP_SECONDS = 180.0
_HEADER = struct.Struct("!Q")


def default_ledger_path(node_config) -> str:
    """The site's ledger file: ``ledger-path``, else next to its data file (``<data-path>.privacy-ledger.json``).

    Parameters
    ----------
    node_config : mapping
        The SuperNode's node configuration.

    Returns
    -------
    str
    """
    return str(node_config.get("ledger-path", str(node_config["data-path"]) + ".privacy-ledger.json"))


def worker_socket(kind: str, context: Context) -> Path:
    """Where the worker of this site, kind and run configuration listens (a folder only this account opens).

    Parameters
    ----------
    kind : str
        The deployable kind.
    context : flwr.app.Context
        The node's context (its node and run configurations).

    Returns
    -------
    Path
    """
    identity = json.dumps([kind, dict(context.node_config), dict(context.run_config)], sort_keys=True, default=str)
    folder = Path(tempfile.gettempdir()) / f"skfedriem-sites-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    if folder.stat().st_uid != os.getuid() or folder.stat().st_mode & 0o077:
        raise PermissionError(f"{folder} must belong to this account and be closed to others (mode 0700).")
    return folder / f"{hashlib.sha256(identity.encode()).hexdigest()[:24]}.sock"


def _send(connection: socket.socket, payload: object) -> None:
    data = pickle.dumps(payload)
    connection.sendall(_HEADER.pack(len(data)) + data)


def _receive(connection: socket.socket) -> object:
    size = _HEADER.unpack(_read(connection, _HEADER.size))[0]
    return pickle.loads(_read(connection, size))  # from this account's own worker


def _read(connection: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = connection.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("The site's worker closed the connection.")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _connect(path: Path) -> socket.socket | None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(path))
        return connection
    except (FileNotFoundError, ConnectionRefusedError):
        connection.close()
        return None


def _start_worker(kind: str, path: Path) -> subprocess.Popen:
    with path.with_suffix(".log").open("ab") as log:
        return subprocess.Popen([sys.executable, "-m", "skfedriem.flower.site_worker", "--kind", kind, "--socket",
                                 str(path), "--parent-pid", str(os.getppid()), "--idle-seconds", str(IDLE_SECONDS)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True)


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
    """
    path = worker_socket(kind, context)
    connection = _connect(path)
    if connection is None:
        path.unlink(missing_ok=True)  # a worker that is gone leaves its socket behind
        worker = _start_worker(kind, path)
        deadline = time.monotonic() + STARTUP_SECONDS
        while (connection := _connect(path)) is None:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"The site's worker {'exited' if worker.poll() is not None else 'did not start'}"
                                   f"; its log is {path.with_suffix('.log')}.")
            time.sleep(0.05)
    with connection:
        _send(connection, (message, context, (TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id)))
        reply, state = _receive(connection)
    context.state = state
    return reply


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
        return exchange(kind, msg, context)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return exchange(kind, msg, context)

    return app


# one plain assignment each: Flower finds the apps its projects name by reading this file
pca_client_app = make_site_client_app("pca")
spdnet_client_app = make_site_client_app("spdnet")
eegnet_client_app = make_site_client_app("eegnet")
tangent_client_app = make_site_client_app("tangent")
