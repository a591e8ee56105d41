"""The deployment's ServerApp against real site apps over an in-memory grid: what it publishes is what the sites ran."""

from __future__ import annotations

import json
import pickle
import math
import uuid

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from skfedriem.flower.deployment import apps  # noqa: E402
from skfedriem.flower.deployment.apps import client_apps  # noqa: E402
from skfedriem.privacy.mechanisms.units import PrivacyUnit
from skfedriem.privacy import PrivacyBudget  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Round .* left out:RuntimeWarning")


@pytest.fixture(autouse=True)
def inside_a_server_app(monkeypatch):
    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)


class SitesGrid:
    """Flower's Grid over site ClientApps answering in this process; a site can restart with another data file."""

    def __init__(self, kind: str, sites: dict[str, str], run_config: dict, restart_after=None, node_config=None):
        self.kind, self.run_config, self.restart_after = kind, run_config, restart_after or {}
        self.node_config = node_config or {}
        self.nodes, self.replies, self.rounds = {}, {}, 0
        for name, path in sites.items():
            self._join(name, path)

    def _join(self, name: str, path: str) -> None:
        node = len(self.nodes) + 1
        self.nodes = {n: site for n, site in self.nodes.items() if site[0] != name}  # the old node is gone
        node_config = {"data-path": path, "name": name, "max-epsilon": math.inf, **self.node_config}
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


def _subject_site_file(path, n, seed, subjects):
    X = np.random.default_rng(seed).normal(size=(n, 5)) / 3
    np.savez(path, X=X, subject=np.arange(n) % subjects)
    return str(path)


def test_a_subject_level_deployment_plans_and_charges_each_site_per_subject(tmp_path):
    """Sites name their subject array (subject-key): the server plans from their subject counts, every site's ledger
    is charged at the subject rate and labels each charge subject-level, and the run's ε is the in-process fit's."""
    a, b = _subject_site_file(tmp_path / "a.npz", 60, 0, 5), _subject_site_file(tmp_path / "b.npz", 60, 1, 4)
    config = {"n-clients": 2, "output": str(tmp_path / "out"), "round-timeout": 5.0, "solver": "riemannian",
              "n-rounds": 3, "batch-size": 2, "local-steps": 2, "eps": 4.0, "n-components": 2,
              "privacy-unit": "subject"}
    grid = SitesGrid("pca", {"site-a": a, "site-b": b}, config, node_config={"subject-key": "subject"})
    apps._SITES.clear()
    apps._serve("pca", grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=config))
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["n_records"] == [5, 4] and result["privacy_unit"] == "subject"
    from skfedriem import FederatedPCA

    X = np.vstack([np.load(a)["X"], np.load(b)["X"]])
    subjects = np.concatenate([[f"a{s}" for s in np.load(a)["subject"]], [f"b{s}" for s in np.load(b)["subject"]]])
    local = FederatedPCA(2, eps=4.0, solver="riemannian", n_rounds=3, batch_size=2, local_steps=2,
                         privacy_unit="subject").fit(X, groups=np.repeat([0, 1], 60), subjects=subjects)
    assert result["epsilon"] == local.epsilon_ <= 4.0
    for site, n_subjects in ((a, 5), (b, 4)):  # each site charges its own rate: B over its own subjects
        fits = PrivacyBudget(math.inf, path=site + ".privacy-ledger.json").fits
        assert len(fits) == 3 and all(f["privacy_unit"] == "subject" for f in fits)
        assert {step["sample_rate"] for f in fits for step in f["steps"]} == {2 / n_subjects}


def test_a_site_of_distributed_noise_refuses_to_send_timings(tmp_path):
    """Timings of a site's own work would reach a server that distributed noise keeps to the sum."""
    path = tmp_path / "a.npy"
    np.save(path, np.random.default_rng(0).standard_normal((20, 5)))
    node = {"data-path": str(path), "noise": "distributed", "client-timings": "true"}
    apps._SITES.clear()
    with pytest.raises(ValueError, match="client-timings"):
        apps.site_setup("pca", Context(run_id=1, node_id=1, node_config=node, state=RecordDict(),
                                       run_config={"n-components": 2}))


