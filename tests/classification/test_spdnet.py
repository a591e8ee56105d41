import warnings

import numpy as np
import pytest
import sklearn
import torch
from pyriemann.estimation import Covariances
from sklearn.model_selection import GridSearchCV, GroupKFold, StratifiedKFold, cross_val_score
from sklearn.pipeline import Pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfedriem import FederatedSPDNetClassifier
from skfedriem.datasets import make_spd_classification

from .contract import check_contract_on_spd_input
from .expected_failures import run_check

FAST = dict(dims=(3,), n_rounds=8, batch_size=16, lr=3e-2, random_state=0)

@parametrize_with_checks(
    [FederatedSPDNetClassifier(eps=10, dims=(2,), n_rounds=2, batch_size=8, n_clients=2, random_state=0)],
    expected_failed_checks=lambda est: {},
)
def test_sklearn_checks(estimator, check):
    run_check(estimator, check)


@pytest.fixture(scope="module")
def spd_data():
    X, y, groups = make_spd_classification(3, 60, 6, n_classes=3, class_sep=2.0, noise=0.5, random_state=0)
    return X, y, groups


@pytest.fixture(scope="module")
def signals():
    """Raw multichannel signals whose class changes the channel mixing (for Covariances)."""
    rs = np.random.RandomState(0)
    mixing = [np.eye(5) + 0.6 * rs.standard_normal((5, 5)) for _ in range(2)]
    X, y, groups = [], [], []
    for subject in range(3):
        for trial in range(40):
            label = trial % 2
            X.append(1e-5 * mixing[label] @ rs.standard_normal((5, 200)))
            y.append(["left", "right"][label])
            groups.append(f"subject-{subject}")
    return np.asarray(X), np.asarray(y), np.asarray(groups)


def test_learns_separable_classes_non_privately(spd_data):
    X, y, groups = spd_data
    Xt, yt, _ = make_spd_classification(3, 30, 6, n_classes=3, class_sep=2.0, noise=0.5, random_state=0)
    clf = FederatedSPDNetClassifier(eps=None, dims=(4,), n_rounds=30, batch_size=16, lr=3e-2, random_state=0)
    clf.fit(X, y, groups=groups)
    assert clf.epsilon_ == np.inf and clf.noise_std_ == 0 and clf.mu0_ is None
    assert clf.score(X, y) > 0.9
    # same generator, different draw: same classes and client effects
    assert clf.score(Xt, yt) > 0.85


def test_private_fit_certifies_eps_and_keeps_a_history(spd_data):
    X, y, groups = spd_data
    Xv, yv = X[::5], y[::5]
    clf = FederatedSPDNetClassifier(eps=5.0, **FAST).fit(X, y, groups=groups, validation_data=(Xv, yv))
    assert 0 < clf.epsilon_ <= 5.0 and clf.delta_ == 1e-5
    assert clf.noise_std_ > 0 and clf.mu0_ > 0 and clf.batch_size_ == 16
    assert [h["round"] for h in clf.history_] == list(range(1, 9))
    eps_curve = [h["epsilon"] for h in clf.history_]
    assert all(a < b for a, b in zip(eps_curve, eps_curve[1:]))
    assert all(0 <= h["valid_accuracy"] <= 1 and h["valid_loss"] > 0 for h in clf.history_)
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(np.log(proba), clf.predict_log_proba(X), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[proba.argmax(1)])
    assert clf.decision_function(X).shape == (len(X), 3)
    assert clf.n_features_in_ == 6


def test_same_seed_same_model_and_global_rngs_untouched(spd_data):
    X, y, groups = spd_data
    torch_state, np_state = torch.get_rng_state(), np.random.get_state()
    a = FederatedSPDNetClassifier(eps=10.0, **FAST).fit(X, y, groups=groups)
    b = FederatedSPDNetClassifier(eps=10.0, **FAST).fit(X, y, groups=groups)
    assert torch.equal(torch.get_rng_state(), torch_state) and np.random.get_state()[1].tolist() == np_state[1].tolist()
    for pa, pb in zip(a.module_.parameters(), b.module_.parameters()):
        assert torch.equal(pa, pb)
    c = FederatedSPDNetClassifier(eps=10.0, **{**FAST, "random_state": 1}).fit(X, y, groups=groups)
    assert not torch.equal(a.module_.classifier.weight, c.module_.classifier.weight)


