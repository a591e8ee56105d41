"""Where an estimator's randomness comes from: secret noise by default, seeded runs marked as such."""

import pickle
import warnings

import numpy as np
import pytest

from skfedriem import FederatedPCA, FederatedSPDNetClassifier
from skfedriem.datasets import make_federated_pca, make_spd_classification
from skfedriem.exceptions import SeededNoiseWarning
from skfedriem.federated import FederatedTrainer
from skfedriem.federated.client import ClientState

X, GROUPS = make_federated_pca(n_clients=3, n_samples_per_client=60, n_features=5, random_state=0)


def pca(**kw):
    return FederatedPCA(n_components=2, solver="riemannian", n_rounds=3, local_steps=2, batch_size=20, **{"eps": 2.0, **kw})


@pytest.fixture
def client_seeds(monkeypatch):
    """Every secret seed a client's state is built from, as the engine passes it."""
    seen = []
    fresh = ClientState.fresh.__func__

    def spy(cls, seed=None, *, secure_mode=False):
        seen.append(seed)
        return fresh(cls, seed, secure_mode=secure_mode)

    monkeypatch.setattr(ClientState, "fresh", classmethod(spy))
    return seen


def test_default_noise_is_full_os_entropy_never_derived_from_public_seeds(client_seeds):
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeededNoiseWarning)  # the default run is not seeded
        est = pca().fit(X, groups=GROUPS)
    assert len(client_seeds) == 3
    entropies = [s.entropy for s in client_seeds]
    assert len(set(entropies)) == 3 and all(s.spawn_key == () for s in client_seeds)  # independent roots
    assert all(e.bit_length() > 100 for e in entropies)  # 128 bits from the OS, not a 31-bit integer
    blob = pickle.dumps(est)
    assert b"SeedSequence" not in blob and b"PCG64" not in blob
    assert all(str(e).encode() not in blob for e in entropies)


def test_two_default_runs_draw_different_noise():
    a, b = pca().fit(X, groups=GROUPS), pca().fit(X, groups=GROUPS)
    assert not np.allclose(a.components_, b.components_)


def test_an_int_seed_is_reproducible_and_says_it_is_not_private():
    with pytest.warns(SeededNoiseWarning, match="random_state=3.*anyone who knows the seed"):
        a = pca(random_state=3).fit(X, groups=GROUPS)
    b = pca(random_state=3).fit(X, groups=GROUPS)
    assert np.array_equal(a.components_, b.components_)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeededNoiseWarning)
        pca(random_state=3, eps=None).fit(X, groups=GROUPS)  # no noise to replay: no warning


def test_secure_mode_runs_and_refuses_a_seed(client_seeds):
    est = pca(secure_mode=True).fit(X, groups=GROUPS)
    assert est.epsilon_ <= 2.0 and client_seeds == [None] * 3
    with pytest.raises(ValueError, match="secure_mode=True .* refuses a seed.*random_state=0"):
        pca(secure_mode=True, random_state=0).fit(X, groups=GROUPS)


def test_automatic_split_ignores_the_records_values_and_labels(monkeypatch):
    """Substituting one trial (its matrix and its label) moves no other trial to another client."""
    captured = []
    fit = FederatedTrainer.fit

    def spy(self, clients, *args, **kw):
        captured.append([c[0].numpy().copy() for c in clients])
        return fit(self, clients, *args, **kw)

    monkeypatch.setattr(FederatedTrainer, "fit", spy)
    Xs, y, _ = make_spd_classification(n_clients=1, n_matrices_per_client=60, n_channels=4, random_state=0)
    X2, y2 = Xs.copy(), y.copy()
    X2[17] = 3 * np.eye(4)
    y2[17] = (y[17] + 1) % 2
    for data, labels in ((Xs, y), (X2, y2)):
        FederatedSPDNetClassifier(eps=None, dims=(2,), n_rounds=1, n_clients=3, batch_size=4,
                                  random_state=5).fit(data, labels)
    half = len(captured) // 2  # each fit's trainers (the reference's release, the rounds) see the same clients
    assert half >= 1 and len(captured) == 2 * half
    for first, second in zip(captured[:half], captured[half:]):
        for before, after in zip(first, second):  # the same trials, client by client
            kept = [m for m in before if not np.allclose(m, Xs[17].astype(np.float32))]
            assert len(kept) == len([m for m in after if not np.allclose(m, X2[17].astype(np.float32))])
            assert all(any(np.array_equal(m, a) for a in after) for m in kept)
