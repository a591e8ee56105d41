"""What a new user typed and got silently, or with a misleading word: each refused by name now, or made to work."""

import warnings

import numpy as np
import pytest

from skfedriem import FederatedPCA, FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem.datasets import make_federated_pca, make_spd_classification
from skfedriem.exceptions import NoiseSwampsSignalWarning, SaturatingStepWarning
from skfedriem.metrics import pca_optimality_gap, subspace_overlap


@pytest.fixture(scope="module")
def spd():
    return make_spd_classification(2, 10, 3, random_state=0)


@pytest.mark.parametrize("settings, match", [
    (dict(dims=(2.7,)), r"'dims' parameter must be a non-empty tuple of positive ints.*Got \(2.7,\)"),  # was 2
    (dict(dims=(True,)), r"'dims' parameter.*Got \(True,\)"),  # was 1
    (dict(dims=()), r"'dims' parameter.*Got \(\)"),
    (dict(reeig_eps=10), r"'reeig_eps' parameter.*\(0.0, 1.0\).*Got 10"),  # a floor above the spectrum: no learning
])
def test_spdnet_settings_that_trained_nothing_or_another_model_are_refused(spd, settings, match):
    X, y, groups = spd
    with pytest.raises(ValueError, match=match):
        FederatedSPDNetClassifier(n_rounds=1, **settings).fit(X, y, groups=groups)


@pytest.mark.parametrize("cls", [FederatedSPDNetClassifier, FederatedTangentSpaceClassifier])
def test_one_channel_matrices_are_refused(cls, spd):
    """Divided by its own trace, every 1 x 1 matrix is [[1]]: nothing to learn, said rather than trained on."""
    _, y, groups = spd
    with pytest.raises(ValueError, match=r"X holds 1 x 1 matrices"):
        cls(n_rounds=1).fit(np.full((len(y), 1, 1), 2.0), y, groups=groups)


@pytest.mark.parametrize("function, settings, match", [
    (make_spd_classification, dict(n_clients=0), r"'n_clients' parameter.*Got 0"),  # was a numpy error
    (make_spd_classification, dict(scale=0), r"'scale' parameter.*Got 0"),
    (make_spd_classification, dict(noise=-1), r"'noise' parameter.*Got -1"),
    (make_federated_pca, dict(n_components=20), r"'n_components' parameter must be at most n_features=10"),
    (make_federated_pca, dict(n_features=0), r"'n_features' parameter.*Got 0"),
])
def test_dataset_helpers_refuse_what_cannot_be_generated(function, settings, match):
    with pytest.raises(ValueError, match=match):
        function(**settings)


def test_subspace_metrics_refuse_rows_that_are_not_an_orthonormal_basis():
    basis = np.eye(4)[:2]
    with pytest.raises(ValueError, match="components must have orthonormal rows"):
        subspace_overlap(2 * basis, basis)  # was 2.0, outside [0, 1]
    with pytest.raises(ValueError, match=r"X must have shape \(n_samples >= 1, 4\)"):
        pca_optimality_gap(basis, np.ones((5, 3)))  # was numpy's matmul error
    assert subspace_overlap(basis, basis) == pytest.approx(1.0)


def test_validation_data_errors_name_validation_data(spd):
    X, y, groups = spd
    other, _, _ = make_spd_classification(2, 10, 4, random_state=0)
    clf = FederatedTangentSpaceClassifier(n_rounds=1)
    with pytest.raises(ValueError, match=r"validation_data's X_valid holds records of shape \(4, 4\); the training"):
        clf.fit(X, y, groups=groups, validation_data=(other, y))  # was "X has 4 features"
    with pytest.raises(ValueError, match=r"validation_data's y_valid holds labels outside the training classes"):
        clf.fit(X, y, groups=groups, validation_data=(X, y + 5))  # blamed y


def test_pca_takes_the_documented_batch_size_none():
    X, groups = make_federated_pca(3, 50, 5, random_state=0)
    pca = FederatedPCA(eps=1.0, solver="riemannian", n_rounds=2, batch_size=None).fit(X, groups=groups)
    assert pca.plan_.batch_size is None


def test_history_display_draws_a_fitted_pipelines_last_step(spd):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    from skfedriem.display import HistoryDisplay

    X, y, groups = spd
    pipe = make_pipeline(FunctionTransformer(), FederatedTangentSpaceClassifier(n_rounds=2))
    pipe.fit(X, y, federatedtangentspaceclassifier__groups=groups)
    display = HistoryDisplay.from_estimator(pipe)  # said "not fitted"
    assert display.estimator_name == "FederatedTangentSpaceClassifier"


def test_a_model_too_large_for_its_budget_warns_with_the_figure_and_remedies():
    """64 channels' 2,080 tangent features at eps = 1 on 24 small clients: the plan's signal-to-noise is far below
    what real EEG learnt at; the same federation at 3 channels is not warned about."""
    big, y, groups = make_spd_classification(24, 20, 64, random_state=0)
    with pytest.warns(NoiseSwampsSignalWarning, match=r"4162 coordinates.*signal-to-noise .* is [\d.]+, below 10.*"
                                                      r"channel subset"):
        clf = FederatedTangentSpaceClassifier(eps=1.0, n_rounds=2).fit(big, y, groups=groups)
    assert clf.plan_.signal_to_noise < 10 and "signal_to_noise" in str(clf.plan_)
    small = big[:, :3, :3]
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoiseSwampsSignalWarning)
        clf = FederatedTangentSpaceClassifier(eps=20.0, n_rounds=200).fit(small, y, groups=groups)
    assert clf.plan_.signal_to_noise >= 10


def test_pca_on_too_many_features_for_its_budget_warns():
    X, groups = make_federated_pca(3, 20, 300, n_components=5, random_state=0)
    with pytest.warns(NoiseSwampsSignalWarning, match=r"no better than a random one.*s = [\d.e-]+"):
        FederatedPCA(eps=0.5, n_components=5, solver="riemannian", n_rounds=2).fit(X, groups=groups)


@pytest.mark.parametrize("scale, what", [(1e-200, "underflows"), (1e200, "overflows")])
def test_pca_refuses_records_whose_second_moment_float64_cannot_hold(scale, what):
    # was: a random subspace and NaN explained_variance_ratio_ at 1e-200, without a word
    X, groups = make_federated_pca(n_clients=2, n_samples_per_client=30, n_features=4, random_state=0)
    with pytest.raises(ValueError, match=f"X: every record's squared norm {what} float64"):
        FederatedPCA(n_components=2, eps=None).fit(X * scale, groups=groups)
    pca = FederatedPCA(n_components=2, eps=None).fit(X * 1e-150, groups=groups)  # small, but held
    assert np.all(np.isfinite(pca.explained_variance_ratio_))


@pytest.mark.parametrize("cls", [FederatedSPDNetClassifier, FederatedTangentSpaceClassifier])
@pytest.mark.parametrize("eps", [None, 10.0])
def test_a_step_that_saturates_the_outputs_warns(spd, cls, eps):
    # was: lr=1e6 trained a model whose probabilities are all 0 or 1, without a word
    X, y, groups = spd
    with pytest.warns(SaturatingStepWarning, match=r"lr=1e\+06 with \d local step\(s\) a round.* can move the model"):
        cls(eps=eps, lr=1e6, n_rounds=1, batch_size=8).fit(X, y, groups=groups)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SaturatingStepWarning)
        for lr in ("auto", 3.0):  # the planned step, and the real grid's largest
            cls(eps=eps, lr=lr, n_rounds=1, batch_size=8).fit(X, y, groups=groups)
