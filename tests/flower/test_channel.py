"""The channel between a site's light ClientApp and its worker: a local attacker who is not the site's account.

The attacker may own folders and sockets of its own in the same temporary
folder, swap paths for symlinks at any moment, connect to anything it can
reach and send anything. Nothing it does may be accepted: no request of its
reaches the site app, no frame of its is decoded into objects (no pickle),
and the site's ClientApp never talks to a socket of its.
"""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Context, Message, RecordDict  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from skfedriem.flower.deployment import channel as _channel  # noqa: E402
from skfedriem.flower.deployment.channel import (MAX_FRAME_BYTES, ChannelError, check_peer, decode_reply,  # noqa: E402
                                       decode_request, encode_reply, encode_request, private_folder, receive_frame,
                                       send_frame, socket_address)
from skfedriem.flower.deployment.site_worker import _answer  # noqa: E402

pytestmark = pytest.mark.skipif(not _channel.supported(), reason="the channel needs Linux")
AS_ROOT = os.geteuid() == 0
NOBODY = 65534
# a Python another account may run (the project's may live under a home folder closed to it)
SYSTEM_PYTHON = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)


@pytest.fixture(autouse=True)
def task_identity():
    saved = TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def _request() -> list[bytes]:
    saved = TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id  # what Flower's runtimes set
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    try:
        message = Message(RecordDict({"c": ConfigRecord({"x": 1})}), dst_node_id=1, message_type="query")
    finally:
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved
    context = Context(run_id=1, node_id=1, node_config={"data-path": "/d"}, state=RecordDict(), run_config={})
    return encode_request(message, context, (1, 1, 1))


def _received(connection: socket.socket) -> bytes:
    """What came back before the other end hung up (a hang-up with unread data resets: nothing came back)."""
    try:
        return connection.recv(1 << 16)
    except ConnectionResetError:
        return b""


class Recorder:
    """A stand-in site app that records what reaches it."""

    def __init__(self):
        self.calls = []

    def __call__(self, message, context):
        self.calls.append(message)
        return Message(RecordDict(), reply_to=message)


# ---------------------------------------------------------------- the folder
def test_the_folder_is_created_private(tmp_path):
    fd = private_folder(tmp_path / "sites")
    try:
        assert oct(os.fstat(fd).st_mode & 0o777) == "0o700"
    finally:
        os.close(fd)


def test_a_symlinked_folder_is_refused_even_when_it_points_to_a_private_one(tmp_path):
    """The old check followed the link (stat): a symlink to a private folder passed, and could be swapped later."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "sites").symlink_to(real)
    with pytest.raises(PermissionError, match="not a link"):
        private_folder(tmp_path / "sites")


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o701])
def test_a_folder_others_may_enter_is_refused(tmp_path, mode):
    folder = tmp_path / "sites"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.raises(PermissionError, match="0700"):
        private_folder(folder)


@pytest.mark.skipif(not AS_ROOT, reason="needs another account to own the folder")
def test_a_folder_another_account_owns_is_refused(tmp_path):
    folder = tmp_path / "sites"
    folder.mkdir(mode=0o700)
    os.chown(folder, NOBODY, NOBODY)
    with pytest.raises(PermissionError, match="owner 65534"):
        private_folder(folder)


def test_a_path_swapped_for_a_symlink_after_the_check_does_not_redirect_the_connection(tmp_path):
    """Checked, then connected by path (a race): a swap in between reached the attacker's socket."""
    ours = tmp_path / "sites"
    fd = private_folder(ours)
    attacker = tmp_path / "attacker"
    attacker.mkdir()
    trap = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    trap.bind(str(attacker / "w.sock"))
    trap.listen()
    trap.settimeout(0.5)
    site = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    site.bind(socket_address(fd, "w.sock"))
    site.listen()
    try:
        ours.rename(tmp_path / "moved")  # the swap: the checked path now leads to the attacker's folder
        ours.symlink_to(attacker)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(socket_address(fd, "w.sock"))  # through the descriptor: still our folder
        accepted, _ = site.accept()
        accepted.close()
        client.close()
        with pytest.raises(TimeoutError):
            trap.accept()  # the attacker's socket was never reached
    finally:
        os.close(fd)
        site.close()
        trap.close()


