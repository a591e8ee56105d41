import pickle

import numpy as np
import pytest
import sklearn
from sklearn.model_selection import GroupKFold, cross_val_score
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfedriem import FederatedEEGNetClassifier

from .expected_failures import run_check

SMALL = dict(F1=2, D=2, F2=4, kernel_length=16, n_rounds=30, batch_size=8, lr=3e-2, random_state=0)


@parametrize_with_checks(
    [FederatedEEGNetClassifier(eps=10, F1=2, D=1, F2=2, kernel_length=4, n_rounds=2, batch_size=8, n_clients=2,
                               random_state=0)],
    expected_failed_checks=lambda est: {},
)
def test_sklearn_checks(estimator, check):
    run_check(estimator, check)


@pytest.fixture(scope="module")
def raw_trials():
    """Two classes that differ in which channel carries a 12 Hz rhythm, 3 subjects."""
    rs = np.random.RandomState(0)
    t = np.arange(64) / 64
    X, y, groups = [], [], []
    for subject in range(3):
        for trial in range(40):
            label = trial % 2
            x = rs.standard_normal((4, 64))
            x[label] += 3 * np.sin(2 * np.pi * 12 * t + rs.uniform(0, 2 * np.pi))
            X.append(1e-5 * x)
            y.append(label)
            groups.append(subject)
    return np.asarray(X), np.asarray(y), np.asarray(groups)


def test_learns_and_certifies(raw_trials):
    X, y, groups = raw_trials
    clf = FederatedEEGNetClassifier(eps=None, **SMALL).fit(X, y, groups=groups)
    assert clf.score(X, y) > 0.9 and clf.epsilon_ == np.inf
    private = FederatedEEGNetClassifier(eps=8.0, **{**SMALL, "n_rounds": 3}).fit(X, y, groups=groups)
    assert 0 < private.epsilon_ <= 8.0 and private.noise_std_ > 0
    assert [h["round"] for h in private.history_] == [1, 2, 3]


def test_sklearn_contract_on_raw_trials(raw_trials):
    X, y, groups = raw_trials
    clf = FederatedEEGNetClassifier(eps=10.0, **{**SMALL, "n_rounds": 2})
    assert clf.fit(X, y, groups=groups) is clf
    pred = clf.predict(X)
    np.testing.assert_array_equal(sklearn.base.clone(clf).fit(X, y, groups=groups).predict(X), pred)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(clf)).predict(X), pred)
    np.testing.assert_array_equal(clf.predict(X[::-1]), pred[::-1])
    assert clf.n_features_in_ == 4 and clf.predict_proba(X).shape == (len(X), 2)
    with sklearn.config_context(enable_metadata_routing=True):
        est = FederatedEEGNetClassifier(eps=10.0, **{**SMALL, "n_rounds": 2}).set_fit_request(
            groups=True, validation_data=False)
        scores = cross_val_score(est, X, y, cv=GroupKFold(3), params={"groups": groups})
    assert scores.shape == (3,) and ((0 <= scores) & (scores <= 1)).all()


@pytest.mark.parametrize(
    "X, match",
    [(np.zeros((10, 4)), "raw trials"), (np.ones((10, 4, 16)), "n_times >= 32")],
    ids=["2-D", "short"],
)
def test_bad_trials_are_rejected(X, match):
    with pytest.raises(ValueError, match=match):
        FederatedEEGNetClassifier(**SMALL).fit(X, np.arange(10) % 2)


def test_prirfed_accounting_needs_poisson_sampling(raw_trials):
    X, y, groups = raw_trials
    with pytest.raises(ValueError, match="sampling='poisson'"):
        FederatedEEGNetClassifier(accounting="prirfed", **SMALL).fit(X, y, groups=groups)


def test_one_extreme_trial_is_refused_or_cannot_poison_the_release(raw_trials):
    X, y, groups = raw_trials
    overflow = X.copy()
    overflow[11] *= 1e44  # finite in float64 only
    with pytest.raises(ValueError, match=r"X\[11\] is not finite in float32"):
        FederatedEEGNetClassifier(eps=8.0, **{**SMALL, "n_rounds": 2}).fit(overflow, y, groups=groups)
    extreme = X.copy()
    extreme[11] = 1e3  # a flat trial: scaled by its zero std, its gradient overflows; it must count as zero
    clf = FederatedEEGNetClassifier(eps=8.0, **{**SMALL, "n_rounds": 2, "batch_size": 40,
                                                "local_steps": 4}).fit(extreme, y, groups=groups)
    assert all(np.isfinite(p.detach().numpy()).all() for p in clf.module_.parameters())


def test_errors_name_the_estimator_and_say_what_to_do(raw_trials):
    X, y, groups = raw_trials
    with pytest.raises(ValueError, match="FederatedEEGNetClassifier needs at least 2 classes"):
        FederatedEEGNetClassifier(**SMALL).fit(X, np.zeros_like(y))
    broken = X.copy()
    broken[7, 1, 3] = np.nan
    with pytest.raises(ValueError, match=r"X\[7\] contains NaN or inf .*FederatedEEGNetClassifier needs finite"):
        FederatedEEGNetClassifier(**SMALL).fit(broken, y)
