"""The deployment's ServerApp against real site apps over an in-memory grid: what it publishes is what the sites ran."""

from __future__ import annotations

import json
import math
import uuid

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from skfedriem.flower.deployment import apps  # noqa: E402
from skfedriem.flower.deployment.apps import client_apps  # noqa: E402
from skfedriem.privacy import PrivacyBudget  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Round .* left out:RuntimeWarning")


@pytest.fixture(autouse=True)
def inside_a_server_app(monkeypatch):
    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)


class SitesGrid:
    """Flower's Grid over site ClientApps answering in this process; a site can restart with another data file."""

    def __init__(self, kind: str, sites: dict[str, str], run_config: dict, restart_after=None):
        self.kind, self.run_config, self.restart_after = kind, run_config, restart_after or {}
        self.nodes, self.replies, self.rounds = {}, {}, 0
        for name, path in sites.items():
            self._join(name, path)

    def _join(self, name: str, path: str) -> None:
        node = len(self.nodes) + 1
        self.nodes = {n: site for n, site in self.nodes.items() if site[0] != name}  # the old node is gone
        node_config = {"data-path": path, "name": name, "max-epsilon": math.inf}
        self.nodes[node] = (name, Context(run_id=1, node_id=node, node_config=node_config, state=RecordDict(),
                                          run_config=self.run_config))

    def get_node_ids(self):
        return list(self.nodes)

    def push_messages(self, messages):
        ids = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            ids.append(message.metadata.message_id)
            node = message.metadata.dst_node_id
            if node in self.nodes:
                self.replies[ids[-1]] = client_apps[self.kind](message, self.nodes[node][1])
        if messages and messages[0].metadata.message_type == "train":
            self.rounds += 1
            for name, path in self.restart_after.pop(self.rounds, {}).items():
                apps._SITES.clear()  # a new site process
                self._join(name, path)
        return ids

    def pull_messages(self, ids):
        return [self.replies.pop(i) for i in list(ids) if i in self.replies]


def _site_file(path, n, seed):
    X = np.random.default_rng(seed).normal(size=(n, 5)) / 3
    np.save(path, X)
    return str(path)


def _ledger_epsilon(path: str) -> float:
    return PrivacyBudget(math.inf, path=path + ".privacy-ledger.json").spent()


def test_a_site_that_rejoins_with_fewer_records_is_left_out_and_the_certificate_covers_what_ran(tmp_path):
    """The server kept a site's first size across its restart: it published ε = 3.7 while the site ran ε = 23.5."""
    a, b = _site_file(tmp_path / "a.npy", 100, 0), _site_file(tmp_path / "b.npy", 100, 1)
    smaller = _site_file(tmp_path / "a-again.npy", 20, 2)
    config = {"n-clients": 2, "output": str(tmp_path / "out"), "round-timeout": 5.0, "solver": "riemannian",
              "n-rounds": 6, "batch-size": 10, "local-steps": 5, "eps": 4.0, "clip": 1.0, "n-components": 2}
    grid = SitesGrid("pca", {"site-a": a, "site-b": b}, config, restart_after={2: {"site-a": smaller}})
    apps._SITES.clear()
    apps._serve("pca", grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=config))
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["n_records"] == [100, 100]
    rounds = result["history"]
    assert all("site-a" not in [result["clients"][i] for i in h["replied"]] for h in rounds[2:])  # left out
    # what each site really ran is in its own ledger (charged from its own step plans): the certificate covers it
    for site in (a, b, smaller):
        assert _ledger_epsilon(site) <= result["epsilon"] * (1 + 1e-9)
    assert _ledger_epsilon(smaller) == 0.0  # the restarted site ran nothing at its new size