def test_a_subject_level_site_must_name_its_subjects_and_keeps_its_ledger_per_subject(tmp_path):
    """Without subject-key or one-subject the site refuses the run; a ledger holding record-level rounds takes no
    subject-level round."""
    from skfedriem.exceptions import PrivacyBudgetExceeded
    from skfedriem.flower.protocol.client_app import SiteGuard
    from skfedriem.privacy import StepPlan

    path = _subject_site_file(tmp_path / "a.npz", 20, 0, 4)
    context = Context(run_id=1, node_id=1, node_config={"data-path": path}, state=RecordDict(),
                      run_config={"privacy-unit": "subject", "n-components": 2})
    apps._SITES.clear()
    with pytest.raises(ValueError, match="subject-key.*one-subject"):
        apps.site_setup("pca", context)
    one = Context(run_id=1, node_id=1, node_config={"data-path": path, "one-subject": "true"}, state=RecordDict(),
                  run_config={"privacy-unit": "subject", "n-components": 2})
    assert apps.site_setup("pca", one).n_records == 1  # the whole site is one subject
    plan = StepPlan(n_records=4, batch_size=2, local_steps=1, clip=1.0, noise_std=2.0, sampling="fixed")
    subjects = StepPlan(**{**plan.__dict__, "unit": PrivacyUnit("subject")})
    ledger = str(tmp_path / "ledger.json")
    SiteGuard(ledger, max_epsilon=math.inf).charge(plan, label="run 1 round 1 request x")
    with pytest.raises(PrivacyBudgetExceeded, match="already holds record-level fits"):
        SiteGuard(ledger, max_epsilon=math.inf).charge(subjects, label="run 2")
    fresh = SiteGuard(str(tmp_path / "other.json"), max_epsilon=math.inf)
    fresh.charge(subjects, label="run 2 round 1 request y")
    fresh.charge(plan, label="run 3")  # a record-level round may follow: a subject's charge bounds a record's
    assert [fit["privacy_unit"] for fit in fresh.ledger().fits] == ["subject", "record"]


def test_a_site_reports_the_shape_of_its_records_not_of_their_fixed_features(tmp_path):
    """The tangent-space model trains on features computed once from each site's matrices: the site still reports
    the matrices' shape, which the server builds its model for (it reported the features' and the run failed)."""
    from skfedriem.datasets import make_spd_classification

    X, y, groups = make_spd_classification(2, 30, 4, random_state=0)
    paths = {}
    for g in (0, 1):
        paths[f"site-{g}"] = str(tmp_path / f"{g}.npz")
        np.savez(paths[f"site-{g}"], X=X[groups == g], y=y[groups == g])
    config = {"n-clients": 2, "output": str(tmp_path / "out"), "round-timeout": 5.0, "n-rounds": 2, "eps": 4.0,
              "classes": "0,1", "batch-size": 10, "local-steps": 2}
    grid = SitesGrid("tangent", paths, config)
    apps._SITES.clear()
    apps._serve("tangent", grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=config))
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["epsilon"] <= 4.0 and [h["replied"] for h in result["history"]] == [[0, 1], [0, 1]]
    with (tmp_path / "out" / "estimator.pkl").open("rb") as f:
        assert pickle.load(f).predict(X).shape == (60,)


def test_a_subject_level_site_decides_its_own_unit(tmp_path):
    """A site whose node config names its subjects refuses a record-level run (the server cannot switch it to
    protecting records one by one, nor learn its record count); one that names none refuses a subject-level run;
    subject labels that do not compare as themselves are refused."""
    path = _subject_site_file(tmp_path / "a.npz", 20, 0, 4)
    node = {"data-path": path, "subject-key": "subject"}
    apps._SITES.clear()
    for run_config, message in (({"n-components": 2}, "refuses a run planned for privacy-unit = 'record'"),):
        with pytest.raises(ValueError, match=message):
            apps.site_setup("pca", Context(run_id=1, node_id=1, node_config=node, state=RecordDict(),
                                           run_config=run_config))
    subject_run = {"n-components": 2, "privacy-unit": "subject"}
    assert apps.site_setup("pca", Context(run_id=1, node_id=1, node_config=node, state=RecordDict(),
                                          run_config=subject_run)).n_records == 4
    with pytest.raises(ValueError, match="subject-key, or declare the site one subject"):
        apps.site_setup("pca", Context(run_id=1, node_id=1, node_config={"data-path": path}, state=RecordDict(),
                                       run_config=subject_run))
    from skfedriem.flower.deployment.run_config import load_site_subjects

    structured = np.zeros(20, dtype=[("a", float)])
    np.savez(tmp_path / "b.npz", X=np.zeros((20, 5)), subject=structured)
    with pytest.raises(ValueError, match="integer, string or finite float labels"):
        load_site_subjects(tmp_path / "b.npz", "subject", 20)
