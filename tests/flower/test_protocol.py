"""The server's view of the sites: who is online, who has answered, how long to wait."""

import time
from types import SimpleNamespace

import pytest

pytest.importorskip("flwr")

from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from skfedriem.flower.protocol.messages import NodeDirectory  # noqa: E402


@pytest.fixture(autouse=True)
def inside_a_server_app(monkeypatch):
    """The identity a ServerApp process has, which Flower stamps on the messages it creates."""
    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)


class SlowSitesGrid:
    """Flower's Grid interface over sites whose ClientApps answer a query ``delay`` seconds after it is sent."""

    def __init__(self, online: dict[int, str], delay: float):
        self.online, self.delay, self.sent = online, delay, {}

    def get_node_ids(self):
        return list(self.online)

    def push_messages(self, messages):
        ids = []
        for message in messages:
            ids.append(f"m{len(self.sent)}")
            self.sent[ids[-1]] = (message.metadata.dst_node_id, time.monotonic())
        return ids

    def pull_messages(self, ids):
        replies = []
        for message_id in ids:
            node, at = self.sent[message_id]
            if node in self.online and time.monotonic() - at >= self.delay:
                info = {"name": self.online[node], "n_records": 10, "input_shape": [3]}
                replies.append(SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=message_id),
                                               has_error=lambda: False, content={"client": info}))
        return replies


def test_a_resume_waits_for_online_sites_that_are_still_starting():
    grid = SlowSitesGrid({1: "site-0", 2: "site-1"}, delay=2.5)
    directory = NodeDirectory(grid, query_timeout=1.0)
    started = time.monotonic()
    assert directory.rejoin(["site-0", "site-1"], timeout=1.0, starting=30.0) == ["site-0", "site-1"]
    assert 2.5 <= time.monotonic() - started < 10


def test_a_resume_does_not_wait_past_its_timeout_for_a_site_that_is_gone():
    grid = SlowSitesGrid({1: "site-0"}, delay=0.0)
    directory = NodeDirectory(grid, query_timeout=1.0)
    started = time.monotonic()
    assert directory.rejoin(["site-0", "site-1"], timeout=1.5, starting=30.0) == ["site-0"]
    assert time.monotonic() - started < 5


def test_without_patience_for_starting_sites_the_resume_gives_up():
    grid = SlowSitesGrid({1: "site-0", 2: "site-1"}, delay=3.0)
    with pytest.raises(RuntimeError, match=r"None of the run's clients .* within 1 s \(nodes online: 2\)"):
        NodeDirectory(grid, query_timeout=1.0).rejoin(["site-0", "site-1"], timeout=1.0, starting=0.0)
