"""The channel between a deployed site's light ClientApp and its resident worker: no one else can enter it.

Light (Flower and the standard library). Three guarantees, each against a
local attacker on the site's host who is not the site's account:

* **The folder is the site's.** The sockets live in :func:`default_folder`
  (``$XDG_RUNTIME_DIR/skfedriem-sites``, else ``~/.cache/skfedriem/sites``:
  folders of the account, never a shared temporary folder where another
  account could take the name first), opened with ``O_NOFOLLOW`` and checked
  on the open descriptor (a directory, owned by this account, mode 0700),
  never by a path that a symlink could redirect between the check and the
  use: every later access goes through that descriptor
  (``/proc/self/fd/N/...``), and the worker inherits the same descriptor.
* **The peer is the site's.** Each end reads the other's credentials from the
  kernel (``SO_PEERCRED``) and hangs up on any other account.
* **Nothing received runs code.** Frames are a fixed layout of byte parts
  with a size limit: Flower's own protobuf encoding of the message, the
  context and its state (arrays decode with ``allow_pickle=False``), and
  JSON for the task identity. No pickle in either direction; the site's
  secret randomness is not in any frame (a deployed site draws it afresh
  for every message: :mod:`skfedriem.flower.protocol.client_app`).

:func:`supported` says whether this platform has what it takes (Linux: the
``/proc`` descriptors and ``SO_PEERCRED``); elsewhere a site's light
ClientApp answers in its own process instead.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from flwr.app import Context, Message, RecordDict
from flwr.common.serde import (context_from_proto, context_to_proto, message_from_proto, message_to_proto,
                               recorddict_from_proto, recorddict_to_proto)
from flwr.proto.message_pb2 import Context as ProtoContext
from flwr.proto.message_pb2 import Message as ProtoMessage
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict

__all__ = ["MAX_FRAME_BYTES", "ChannelError", "check_folder", "check_peer", "decode_reply", "decode_request",
           "default_folder", "encode_reply", "encode_request", "private_folder", "receive_frame", "send_frame",
           "socket_address", "socket_lock", "supported"]

#: The largest frame either end accepts (a site's model and θ_t are a few MB at most).
MAX_FRAME_BYTES = 256 << 20
_MAGIC = b"SKFW1"
_HEADER = struct.Struct("!5sIQ")  # magic, number of parts, total size of the parts
_PART = struct.Struct("!Q")
_CREDENTIALS = struct.Struct("3i")  # pid, uid, gid


class ChannelError(ConnectionError):
    """The other end is not the site's, or what it sent is not a frame of this channel."""


def supported() -> bool:
    """Whether this platform can run the channel (descriptor-relative socket paths and peer credentials)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_PEERCRED") and os.path.isdir("/proc/self/fd")


def default_folder() -> Path:
    """Where a site's worker sockets live: ``$XDG_RUNTIME_DIR/skfedriem-sites``, else ``~/.cache/skfedriem/sites``.

    Both belong to the site's account (a shared temporary folder would let
    another account create the folder's name first and shut the site out).

    Returns
    -------
    Path
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return Path(runtime) / "skfedriem-sites"
    return Path.home() / ".cache" / "skfedriem" / "sites"


def private_folder(folder: str | Path | None = None) -> int:
    """A descriptor of the site's socket folder (created if absent, with its parents), or PermissionError.

    Parameters
    ----------
    folder : str or Path, optional
        Default :func:`default_folder`.

    Returns
    -------
    int
        An open descriptor of a directory that is not a symlink, belongs to
        this account and is closed to every other (mode 0700). The caller
        closes it.
    """
    folder = default_folder() if folder is None else Path(folder)
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:  # a symlink (ELOOP) or not a directory
        raise PermissionError(f"{folder} must be a directory of this account, not a link: {error}") from None
    try:
        check_folder(fd)
    except PermissionError:
        os.close(fd)
        raise
    return fd


def check_folder(fd: int) -> None:
    """PermissionError unless the descriptor ``fd`` is of a directory of this account, closed to others (0700)."""
    info = os.fstat(fd)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise PermissionError(f"The site's socket folder must be a directory of this account, closed to others "
                              f"(mode 0700); it has owner {info.st_uid} and mode {oct(stat.S_IMODE(info.st_mode))}.")