# ---------------------------------------------------------------- the peer
def test_a_peer_of_this_account_is_accepted():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        check_peer(a)


@pytest.mark.skipif(not AS_ROOT or SYSTEM_PYTHON is None, reason="needs another account to connect from")
def test_a_valid_request_from_another_account_never_reaches_the_site_app():
    """Even a well-formed request, from a process running as another account, is hung up on."""
    folder = Path(tempfile.mkdtemp())  # pytest's own folders are closed to other accounts
    folder.chmod(0o777)  # a socket another account can reach: what the private folder prevents, assumed broken
    path = folder / "w.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    path.chmod(0o777)
    listener.listen()
    frame = folder / "frame.bin"
    a, b = socket.socketpair()
    with a, b:
        send_frame(a, _request())
        frame.write_bytes(b.recv(1 << 20))
    frame.chmod(0o644)
    code = ("import socket, sys\ns = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
            "try:\n    s.sendall(open(sys.argv[2], 'rb').read()); s.shutdown(socket.SHUT_WR); print(len(s.recv(100)))\n"
            "except OSError:  # reset or broken pipe: hung up on\n    print(0)")
    intruder = subprocess.Popen([SYSTEM_PYTHON, "-c", code, str(path), str(frame)], user=NOBODY, cwd="/",
                                stdout=subprocess.PIPE, text=True)
    app = Recorder()
    connection, _ = listener.accept()
    with connection:
        _answer(app, connection)
    out, _ = intruder.communicate(timeout=30)
    listener.close()
    shutil.rmtree(folder)
    assert app.calls == [] and out.strip() == "0"  # nothing reached the app, nothing came back


def test_the_site_app_end_refuses_a_worker_of_another_account(monkeypatch):
    a, b = socket.socketpair()
    with a, b:
        monkeypatch.setattr(os, "geteuid", lambda: 12345)  # as if the worker's account were not ours
        with pytest.raises(ChannelError, match="not this account's 12345"):
            check_peer(a)


# ---------------------------------------------------------------- the frames
def test_a_request_and_a_reply_travel_whole():
    a, b = socket.socketpair()
    with a, b:
        send_frame(a, _request())
        message, context, task = decode_request(receive_frame(b, 3))
        assert task == (1, 1, 1) and context.node_config == {"data-path": "/d"}
        assert dict(message.content["c"]) == {"x": 1}
        state = RecordDict({"s": ConfigRecord({"k": b"\x00\x01"})})
        send_frame(b, encode_reply(Message(RecordDict(), reply_to=message), state))
        reply, got = decode_reply(receive_frame(a, 2))
        assert got["s"]["k"] == b"\x00\x01" and reply.metadata.reply_to_message_id == message.metadata.message_id


class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch " + os.environ["SKFEDRIEM_EXPLOIT_MARK"],))


def test_a_pickle_in_a_frame_runs_nothing(tmp_path, monkeypatch):
    """Both ends unpickled what they received: a frame could run code in the site's process."""
    mark = tmp_path / "ran"
    monkeypatch.setenv("SKFEDRIEM_EXPLOIT_MARK", str(mark))
    exploit = pickle.dumps(_Exploit())
    app = Recorder()
    for parts in ([exploit], [exploit] * 3, [b"[1, 1, 1]", exploit, exploit]):
        a, b = socket.socketpair()
        with a, b:
            a.sendall(_channel._HEADER.pack(_channel._MAGIC, len(parts), sum(8 + len(p) for p in parts))
                      + b"".join(_channel._PART.pack(len(p)) + p for p in parts))
            a.shutdown(socket.SHUT_WR)
            _answer(app, b)
            b.close()  # as the worker does after every connection
            assert _received(a) == b""  # hung up, unanswered
    assert not mark.exists() and app.calls == []


