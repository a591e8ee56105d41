"""A deployed site's resident worker: torch, its records and its model loaded once, answering its light ClientApp.

Started by :mod:`skfedriem.flower.site_client` (``python -m
skfedriem.flower.site_worker``), it listens on a Unix socket in a folder only
the site's account can open, and answers each ``(message, context)`` with the
in-process site ClientApp of its kind (:data:`skfedriem.flower.apps.client_apps`:
the site's guard, ledger and reply cache are that app's), one message at a
time, returning the reply and the context's new state. It stops when the
process that started its ClientApps (the SuperNode's SuperExec) is gone, or
after a while without a message.
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from pathlib import Path

import torch
from flwr.supercore.task_identity import TaskIdentity

from .apps import client_apps
from .site_client import _receive, _send

__all__ = ["main", "serve"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve(kind: str, path: str | Path, *, parent_pid: int | None = None, idle_seconds: float = 600.0) -> None:
    """Answer the site's ClientApp on ``path`` until ``parent_pid`` is gone or ``idle_seconds`` pass without a message.

    Parameters
    ----------
    kind : str
        The deployable kind whose site app answers.
    path : str or Path
        The Unix socket to listen on (created; removed on exit).
    parent_pid : int, optional
        Stop when this process is gone.
    idle_seconds : float, default=600.0
    """
    torch.set_num_threads(1)  # tiny-matrix work: one thread per job (see skfedriem.federated.parallel)
    app = client_apps[kind]
    path = Path(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    os.chmod(path, 0o600)
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
                message, context, (task, run, node) = _receive(connection)
                TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = task, run, node
                reply = app(message, context)  # every failure is already an error reply
                _send(connection, (reply, context.state))
            last = time.monotonic()
    finally:
        listener.close()
        path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    """Command line of the worker (started by the site's ClientApp).

    Parameters
    ----------
    argv : list of str, optional
        ``--kind``, ``--socket``, ``--parent-pid`` and ``--idle-seconds``.
    """
    parser = argparse.ArgumentParser(prog="python -m skfedriem.flower.site_worker", description=__doc__.split("\n")[0])
    parser.add_argument("--kind", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--idle-seconds", type=float, default=600.0)
    args = parser.parse_args(argv)
    serve(args.kind, args.socket, parent_pid=args.parent_pid, idle_seconds=args.idle_seconds)


if __name__ == "__main__":
    main()
