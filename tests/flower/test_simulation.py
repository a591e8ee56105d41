"""backend="flower" (Flower's simulation engine) against the in-process backend, same seeds."""

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("ray")

from skfedriem import FederatedPCA
from skfedriem.classification import FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem.datasets import make_federated_pca, make_spd_classification


def test_pca_flower_simulation_matches_local_without_noise():
    X, groups = make_federated_pca(n_clients=3, n_samples_per_client=150, n_features=8, random_state=0)
    settings = dict(n_components=2, solver="riemannian", eps=None, n_rounds=4, local_steps=3, batch_size=40, clients_per_round=2,
                    aggregation="rlavg", random_state=0)
    local = FederatedPCA(**settings).fit(X, groups=groups)
    flower = FederatedPCA(**settings, backend="flower").fit(X, groups=groups)
    # the subspaces: local runs its clients in lockstep, Flower one by one (rounding may differ), and a basis of a
    # Grassmann projector's eigenspace is arbitrary
    np.testing.assert_allclose(flower.components_.T @ flower.components_, local.components_.T @ local.components_,
                               rtol=0, atol=1e-12)
    assert [h["clients"] for h in flower.history_] == [h["clients"] for h in local.history_]
    assert [h["replied"] for h in flower.history_] == [h["clients"] for h in local.history_]
    assert flower.epsilon_ == local.epsilon_ == np.inf


def test_spdnet_flower_simulation_reports_the_same_privacy():
    X, y, groups = make_spd_classification(n_clients=3, n_matrices_per_client=40, n_channels=4, random_state=0)
    settings = dict(dims=(3,), eps=3.0, n_rounds=3, local_steps=2, batch_size=10, random_state=1)
    local = FederatedSPDNetClassifier(**settings).fit(X, y, groups=groups)
    flower = FederatedSPDNetClassifier(**settings, backend="flower").fit(X, y, groups=groups)
    assert flower.epsilon_ == local.epsilon_ <= 3.0
    assert flower.noise_std_ == local.noise_std_ > 0
    assert [h["epsilon"] for h in flower.history_] == [h["epsilon"] for h in local.history_]
    # the same noise draws too: each client's streams come from the same seed on both backends
    np.testing.assert_allclose(flower.predict_proba(X), local.predict_proba(X), atol=1e-6)


@pytest.mark.parametrize("records_per_subject, rate", [(None, 2 / 4), (3, 2 / 12)])
def test_a_subject_level_flower_simulation_is_the_local_fit(records_per_subject, rate):
    """Each simulated node reports and samples its subjects (or k records of each): the same plan, ε, noise and
    model as in-process."""
    X, y, groups = make_spd_classification(n_clients=3, n_matrices_per_client=40, n_channels=4, random_state=0)
    subjects = np.array([f"{g}-{i % 4}" for i, g in enumerate(groups)])
    settings = dict(dims=(3,), eps=3.0, n_rounds=2, batch_size=2, privacy_unit="subject", random_state=1,
                    records_per_subject=records_per_subject)
    local = FederatedSPDNetClassifier(**settings).fit(X, y, groups=groups, subjects=subjects)
    flower = FederatedSPDNetClassifier(**settings, backend="flower").fit(X, y, groups=groups, subjects=subjects)
    assert flower.epsilon_ == local.epsilon_ <= 3.0 and flower.batch_size_ == 2
    assert {e.sample_rate for e in flower.ledger_.history} == {rate}
    np.testing.assert_allclose(flower.predict_proba(X), local.predict_proba(X), atol=1e-6)


def test_flower_backend_rejects_bad_settings_before_starting_flower():
    X, groups = make_federated_pca(n_clients=3, n_samples_per_client=20, n_features=4, random_state=0)
    with pytest.raises(ValueError, match="'clients_per_round'.*\\[1, 3\\].*Got 4"):
        FederatedPCA(n_components=1, eps=None, n_rounds=1, clients_per_round=4, backend="flower",
                     solver="riemannian").fit(X, groups=groups)
    groups = groups.copy()
    groups[0] = 99  # a one-record client
    with pytest.raises(ValueError, match="Client 99 holds 1 record"):
        FederatedPCA(n_components=1, eps=None, n_rounds=1, backend="flower",
                     solver="riemannian").fit(X, groups=groups)


def test_covariance_solver_on_flower_simulation_is_the_local_fit():
    X, groups = make_federated_pca(n_clients=3, n_samples_per_client=100, n_features=6, random_state=0)
    settings = dict(n_components=2, eps=2.0, solver="covariance", random_state=0)
    local = FederatedPCA(**settings).fit(X, groups=groups)
    flower = FederatedPCA(**settings, backend="flower").fit(X, groups=groups)
    np.testing.assert_allclose(flower.components_, local.components_, rtol=0, atol=1e-12)  # the same noise
    assert flower.epsilon_ == local.epsilon_ <= 2.0 and flower.ledger_.steps == 1


@pytest.mark.slow  # three fits, two of them on Ray (80 s)
def test_distributed_noise_runs_the_deployed_secure_aggregation_on_the_simulation():
    """backend='flower' with noise='distributed': the virtual sites run the deployed protocol (a site never sends a
    release of distributed noise unmasked: without it every round would be refused), certify what the in-process
    run certifies, and draw every release from fresh OS entropy, seeded or not (a seed's stream restarted in another
    worker would replay a release's noise)."""
    X, y, groups = make_spd_classification(n_clients=4, n_matrices_per_client=30, n_channels=4, random_state=0)
    settings = dict(eps=8.0, noise="distributed", n_rounds=3, random_state=0)
    local = FederatedTangentSpaceClassifier(**settings).fit(X, y, groups=groups)
    flower = FederatedTangentSpaceClassifier(**settings, backend="flower").fit(X, y, groups=groups)
    again = FederatedTangentSpaceClassifier(**settings, backend="flower").fit(X, y, groups=groups)
    assert flower.epsilon_ == local.epsilon_ <= 8.0 and flower.local_epsilon_ == local.local_epsilon_
    assert [h["replied"] for h in flower.history_] == [[0, 1, 2, 3]] * len(flower.history_)
    assert not any("discarded" in h for h in flower.history_)
    assert not np.allclose(flower.predict_proba(X), again.predict_proba(X), rtol=0, atol=1e-9)


def test_distributed_noise_on_the_simulation_refuses_a_ray_already_running(monkeypatch):
    """Flower would fill a running Ray's workers (ignoring the one it is asked for), and a site's secure-aggregation
    sessions would then be spread over processes: refused by name before any site starts."""
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    X, y, groups = make_spd_classification(n_clients=4, n_matrices_per_client=20, n_channels=3, random_state=0)
    with pytest.raises(RuntimeError, match="ray.shutdown"):
        FederatedTangentSpaceClassifier(eps=8.0, noise="distributed", n_rounds=2,
                                        backend="flower").fit(X, y, groups=groups)