def _attacks():
    valid = b"".join(_channel._PART.pack(len(p)) + p for p in _request())
    header = _channel._HEADER.pack
    return st.one_of(
        st.binary(max_size=300),  # noise
        st.binary(max_size=200).map(lambda b: header(_channel._MAGIC, 3, len(b)) + b),  # a header, garbage parts
        st.integers(MAX_FRAME_BYTES + 1, 2**63).map(lambda n: header(_channel._MAGIC, 3, n)),  # oversized
        st.integers(0, 2**32 - 1).filter(lambda n: n != 3).map(lambda n: header(_channel._MAGIC, n, len(valid))
                                                                + valid),  # a wrong part count
        st.binary(min_size=5, max_size=5).filter(lambda m: m != _channel._MAGIC).map(
            lambda m: header(m, 3, len(valid)) + valid),  # another protocol's frame
        st.integers(1, len(valid) - 1).map(lambda n: header(_channel._MAGIC, 3, len(valid)) + valid[:n]),  # cut
        st.tuples(st.integers(0, len(valid) - 1), st.integers(1, 255)).map(  # one byte of a valid frame flipped
            lambda f: header(_channel._MAGIC, 3, len(valid)) + valid[:f[0]] + bytes([valid[f[0]] ^ f[1]])
            + valid[f[0] + 1:]),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attack=_attacks())
def test_nothing_but_a_whole_request_reaches_the_site_app(attack):
    """Malformed, truncated, oversized and foreign frames: hung up on, never decoded into a request."""
    app = Recorder()
    a, b = socket.socketpair()
    with a, b:
        b.settimeout(5)
        sender = threading.Thread(target=lambda: (a.sendall(attack), a.shutdown(socket.SHUT_WR)))
        sender.start()
        _answer(app, b)
        b.close()  # as the worker does after every connection
        sender.join()
        answered = _received(a)
    if app.calls:  # a flipped byte inside a string value can leave a well-formed request: then it is that request
        assert len(app.calls) == 1 and answered
    else:
        assert answered == b""


def test_an_oversized_frame_is_refused_before_it_is_read():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(_channel._HEADER.pack(_channel._MAGIC, 3, MAX_FRAME_BYTES + 1))
        with pytest.raises(ChannelError, match="Not a frame"):
            receive_frame(b, 3)
        with pytest.raises(ChannelError, match="exceeds"):
            send_frame(a, [b"x" * (MAX_FRAME_BYTES + 1)])


def test_a_trickling_peer_cannot_hold_the_reader_past_its_deadline():
    """A timeout per recv let a peer sending one byte every few seconds block the worker indefinitely."""
    import time

    a, b = socket.socketpair()
    header = _channel._HEADER.pack(_channel._MAGIC, 3, 100)

    def trickle():
        for byte in header:
            try:
                a.send(bytes([byte]))
            except OSError:
                return
            time.sleep(0.1)

    sender = threading.Thread(target=trickle)
    sender.start()
    started = time.monotonic()
    with pytest.raises(ChannelError, match="in time"):
        receive_frame(b, 3, seconds=0.5)
    assert time.monotonic() - started < 1.0
    b.close()
    sender.join()
    a.close()


def test_a_message_the_site_app_cannot_handle_gets_the_generic_reply_and_the_worker_lives_on():
    from skfedriem.flower.protocol.errors import FAILED

    def no_handler(message, context):
        raise ValueError("No evaluate function registered")

    a, b = socket.socketpair()
    with a, b:
        send_frame(a, _request())
        _answer(no_handler, b)
        reply, _ = decode_reply(receive_frame(a, 2))
    assert reply.has_error() and reply.error.reason == FAILED
