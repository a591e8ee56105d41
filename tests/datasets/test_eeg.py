"""MOABB loaders: FakeDataset always, the real PhysioNet files when ../shared/data is present."""

import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("moabb")
from moabb.datasets.fake import FakeDataset  # noqa: E402
from moabb.evaluations import CrossSubjectEvaluation, WithinSessionEvaluation  # noqa: E402
from moabb.paradigms import LeftRightImagery  # noqa: E402
from pyriemann.estimation import Covariances  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

import skfedriem.base  # noqa: E402
from skfedriem import FederatedSPDNetClassifier, FederatedTangentSpaceClassifier  # noqa: E402
from skfedriem.exceptions import PositionalClientsWarning  # noqa: E402
from skfedriem.datasets import load_moabb, use_local_eegmmidb  # noqa: E402

EEGMMIDB = Path(__file__).resolve().parents[3] / "shared" / "data" / "eegmmidb"


def fake_dataset():
    return FakeDataset(event_list=["left_hand", "right_hand"], n_sessions=2, n_runs=1, n_subjects=2, n_events=40,
                       duration=60, seed=0)


@pytest.mark.parametrize("clients, expected", [("subject", 2), ("session", 4)])
def test_load_moabb_groups_by_subject_or_session(clients, expected):
    X, y, groups = load_moabb(fake_dataset(), LeftRightImagery(fmin=8, fmax=32, resample=128), clients=clients)
    assert X.ndim == 3 and X.shape[0] == y.shape[0] == groups.shape[0]
    assert set(y) == {"left_hand", "right_hand"}
    assert len(np.unique(groups)) == expected
    assert all(g.startswith("subject-") for g in groups)


def test_load_moabb_rejects_unknown_client_unit():
    with pytest.raises(ValueError, match="'clients'.*'site'"):
        load_moabb(fake_dataset(), LeftRightImagery(), clients="site")


@pytest.mark.slow
def test_within_session_evaluation_on_fake_dataset(tmp_path):
    pipeline = make_pipeline(
        Covariances("oas"),
        FederatedSPDNetClassifier(eps=10.0, dims=(2,), n_rounds=3, batch_size=8, random_state=0),
    )
    evaluation = WithinSessionEvaluation(
        paradigm=LeftRightImagery(fmin=8, fmax=32, resample=128), datasets=[fake_dataset()], overwrite=True,
        hdf5_path=str(tmp_path), random_state=0, n_splits=2,
    )
    results = evaluation.process({"fed-spdnet": pipeline})
    assert len(results) == 4  # 2 subjects x 2 sessions
    assert results["score"].between(0, 1).all() and set(results["pipeline"]) == {"fed-spdnet"}


@pytest.mark.slow
def test_a_within_session_evaluation_protects_each_subject_as_one_client(tmp_path):
    """Every fit of a within-session evaluation holds one subject's trials: n_clients=1 protects that subject whole."""
    clf = FederatedSPDNetClassifier(eps=10.0, dims=(2,), n_rounds=3, privacy_unit="subject", n_clients=1,
                                    random_state=0)
    evaluation = WithinSessionEvaluation(
        paradigm=LeftRightImagery(fmin=8, fmax=32, resample=128), datasets=[fake_dataset()], overwrite=True,
        hdf5_path=str(tmp_path), random_state=0, n_splits=2,
    )
    results = evaluation.process({"fed-spdnet-subject": make_pipeline(Covariances("oas"), clf)})
    assert len(results) == 4 and results["score"].between(0, 1).all()


def _clients_of_each_fit(monkeypatch) -> list[list[set]]:
    """Spy on every fit's split: the subjects each client holds (read from the subjects fit was given)."""
    seen = []
    split = skfedriem.base.client_indices
    subject_clients = skfedriem.base.subject_clients

    def spy_subjects(subjects, n_groups):
        seen.append([subjects])
        return subject_clients(subjects, n_groups)

    def spy_split(n_samples, groups, **kwargs):
        indices, names = split(n_samples, groups, **kwargs)
        if seen and len(seen[-1]) == 1:
            seen[-1] = [set(seen[-1][0][idx].tolist()) for idx in indices]
        return indices, names

    monkeypatch.setattr(skfedriem.base, "_POSITIONAL_WARNED", set())  # the warning not yet given: it would fail
    monkeypatch.setattr(skfedriem.base, "subject_clients", spy_subjects)
    monkeypatch.setattr(skfedriem.base, "client_indices", spy_split)
    return seen


@pytest.mark.parametrize("subject_clients, clients_per_fit", [("each", 2), (1, 1)])
def test_cross_subject_evaluation_trains_on_clients_of_whole_subjects(tmp_path, monkeypatch, subject_clients,
                                                                      clients_per_fit):
    """MOABB routes each training trial's subject to fit: the clients are the training subjects (or fixed groups
    of them), never random chunks of trials, and nothing warns of positional clients."""
    seen = _clients_of_each_fit(monkeypatch)
    dataset = FakeDataset(event_list=["left_hand", "right_hand"], n_sessions=1, n_runs=1, n_subjects=3, n_events=20,
                          duration=30, seed=0)
    clf = FederatedTangentSpaceClassifier(eps=10.0, n_rounds=2, subject_clients=subject_clients)
    evaluation = CrossSubjectEvaluation(paradigm=LeftRightImagery(fmin=8, fmax=32, resample=128), datasets=[dataset],
                                        overwrite=True, hdf5_path=str(tmp_path), random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PositionalClientsWarning)
        results = evaluation.process({"fed": make_pipeline(Covariances("oas"), clf)})
    assert len(results) == 3 and results["score"].between(0, 1).all()
    assert len(seen) == 3  # one fit per held-out subject
    for clients, held_out in zip(seen, (1, 2, 3)):
        assert len(clients) == clients_per_fit
        assert set().union(*clients) == {1, 2, 3} - {held_out}
        assert all(not (a & b) for i, a in enumerate(clients) for b in clients[i + 1:])