def test_sklearn_contract_on_spd_input(spd_data):
    """What the excused sklearn checks test, on valid SPD input."""
    check_contract_on_spd_input(lambda: FederatedSPDNetClassifier(eps=10.0, **FAST), *spd_data)


def test_two_classes_decision_function_is_a_logit_difference(spd_data):
    X, y, groups = spd_data
    keep = y < 2
    clf = FederatedSPDNetClassifier(eps=None, **FAST).fit(X[keep], y[keep], groups=groups[keep])
    scores = clf.decision_function(X[keep])
    assert scores.shape == (keep.sum(),)
    np.testing.assert_array_equal(clf.predict(X[keep]), clf.classes_[(scores > 0).astype(int)])


def test_pipeline_with_pyriemann_covariances_and_routed_groups(signals):
    X, y, groups = signals
    with sklearn.config_context(enable_metadata_routing=True):
        clf = FederatedSPDNetClassifier(eps=10.0, **FAST).set_fit_request(groups=True, validation_data=False)
        pipe = Pipeline([("cov", Covariances("oas")), ("clf", clf)])
        pipe.fit(X, y, groups=groups)
        assert pipe.score(X, y) > 0.6
        assert pipe.named_steps["clf"].epsilon_ <= 10.0
    # without routing, the step parameter syntax
    pipe = Pipeline([("cov", Covariances("oas")), ("clf", FederatedSPDNetClassifier(eps=10.0, **FAST))])
    pipe.fit(X, y, clf__groups=groups)
    assert pipe.predict(X).shape == y.shape


def test_cross_val_score_and_grid_search_route_groups(signals):
    X, y, groups = signals
    pipe = Pipeline([("cov", Covariances("oas")), ("clf", FederatedSPDNetClassifier(eps=10.0, **FAST))])
    scores = cross_val_score(pipe, X, y, cv=StratifiedKFold(3, shuffle=True, random_state=0))
    assert scores.shape == (3,) and np.all((0 <= scores) & (scores <= 1))
    with sklearn.config_context(enable_metadata_routing=True):
        clf = FederatedSPDNetClassifier(eps=10.0, **FAST).set_fit_request(groups=True, validation_data=False)
        pipe = Pipeline([("cov", Covariances("oas")), ("clf", clf)])
        grid = {"clf__eps": [5.0, None], "clf__lr": [1e-2, 3e-2], "clf__dims": [(3,), (4, 2)]}
        search = GridSearchCV(pipe, grid, cv=GroupKFold(3)).fit(X, y, groups=groups)
    assert len(search.cv_results_["params"]) == 8
    assert search.best_estimator_.named_steps["clf"].dims in [(3,), (4, 2)]


def spd_inputs():
    X, y, groups = make_spd_classification(2, 10, 4, random_state=0)
    return X, y, groups


