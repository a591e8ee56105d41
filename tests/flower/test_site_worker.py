"""A deployed site's light ClientApp and its resident worker: the same answers as the site app, a fraction of the cost,
and nothing of the site's secret randomness in anything that crosses between them."""

import os
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from skfedriem.flower.deployment import site_client
from skfedriem.flower.protocol.errors import FAILED
from skfedriem.flower.deployment.apps import client_apps
from skfedriem.models import PCAProjector
from skfedriem.privacy import PrivacyBudget

from .test_client_app import records, theta_of, train_message


@pytest.fixture(autouse=True)
def task_identity():
    saved = TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def test_the_sites_clientapp_imports_neither_torch_nor_the_estimators():
    code = "import sys, skfedriem.flower.deployment.site_client; print(sorted({'torch', 'sklearn'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"


def test_the_worker_answers_as_the_site_app_and_no_randomness_travels(tmp_path, monkeypatch):
    monkeypatch.setattr(site_client, "IDLE_SECONDS", 5.0)  # the worker stops soon after the test
    data = tmp_path / "site.npy"
    np.save(data, records().numpy())
    node, run = {"data-path": str(data)}, {"solver": "riemannian"}
    query = Message(RecordDict(), dst_node_id=1, message_type="query")
    described = site_client.exchange("pca", query, Context(run_id=1, node_id=1, node_config=node, state=RecordDict(), run_config=run))
    local = client_apps["pca"](query, Context(run_id=1, node_id=1, node_config=node, state=RecordDict(), run_config=run))
    assert dict(described.content["client"]) == dict(local.content["client"]) == {
        "name": "site", "n_records": 50, "input_shape": [6]}

    context = Context(run_id=1, node_id=1, node_config=node, state=RecordDict(), run_config=run)
    theta = theta_of(PCAProjector(6, 2, "grassmann"))
    started = time.perf_counter()
    first = site_client.exchange("pca", train_message(theta)[0], context)
    second = site_client.exchange("pca", train_message(theta, lr=0.2)[0], context)
    elapsed = time.perf_counter() - started
    assert not first.has_error() and not second.has_error()
    assert "skfedriem" not in context.state.config_records  # the site draws afresh in the worker, for every message
    fits = PrivacyBudget(np.inf, path=str(data) + ".privacy-ledger.json").fits  # the site's own ledger file
    assert len(fits) == 2
    refused = site_client.exchange("pca", train_message(theta, noise_std=0.0)[0], context)
    assert refused.has_error() and refused.error.reason == "refused by the site's privacy ledger"
    assert elapsed < 60  # torch and the records are loaded once, not per message


def test_the_worker_runs_nothing_a_pickle_carries_and_still_answers(tmp_path, monkeypatch):
    """Both ends unpickled what they received; the worker now hangs up on anything but a request of the channel."""
    import pickle
    import socket

    from skfedriem.flower.deployment import channel as _channel

    monkeypatch.setattr(site_client, "IDLE_SECONDS", 5.0)
    data = tmp_path / "site.npy"
    np.save(data, records().numpy())
    context = Context(run_id=1, node_id=1, node_config={"data-path": str(data)}, state=RecordDict(),
                      run_config={"solver": "riemannian"})
    query = Message(RecordDict(), dst_node_id=1, message_type="query")
    assert not site_client.exchange("pca", query, context).has_error()  # the worker is up
    mark = tmp_path / "ran"
    exploit = pickle.dumps(type("Exploit", (), {"__reduce__": lambda self: (open, (str(mark), "w"))})())
    folder = _channel.private_folder()
    try:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(_channel.socket_address(folder, site_client.worker_name("pca", context)))
        with connection:
            connection.sendall(struct.pack("!Q", len(exploit)) + exploit)  # the old channel's frame
            connection.shutdown(socket.SHUT_WR)
            try:
                assert connection.recv(100) == b""
            except ConnectionResetError:
                pass
    finally:
        os.close(folder)
    assert not mark.exists()
    assert dict(site_client.exchange("pca", query, context).content["client"])["n_records"] == 50


def test_a_failure_of_the_light_clientapp_names_nothing_of_the_site(tmp_path, monkeypatch):
    """A failure before the site app (the worker would not start) went to Flower with the site's log path and uid."""
    secret = f"{tmp_path}/skfedriem-sites-{os.getuid()}/0123abcd.log"

    def fails(*args, **kwargs):
        raise RuntimeError(f"The site's worker exited; its log is {secret}.")

    monkeypatch.setattr(site_client, "_connect", fails)
    app = site_client.make_site_client_app("pca")
    context = Context(run_id=1, node_id=1, node_config={"data-path": str(tmp_path / "site.npy")}, state=RecordDict(),
                      run_config={})
    for message in (Message(RecordDict(), dst_node_id=1, message_type="query"), train_message({})[0]):
        reply = app(message, context)
        assert reply.has_error() and reply.error.reason == FAILED and secret not in reply.error.reason


def test_a_package_planted_in_the_working_folder_never_runs_in_the_worker(tmp_path, monkeypatch):
    """``python -m`` put the working folder (the SuperNode's, perhaps writable by others) first on the import path:
    a planted ``skfedriem`` package ran as the site, with its records."""
    monkeypatch.setattr(site_client, "IDLE_SECONDS", 5.0)
    planted = tmp_path / "shared" / "skfedriem"
    planted.mkdir(parents=True)
    mark = tmp_path / "planted-code-ran"
    (planted / "__init__.py").write_text(f"open({str(mark)!r}, 'w').write('ran')\n")
    monkeypatch.chdir(planted.parent)
    data = tmp_path / "site.npy"
    np.save(data, records().numpy())
    context = Context(run_id=1, node_id=1, node_config={"data-path": str(data)}, state=RecordDict(),
                      run_config={"solver": "riemannian"})
    reply = site_client.exchange("pca", Message(RecordDict(), dst_node_id=1, message_type="query"), context)
    assert dict(reply.content["client"])["n_records"] == 50 and not mark.exists()


def test_one_worker_serves_every_run_configuration_of_a_site():
    """A worker per run configuration let a server open runs until the site ran out of memory."""
    node = {"data-path": "/data/site.npz"}
    names = {site_client.worker_name("spdnet", Context(run_id=r, node_id=1, node_config=node, state=RecordDict(),
                                                         run_config=run))
             for r, run in enumerate([{}, {"dims": "2"}, {"classes": "a,b", "unknown-key": 1}])}
    assert len(names) == 1
    assert site_client.worker_name("pca", Context(run_id=1, node_id=1, node_config=node, state=RecordDict(),
                                                  run_config={})) not in names


def test_the_socket_folder_is_the_accounts_own_not_a_shared_temporary_folder(monkeypatch, tmp_path):
    """Under $TMPDIR another account could create the folder's name first and shut the site out for good."""
    from skfedriem.flower.deployment.channel import default_folder

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    assert default_folder() == tmp_path / "run" / "skfedriem-sites"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_folder() == tmp_path / "home" / ".cache" / "skfedriem" / "sites"