@pytest.mark.slow
@pytest.mark.skipif(not EEGMMIDB.is_dir(), reason="real PhysioNet files (../shared/data/eegmmidb) not present")
def test_cross_subject_evaluation_on_real_subjects_keeps_subjects_whole(tmp_path, monkeypatch):
    """The paper's protocol on 6 real PhysioNet subjects: two held-out folds, the training subjects in 2 fixed
    groups of whole subjects."""
    from moabb.datasets import PhysionetMI

    for var in ("MNE_DATASETS_EEGBCI_PATH", "MNE_DATA", "MOABB_DOWNLOAD_PROVIDER"):
        monkeypatch.setenv(var, "")
    use_local_eegmmidb(EEGMMIDB, tmp_path / "mne")
    dataset = PhysionetMI(imagined=True)
    dataset.feet_runs = []
    dataset.subject_list = [1, 2, 3, 4, 5, 6]
    seen = _clients_of_each_fit(monkeypatch)
    clf = FederatedTangentSpaceClassifier(eps=10.0, n_rounds=20, subject_clients=2)
    evaluation = CrossSubjectEvaluation(paradigm=LeftRightImagery(fmin=8, fmax=32, resample=128), datasets=[dataset],
                                        overwrite=True, hdf5_path=str(tmp_path / "results"),
                                        n_splits=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PositionalClientsWarning)
        results = evaluation.process({"fed": make_pipeline(Covariances("oas"), clf)})
    assert len(results) == 2 and results["score"].between(0, 1).all()  # one row per fold
    assert len(seen) == 2
    for clients in seen:
        assert len(clients) == 2 and sum(len(c) for c in clients) == 3
        assert not clients[0] & clients[1]


def test_use_local_eegmmidb_links_files_without_touching_the_source(tmp_path, monkeypatch):
    source = tmp_path / "src" / "S001"
    source.mkdir(parents=True)
    (source / "S001R04.edf").write_bytes(b"edf")
    for var in ("MNE_DATASETS_EEGBCI_PATH", "MNE_DATA", "MOABB_DOWNLOAD_PROVIDER"):
        monkeypatch.delenv(var, raising=False)
    root = use_local_eegmmidb(tmp_path / "src", tmp_path / "root")
    link = root / "MNE-eegbci-data/files/eegmmidb/1.0.0/S001/S001R04.edf"
    assert link.is_symlink() and link.read_bytes() == b"edf"
    import os

    assert os.environ["MNE_DATASETS_EEGBCI_PATH"] == str(root)
    assert sorted(p.name for p in (tmp_path / "src").rglob("*")) == ["S001", "S001R04.edf"]
    with pytest.raises(ValueError, match="no PhysioNet recordings"):
        use_local_eegmmidb(tmp_path / "root")


@pytest.mark.slow
@pytest.mark.skipif(not EEGMMIDB.is_dir(), reason="real PhysioNet files (../shared/data/eegmmidb) not present")
def test_real_physionet_beats_chance_non_privately(tmp_path, monkeypatch, capfd):
    from moabb.datasets import PhysionetMI
    from scipy.stats import binomtest

    for var in ("MNE_DATASETS_EEGBCI_PATH", "MNE_DATA", "MOABB_DOWNLOAD_PROVIDER"):
        monkeypatch.setenv(var, "")
    use_local_eegmmidb(EEGMMIDB, tmp_path)
    dataset = PhysionetMI(imagined=True)
    dataset.feet_runs = []
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        X, y, groups = load_moabb(dataset, LeftRightImagery(fmin=8, fmax=32, resample=128), subjects=[1, 2, 3, 4, 5])
    printed = capfd.readouterr()
    assert "Used Annotations" not in printed.out + printed.err  # a load is quiet (issue 22)
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]
    assert X.shape[0] == 225 and len(np.unique(groups)) == 5
    covs = Covariances("oas").fit_transform(X)
    # hold out a third of every subject's trials (stratified), 5 subjects = 5 clients
    rng = np.random.default_rng(0)
    test = np.zeros(len(y), dtype=bool)
    for g in np.unique(groups):
        for label in np.unique(y):
            idx = np.flatnonzero((groups == g) & (y == label))
            test[rng.choice(idx, size=len(idx) // 3, replace=False)] = True
    clf = FederatedSPDNetClassifier(eps=None, dims=(32,), n_rounds=100, batch_size=16, optimizer="adam", lr=1e-2,
                                    random_state=0)
    clf.fit(covs[~test], y[~test], groups=groups[~test])
    correct = int((clf.predict(covs[test]) == y[test]).sum())
    # classes are balanced in the test set: beating chance is a one-sided binomial test against 1/2
    assert binomtest(correct, int(test.sum()), 0.5, alternative="greater").pvalue < 0.05, correct