def test_bad_matrices_are_rejected_with_their_index():
    X, y, groups = spd_inputs()
    clf = FederatedSPDNetClassifier(**FAST)
    with pytest.raises(ValueError, match="square matrices"):
        clf.fit(X[:, :, :3], y)
    bent = X.copy()
    bent[3, 0, 1] += 1.0
    with pytest.raises(ValueError, match=r"symmetric.*X\[3\]"):
        clf.fit(bent, y)
    negative = X.copy()
    negative[5] = -negative[5]
    with pytest.raises(ValueError, match=r"positive definite.*X\[5\]"):
        clf.fit(negative, y)
    for bad in (np.nan, np.inf):
        broken = X.copy()
        broken[2, 1, 1] = bad
        with pytest.raises(ValueError, match="NaN|infinity"):
            clf.fit(broken, y)
    fitted = clf.fit(X, y)
    with pytest.raises(ValueError, match=r"positive definite.*X\[5\]"):
        fitted.predict(negative)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"eps": 0.0}, "'eps'"),
        ({"eps": -1.0}, "'eps'"),
        ({"delta": 1.0}, "'delta'"),
        ({"delta": 0.0}, "'delta'"),
        ({"aggregation": "median"}, "'aggregation'"),
        ({"optimizer": "lbfgs"}, "'optimizer'"),
        ({"sampling": "shuffle"}, "'sampling'"),
        ({"lr_schedule": "step"}, "'lr_schedule'"),
        ({"dtype": "float16"}, "'dtype'"),
        ({"dims": (5,)}, "'dims'"),
        ({"dims": (2, 3)}, "'dims'"),
        ({"dims": 3}, "'dims'"),
        ({"clients_per_round": 5}, "'clients_per_round'"),
    ],
)
def test_bad_parameters_are_rejected(params, match):
    X, y, groups = spd_inputs()
    with pytest.raises((ValueError, TypeError), match=match):
        FederatedSPDNetClassifier(**{**FAST, **params}).fit(X, y, groups=groups)


def test_bad_targets_groups_and_validation_data():
    X, y, groups = spd_inputs()
    clf = FederatedSPDNetClassifier(**FAST)
    with pytest.raises(ValueError, match="at least 2 classes"):
        clf.fit(X, np.zeros_like(y))
    with pytest.raises(ValueError, match="Unknown label type"):
        clf.fit(X, y + 0.5)
    with pytest.raises(ValueError, match="'groups'.*shape \\(20,\\)"):
        clf.fit(X, y, groups=groups[:-1])
    with pytest.raises(ValueError, match="holds 1 record"):
        clf.fit(X, y, groups=np.r_[np.zeros(19), 1])
    with pytest.raises(TypeError, match="'validation_data'"):
        clf.fit(X, y, validation_data=X)
    with pytest.raises(ValueError, match="outside the training classes"):
        clf.fit(X, y, validation_data=(X, y + 7))


def test_warnings_for_large_delta_and_clamped_batch():
    X, y, groups = spd_inputs()
    with pytest.warns(UserWarning, match="delta=0.2"):
        FederatedSPDNetClassifier(**{**FAST, "delta": 0.2, "batch_size": 4}).fit(X, y, groups=groups)
    with pytest.warns(UserWarning, match="batch_size=16 is larger than client"):
        FederatedSPDNetClassifier(**FAST).fit(X, y, groups=groups)


def test_progress_bar_only_when_verbose(spd_data, capsys):
    X, y, groups = spd_data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        FederatedSPDNetClassifier(**{**FAST, "n_rounds": 2}).fit(X, y, groups=groups)
        assert capsys.readouterr().err == ""  # verbose="auto", and nobody watches a captured stderr
        FederatedSPDNetClassifier(**{**FAST, "n_rounds": 2, "verbose": 0}).fit(X, y, groups=groups)
        assert capsys.readouterr().err == ""
        FederatedSPDNetClassifier(**{**FAST, "n_rounds": 2, "verbose": 1}).fit(X, y, groups=groups)
    assert "rounds" in capsys.readouterr().err



def test_a_matrix_that_overflows_the_model_dtype_is_refused_by_index():
    X, y, groups = spd_inputs()
    huge = X.copy()
    huge[7] *= 1e39 / np.abs(X[7]).max()  # finite in float64, inf in float32
    with pytest.raises(ValueError, match=r"X\[7\] is not finite in float32.*dtype='float64'"):
        FederatedSPDNetClassifier(**FAST).fit(huge, y, groups=groups)
    clf = FederatedSPDNetClassifier(**{**FAST, "dtype": "float64"}).fit(huge, y, groups=groups)
    assert all(np.isfinite(p.detach().numpy()).all() for p in clf.module_.parameters())


