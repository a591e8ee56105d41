import numpy as np
import pytest
import sklearn
from pyriemann.estimation import Covariances
from pyriemann.tangentspace import TangentSpace
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfedriem import FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem.datasets import make_spd_classification

from .contract import check_contract_on_spd_input
from .expected_failures import run_check

FAST = dict(n_rounds=8, batch_size=16, random_state=0)


@parametrize_with_checks(
    [FederatedTangentSpaceClassifier(eps=10, n_rounds=2, batch_size=8, n_clients=2, random_state=0)],
    expected_failed_checks=lambda est: {},
)
def test_sklearn_checks(estimator, check):
    run_check(estimator, check)


@pytest.fixture(scope="module")
def spd_data():
    return make_spd_classification(3, 60, 6, n_classes=3, class_sep=2.0, noise=0.5, random_state=0)


def test_sklearn_contract_on_spd_input(spd_data):
    check_contract_on_spd_input(lambda: FederatedTangentSpaceClassifier(eps=10.0, **FAST), *spd_data)


def test_without_noise_it_is_the_logistic_regression_a_pyriemann_pipeline_fits(spd_data):
    X, y, groups = spd_data
    test = np.arange(len(y)) % 3 == 0
    X, y, groups, Xt, yt = X[~test], y[~test], groups[~test], X[test], y[test]
    ours = FederatedTangentSpaceClassifier(eps=None, n_rounds=100, random_state=0).fit(X, y, groups=groups)
    normalise = lambda M: M * (6 / np.trace(M, axis1=1, axis2=2))[:, None, None]  # noqa: E731
    features = TangentSpace(metric="riemann").fit(normalise(X))
    features.reference_ = np.eye(6)
    theirs = LogisticRegression(max_iter=2000).fit(features.transform(normalise(X)), y)
    reference = theirs.score(features.transform(normalise(Xt)), yt)
    assert reference > 0.9 and ours.score(Xt, yt) >= reference - 0.05
    assert ours.epsilon_ == np.inf and ours.module_.features.reference.shape == (6, 6)


def test_private_fit_certifies_eps_and_learns(spd_data):
    X, y, groups = spd_data
    clf = FederatedTangentSpaceClassifier(eps=4.0, random_state=0).fit(X, y, groups=groups,
                                                                      validation_data=(X[::5], y[::5]))
    assert 0 < clf.epsilon_ <= 4.0 and clf.noise_std_ > 0 and len(clf.history_) == clf.plan_.n_rounds
    assert clf.score(X, y) > 0.6  # three classes: chance is 1/3


def test_a_public_reference_point_is_used_and_checked(spd_data):
    X, y, groups = spd_data
    public = X[groups == 0].mean(axis=0)
    clf = FederatedTangentSpaceClassifier(eps=None, reference=public, **FAST).fit(X, y, groups=groups)
    expected = public * 6 / np.trace(public)
    np.testing.assert_allclose(clf.module_.features.reference.double().numpy(), expected, rtol=1e-6)
    with pytest.raises(ValueError, match=r"'reference'.*shape \(6, 6\)"):
        FederatedTangentSpaceClassifier(reference=np.eye(5), **FAST).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match=r"positive definite.*reference\[0\]"):
        FederatedTangentSpaceClassifier(reference=-np.eye(6), **FAST).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="reference.*NaN"):
        FederatedTangentSpaceClassifier(reference=np.full((6, 6), np.nan), **FAST).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match=r"'reference' .*dtype='float32'.*condition number"):
        FederatedTangentSpaceClassifier(reference=np.diag([1, 1, 1, 1, 1, 1e-9]), **FAST).fit(X, y, groups=groups)
    clf.set_params(warm_start=True, reference=np.eye(6))
    with pytest.raises(ValueError, match="reference="):
        clf.fit(X, y, groups=groups)


def test_in_a_pipeline_after_covariances_with_routed_groups():
    rs = np.random.RandomState(0)
    mixing = [np.eye(5) + 0.6 * rs.standard_normal((5, 5)) for _ in range(2)]
    y = np.arange(120) % 2
    X = np.stack([1e-5 * mixing[label] @ rs.standard_normal((5, 200)) for label in y])
    groups = np.repeat(np.arange(3), 40)
    with sklearn.config_context(enable_metadata_routing=True):
        clf = FederatedTangentSpaceClassifier(eps=10.0, random_state=0).set_fit_request(groups=True,
                                                                                       validation_data=False)
        scores = cross_val_score(make_pipeline(Covariances("oas"), clf), X, y, cv=GroupKFold(3),
                                 params={"groups": groups})
    assert scores.mean() > 0.8


def test_it_shares_the_settings_of_the_other_classifiers():
    ours, spdnet = FederatedTangentSpaceClassifier().get_params(), FederatedSPDNetClassifier().get_params()
    assert set(ours) - {"reference"} == set(spdnet) - {"dims", "reeig_eps"}


def test_labels_that_mix_strings_and_numbers_are_a_clear_error():
    """numpy's TypeError ('<' not supported between 'int' and 'str') reached the user."""
    from skfedriem.datasets import make_spd_classification

    X, y, groups = make_spd_classification(3, 10, 3, random_state=0)
    mixed = np.array([1 if i % 2 else "a" for i in range(len(y))], dtype=object)
    with pytest.raises(ValueError, match=r"y mixes strings and other labels.*astype\(str\)"):
        FederatedTangentSpaceClassifier(n_rounds=1).fit(X, mixed, groups=groups)
    with pytest.raises(ValueError, match="classes mixes strings"):
        FederatedTangentSpaceClassifier(n_rounds=1, classes=np.array([0, "b"], dtype=object)).fit(X, y, groups=groups)