def socket_address(folder_fd: int, name: str) -> str:
    """The address of socket ``name`` inside the folder open at ``folder_fd``, resolved through the descriptor."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"A socket name is a plain file name. Got {name!r}.")
    return f"/proc/self/fd/{folder_fd}/{name}"


@contextmanager
def socket_lock(folder_fd: int, name: str) -> Iterator[None]:
    """An exclusive lock on socket ``name`` of the folder: held while a ClientApp starts its worker and while a
    worker removes its socket, so that neither removes the socket of a worker that just started."""
    import fcntl  # Unix only, like the channel (see supported())

    fd = os.open(name + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def check_peer(connection: socket.socket) -> None:
    """ChannelError unless the process at the other end runs as this account."""
    pid, uid, _ = _CREDENTIALS.unpack(connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                            _CREDENTIALS.size))
    if uid != os.geteuid():
        raise ChannelError(f"The peer (pid {pid}) runs as uid {uid}, not this account's {os.geteuid()}.")


def send_frame(connection: socket.socket, parts: list[bytes]) -> None:
    """Send ``parts`` as one frame."""
    total = sum(_PART.size + len(p) for p in parts)
    if total > MAX_FRAME_BYTES:
        raise ChannelError(f"A frame of {total} bytes exceeds the channel's limit of {MAX_FRAME_BYTES}.")
    connection.sendall(_HEADER.pack(_MAGIC, len(parts), total) + b"".join(_PART.pack(len(p)) + p for p in parts))


def receive_frame(connection: socket.socket, n_parts: int, *, seconds: float | None = None) -> list[bytes]:
    """The ``n_parts`` byte parts of the next frame, or ChannelError for anything else.

    ``seconds`` bounds the whole frame's arrival (None: no bound): a peer
    that trickles bytes cannot hold the reader past it.
    """
    deadline = None if seconds is None else time.monotonic() + seconds
    magic, count, total = _HEADER.unpack(_read(connection, _HEADER.size, deadline))
    if magic != _MAGIC or count != n_parts or total > MAX_FRAME_BYTES:
        raise ChannelError(f"Not a frame of this channel (magic {magic!r}, {count} parts, {total} bytes).")
    body, parts, at = _read(connection, total, deadline), [], 0
    for _ in range(count):
        if at + _PART.size > total:
            raise ChannelError("A frame's parts overrun it.")
        (size,) = _PART.unpack_from(body, at)
        at += _PART.size
        if at + size > total:
            raise ChannelError("A frame's parts overrun it.")
        parts.append(body[at : at + size])
        at += size
    if at != total:
        raise ChannelError("A frame holds more than its parts.")
    return parts


def _read(connection: socket.socket, size: int, deadline: float | None) -> bytes:
    chunks, left = [], size
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelError("The other end did not send its frame in time.")
            connection.settimeout(remaining)
        try:
            chunk = connection.recv(min(left, 1 << 20))
        except TimeoutError:
            raise ChannelError("The other end did not send its frame in time.") from None
        if not chunk:
            raise ChannelError("The other end closed the connection mid-frame.")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def encode_request(message: Message, context: Context, task: tuple[int, int, int]) -> list[bytes]:
    """A light ClientApp's request: the message, the node's context and the running task's identity."""
    return [json.dumps([int(t) for t in task]).encode(), message_to_proto(message).SerializeToString(),
            context_to_proto(context).SerializeToString()]


def decode_request(parts: list[bytes]) -> tuple[Message, Context, tuple[int, int, int]]:
    """Inverse of :func:`encode_request` (ChannelError for anything else)."""
    try:
        task = json.loads(parts[0])
        if not (isinstance(task, list) and len(task) == 3 and all(type(t) is int for t in task)):
            raise ValueError(f"a task identity is three integers, got {task!r}")
        message = message_from_proto(ProtoMessage.FromString(parts[1]))
        context = context_from_proto(ProtoContext.FromString(parts[2]))
    except Exception as error:  # noqa: BLE001 - whatever the bytes, the same error
        raise ChannelError(f"Not a request of this channel: {type(error).__name__}: {error}") from None
    return message, context, (task[0], task[1], task[2])


def encode_reply(reply: Message, state: RecordDict) -> list[bytes]:
    """The worker's reply: the reply message and the context's new state."""
    return [message_to_proto(reply).SerializeToString(), recorddict_to_proto(state).SerializeToString()]


def decode_reply(parts: list[bytes]) -> tuple[Message, RecordDict]:
    """Inverse of :func:`encode_reply` (ChannelError for anything else)."""
    try:
        return (message_from_proto(ProtoMessage.FromString(parts[0])),
                recorddict_from_proto(ProtoRecordDict.FromString(parts[1])))
    except Exception as error:  # noqa: BLE001 - whatever the bytes, the same error
        raise ChannelError(f"Not a reply of this channel: {type(error).__name__}: {error}") from None