def test_history_holds_client_timings_only_on_request(spd_data):
    X, y, groups = spd_data
    plain = FederatedSPDNetClassifier(**{**FAST, "n_rounds": 2}).fit(X, y, groups=groups)
    assert sorted(plain.history_[0]) == ["aggregation_seconds", "clients", "epsilon", "lr", "replied", "round"]
    timed = FederatedSPDNetClassifier(**{**FAST, "n_rounds": 2, "client_timings": True}).fit(X, y, groups=groups)
    assert {"round_seconds", "submission_seconds"} <= set(timed.history_[0])
    assert timed.history_[0]["round_seconds"] >= timed.history_[0]["submission_seconds"] >= 0


def test_warm_start_continues_with_the_same_classes(spd_data):
    X, y, groups = spd_data
    clf = FederatedSPDNetClassifier(**{**FAST, "n_rounds": 2, "warm_start": True}).fit(X, y, groups=groups)
    clf.fit(X, y, groups=groups)
    assert [h["round"] for h in clf.history_] == [1, 2, 3, 4]
    first_half = FederatedSPDNetClassifier(**{**FAST, "n_rounds": 2}).fit(X, y, groups=groups)
    release, rounds = first_half.ledger_.history  # the clients' mean, then the rounds; a warm start adds rounds
    assert release.steps == 1 and clf.ledger_.steps == release.steps + 2 * rounds.steps
    assert clf.epsilon_ > first_half.epsilon_
    with pytest.raises(ValueError, match="outside the classes"):
        clf.fit(X, np.where(y == y[0], 99, y), groups=groups)


def test_the_default_network_follows_the_number_of_channels():
    X, y, groups = make_spd_classification(2, 20, 3, random_state=0)  # 3 channels, as MOABB's FakeDataset
    clf = FederatedSPDNetClassifier(eps=None, n_rounds=1, batch_size=8).fit(X, y, groups=groups)
    assert clf.module_.features[1].weight.shape == (3, 3)  # one BiMap to min(16, 3)


def test_the_public_label_set_fixes_the_network_whatever_the_trials(spd_data):
    """With classes= the output width and predict_proba's shape do not depend on one trial."""
    X, y, groups = spd_data
    y = y.copy()
    y[y == 2] = 1
    y[0] = 2  # a single trial holds class 2: substituting it removes the class from y
    neighbour = y.copy()
    neighbour[0] = 1
    fits = [FederatedSPDNetClassifier(eps=10.0, classes=[0, 1, 2], **FAST).fit(X, labels, groups=groups)
            for labels in (y, neighbour)]
    assert [f.classes_.tolist() for f in fits] == [[0, 1, 2]] * 2
    assert [f.predict_proba(X[:2]).shape for f in fits] == [(2, 3)] * 2
    inferred = FederatedSPDNetClassifier(eps=10.0, **FAST).fit(X, neighbour, groups=groups)
    assert inferred.classes_.tolist() == [0, 1]  # inferred from y: the label set is treated as public
    with pytest.raises(ValueError, match=r"y holds labels outside the classes \[0, 1\]: \[2\]"):
        FederatedSPDNetClassifier(eps=10.0, classes=[0, 1], **FAST).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="'classes' parameter .* at least 2 distinct"):
        FederatedSPDNetClassifier(classes=["a", "a"], **FAST).fit(X, y, groups=groups)


def test_continuing_a_non_private_fit_reports_infinite_epsilon(spd_data):
    """A non-private fit then one private round at a tiny rate is not a private model."""
    X, y, groups = spd_data
    clf = FederatedSPDNetClassifier(eps=None, warm_start=True, **FAST).fit(X, y, groups=groups)
    clf.set_params(eps=1.0, lr=1e-12, n_rounds=1)
    with pytest.warns(UserWarning, match="was not private .* epsilon_ will be inf"):
        clf.fit(X, y, groups=groups)
    assert np.isinf(clf.epsilon_) and np.isinf(clf.history_[-1]["epsilon"])


@pytest.fixture(scope="module")
def offset_data(spd_data):
    """spd_data with a common part all trials share (real EEG's covariances do): X ↦ M X Mᵀ."""
    X, y, groups = spd_data
    M = np.diag([3.0, 2.0, 1.5, 1.0, 0.7, 0.5]) + 0.2
    return np.einsum("ij,njk,lk->nil", M, X, M), y, groups


def _log_euclidean_mean(X):
    from scipy.linalg import expm, logm

    normalised = X * (X.shape[-1] / np.trace(X, axis1=1, axis2=2))[:, None, None]
    mean = expm(np.mean([np.real(logm(x)) for x in normalised], axis=0))
    return mean * (X.shape[-1] / np.trace(mean))


def test_the_inputs_are_whitened_by_the_clients_mean(offset_data):
    """Without privacy the reference is the clients' exact mean (equal clients: the trials' mean), and every input
    is whitened by it before the BiMap."""
    X, y, groups = offset_data
    clf = FederatedSPDNetClassifier(eps=None, **FAST).fit(X, y, groups=groups)
    np.testing.assert_allclose(clf.reference_, _log_euclidean_mean(X), rtol=1e-4, atol=1e-5)
    released = clf.module_.recentre.reference.double().numpy()
    np.testing.assert_allclose(released, clf.reference_)
    plain = FederatedSPDNetClassifier(eps=None, reference=None, **FAST).fit(X, y, groups=groups)
    np.testing.assert_allclose(plain.reference_, np.eye(6))
    assert isinstance(plain.module_.recentre, torch.nn.Identity) and len(plain.ledger_.history) == 1


def test_a_private_fit_releases_the_mean_charges_it_and_the_rounds_take_the_rest(offset_data):
    from skfedriem.classification import REFERENCE_SHARE

    X, y, groups = offset_data
    clf = FederatedSPDNetClassifier(eps=8.0, **FAST).fit(X, y, groups=groups)
    release, rounds = clf.ledger_.history
    assert release.steps == 1 and rounds.steps > 1 and clf.epsilon_ <= 8.0
    assert np.linalg.norm(clf.reference_ - np.eye(6)) > 1.0  # the common part, found through the noise
    assert np.linalg.norm(clf.reference_ - _log_euclidean_mean(X)) < np.linalg.norm(np.eye(6) - _log_euclidean_mean(X))
    identity = FederatedSPDNetClassifier(eps=8.0, reference=None, **FAST).fit(X, y, groups=groups)
    assert len(identity.ledger_.history) == 1 and identity.noise_std_ < clf.noise_std_  # all of eps to the rounds
    assert 0 < REFERENCE_SHARE < 1


def test_a_public_start_keeps_its_own_reference_point(offset_data):
    X, y, groups = offset_data
    public = FederatedSPDNetClassifier(eps=None, **FAST).fit(X, y, groups=groups)
    with pytest.warns(UserWarning, match="treated as public"):
        tuned = FederatedSPDNetClassifier(eps=4.0, **{**FAST, "init": public}).fit(X, y, groups=groups)
    np.testing.assert_allclose(tuned.reference_, public.reference_, rtol=1e-5, atol=1e-6)
    assert len(tuned.ledger_.history) == 1  # nothing released: the rounds alone
    with pytest.raises(ValueError, match="reference='mean' with init= is not supported"):
        FederatedSPDNetClassifier(eps=4.0, reference="mean", **{**FAST, "init": public}).fit(X, y, groups=groups)


def test_a_trainer_made_outside_fit_cannot_take_the_exact_mean(spd_data):
    """A deployment builds its trainer itself: no release runs there, so the exact mean is refused by name."""
    X, y, _ = spd_data
    with pytest.raises(ValueError, match="takes the clients' mean, which fit releases"):
        FederatedSPDNetClassifier(eps=None, **FAST).make_trainer(X.shape[1:], classes=np.unique(y),
                                                                 client_sizes=[60, 60, 60])
    trainer = FederatedSPDNetClassifier(eps=None, reference=None, **FAST).make_trainer(
        X.shape[1:], classes=np.unique(y), client_sizes=[60, 60, 60])
    assert isinstance(trainer.module.recentre, torch.nn.Identity)
