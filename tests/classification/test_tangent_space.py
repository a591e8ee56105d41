import numpy as np
import torch
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
    assert set(ours) == set(spdnet) - {"dims", "reeig_eps"}


def test_labels_that_mix_strings_and_numbers_are_a_clear_error():
    """numpy's TypeError ('<' not supported between 'int' and 'str') reached the user."""
    from skfedriem.datasets import make_spd_classification

    X, y, groups = make_spd_classification(3, 10, 3, random_state=0)
    mixed = np.array([1 if i % 2 else "a" for i in range(len(y))], dtype=object)
    with pytest.raises(ValueError, match=r"y mixes strings and other labels.*astype\(str\)"):
        FederatedTangentSpaceClassifier(n_rounds=1).fit(X, mixed, groups=groups)
    with pytest.raises(ValueError, match="classes mixes strings"):
        FederatedTangentSpaceClassifier(n_rounds=1, classes=np.array([0, "b"], dtype=object)).fit(X, y, groups=groups)


def _log_euclidean_mean_of_client_means(X, groups):
    from pyriemann.utils.tangentspace import tangent_space

    from skfedriem.models import reference_from_mean

    n = X.shape[1]
    normalised = X * (n / np.trace(X, axis1=1, axis2=2))[:, None, None]
    means = [tangent_space(normalised[groups == g], np.eye(n), metric="riemann").mean(0) for g in np.unique(groups)]
    reference = reference_from_mean(np.mean(means, 0), n)
    return reference * n / np.trace(reference)


def test_without_privacy_the_reference_is_the_clients_log_euclidean_mean(spd_data):
    """At the identity, a pyRiemann user's pipeline on real EEG fell to chance (0.507 against 0.738)."""
    X, y, groups = spd_data
    clf = FederatedTangentSpaceClassifier(eps=None, **FAST).fit(X, y, groups=groups)
    np.testing.assert_allclose(clf.reference_, _log_euclidean_mean_of_client_means(X, groups), rtol=1e-4, atol=1e-5)
    assert clf.epsilon_ == np.inf


def test_a_private_auto_fit_releases_the_mean_unless_its_planned_noise_would_bury_it(monkeypatch):
    """The release is planned from public quantities alone; what it released is shrunk towards the identity (James–
    Stein) by its public noise std: on data centred at the identity a noisy mean leaves the reference near it."""
    import skfedriem.classification._reference as tangent
    from skfedriem.classification import REFERENCE_NOISE_LIMIT

    X, y, groups = make_spd_classification(n_clients=3, n_matrices_per_client=60, n_channels=6, random_state=0)
    released = []
    original = tangent.shrunk_mean

    def spy(mean, noise_std):
        released.append((mean, noise_std))
        return original(mean, noise_std)

    monkeypatch.setattr(tangent, "shrunk_mean", spy)
    fit = FederatedTangentSpaceClassifier(eps=4.0, n_rounds=5, batch_size=16, random_state=0).fit(X, y, groups=groups)
    (mean, noise_std), = released
    assert len(fit.ledger_.history) == 2 and fit.ledger_.history[0].steps == 1  # the release, then the rounds
    assert np.sqrt(mean.size) * noise_std <= REFERENCE_NOISE_LIMIT * np.sqrt(6)
    assert np.linalg.norm(mean) > 3.0  # what was released: mostly noise (these data are centred at the identity) ...
    unshrunk = tangent.reference_from_mean(mean.astype(np.float64), 6)
    assert np.linalg.norm(unshrunk - np.eye(6)) > 2 * np.linalg.norm(fit.reference_ - np.eye(6))  # ... shrunk back
    released.clear()
    small = FederatedTangentSpaceClassifier(eps=1.0, n_rounds=5, batch_size=16, random_state=0).fit(X, y, groups=groups)
    assert not released and len(small.ledger_.history) == 1  # too noisy to plan: no release, all of eps to the rounds
    np.testing.assert_allclose(small.reference_, np.eye(6), atol=1e-12)
    assert small.epsilon_ <= 1.0


def test_a_released_mean_is_charged_and_the_rounds_take_what_is_left(spd_data):
    from skfedriem.classification import REFERENCE_SHARE
    from skfedriem.privacy import PrivacyAccountant

    X, y, groups = spd_data
    clf = FederatedTangentSpaceClassifier(eps=4.0, reference="mean", random_state=0).fit(X, y, groups=groups)
    release, *rounds = clf.ledger_.history
    assert (release.sample_rate, release.steps) == (1.0, 1)  # every trial of every client, once
    alone = PrivacyAccountant()
    alone.step(mu0=release.mu0, sample_rate=1.0, num_steps=1)
    assert alone.get_epsilon(1e-5) <= REFERENCE_SHARE * 4.0 * (1 + 1e-9)
    without = PrivacyAccountant.from_state_dict({"history": clf.ledger_.state_dict()["history"][1:]})
    assert without.get_epsilon(1e-5) < clf.epsilon_ <= 4.0  # both charged, and composed within eps
    identity = FederatedTangentSpaceClassifier(eps=4.0, reference=None, random_state=0).fit(X, y, groups=groups)
    assert clf.noise_std_ > identity.noise_std_  # the rounds had less to spend
    assert not np.allclose(clf.reference_, np.eye(6), atol=1e-3)
    with pytest.raises(ValueError, match="reference='mean' with eps='budget'"):
        from skfedriem.privacy import PrivacyBudget

        FederatedTangentSpaceClassifier(eps="budget", reference="mean", privacy_budget=PrivacyBudget(8.0, n_fits=2),
                                        **FAST).fit(X, y, groups=groups)


@pytest.mark.parametrize("clip", [4.0 * np.sqrt(6), np.inf])
def test_one_extreme_trial_moves_the_released_mean_by_at_most_its_sensitivity(clip):
    """The release is the ordinary private step: each trial's tangent vector clipped to C, so replacing one moves a
    client's mean by at most 2C / m (the unclipped variant, clip=inf, is shown to exceed it)."""
    from skfedriem.federated.client import ClientState
    from skfedriem.federated.client_round import run_client_round
    from skfedriem.federated.instructions import RoundInstructions
    from skfedriem.models import TangentMean

    X, _, _ = make_spd_classification(1, 20, 6, random_state=1)
    extreme = X.copy()
    extreme[0] = np.diag([1e6, 1, 1, 1, 1, 1e-6]) * np.trace(X[0])
    instructions = RoundInstructions(lr=1.0, local_steps=1, batch_size=20, clip=clip, noise_std=0.0,
                                     sampling="fixed", aggregation="projavg")
    released = []
    for trials in (X, extreme):
        model = TangentMean(6, dtype=torch.float64)
        theta = {"mean.weight": model.mean.weight.detach().clone()}
        submission, _ = run_client_round(model, theta, (torch.from_numpy(trials),), ClientState.fresh(),
                                         instructions, loss_fn=lambda losses: losses)
        released.append(submission["mean.weight"])
    moved = float((released[0] - released[1]).norm())
    bound = 2 * 4.0 * np.sqrt(6) / 20
    assert (moved <= bound * (1 + 1e-9)) == np.isfinite(clip)


def test_a_trainer_made_outside_fit_cannot_reuse_an_earlier_fits_mean(spd_data):
    """make_trainer + set_fitted after a fit at the exact mean trained privately at it and charged nothing for it."""
    X, y, groups = spd_data
    clf = FederatedTangentSpaceClassifier(eps=None, reference="mean", **FAST).fit(X, y, groups=groups)
    clf.set_params(eps=1.0)
    with pytest.raises(ValueError, match="takes the clients' mean, which fit releases and charges"):
        clf.make_trainer(X.shape[1:], classes=np.unique(y), client_sizes=[60, 60, 60])


@pytest.mark.parametrize("case", ["budget too small", "accounting that cannot compose the release"])
def test_a_fit_the_budget_or_the_accountant_refuses_is_refused_before_the_mean_is_released(spd_data, case,
                                                                                           monkeypatch):
    from skfedriem.federated import FederatedTrainer
    from skfedriem.exceptions import PrivacyBudgetExceeded
    from skfedriem.privacy import PrivacyBudget

    X, y, groups = spd_data
    fits = []
    original = FederatedTrainer.fit
    monkeypatch.setattr(FederatedTrainer, "fit", lambda self, *a, **k: (fits.append(self.run_name),
                                                                        original(self, *a, **k))[1])
    budget = PrivacyBudget(0.5 if case == "budget too small" else 10.0)
    options = dict(accounting="prirfed", sampling="poisson") if case != "budget too small" else {}
    clf = FederatedTangentSpaceClassifier(eps=1.0, reference="mean", privacy_budget=budget, **options, **FAST)
    with pytest.raises(PrivacyBudgetExceeded if case == "budget too small" else ValueError):
        clf.fit(X, y, groups=groups)
    assert fits == [] and budget.fits == []  # nothing released, nothing charged


def test_the_mean_and_the_rounds_are_one_fit_of_a_budget(spd_data):
    from skfedriem.privacy import PrivacyBudget

    X, y, groups = spd_data
    budget = PrivacyBudget(6.0, n_fits=3)
    clf = FederatedTangentSpaceClassifier(eps=2.0, reference="mean", privacy_budget=budget, **FAST).fit(
        X, y, groups=groups)
    assert len(budget.fits) == 1 and budget.spent() == pytest.approx(clf.epsilon_, rel=1e-3)
    assert "1 of 3 planned fits" in budget.summary()


@pytest.mark.parametrize("settings", [dict(eps=1e-12), dict(eps=1.0, delta=0.9)])
def test_an_eps_the_release_leaves_nothing_of_is_a_value_error_naming_it(spd_data, settings):
    """Was PrivacyBudgetExceeded about "0 remaining planned fits" to a user who passed no budget."""
    X, y, groups = spd_data
    with pytest.raises(ValueError, match=r"leaves the rounds no ε"):
        FederatedTangentSpaceClassifier(reference="mean", **settings, **FAST).fit(X, y, groups=groups)


@pytest.mark.parametrize("noise", ["local", "distributed"])
def test_the_shrinkage_takes_the_noise_the_release_really_carries(monkeypatch, noise):
    """σ̄ that shrinks the released mean is the std of the noise it carries: over seeds, ‖m̂ − m‖² / (d σ̄²) ≈ 1.
    With distributed noise all K clients add a share sized for K − t: the plan's σ̄ alone gave 1.4 at K = 3."""
    import skfedriem.classification._reference as tangent
    from skfedriem.models import TangentMean

    X, y, groups = make_spd_classification(n_clients=3, n_matrices_per_client=60, n_channels=6, random_state=0)
    model = TangentMean(6, dtype=torch.float64)
    with torch.no_grad():
        vectors = model.features(model.normalize(torch.from_numpy(X))).numpy()
    truth = np.mean([vectors[groups == g].mean(axis=0) for g in np.unique(groups)], axis=0)  # clients' equal weights
    released = []
    original = tangent.shrunk_mean
    monkeypatch.setattr(tangent, "shrunk_mean", lambda mean, std: released.append((mean, std)) or original(mean, std))
    ratios = []
    for seed in range(10):
        FederatedTangentSpaceClassifier(eps=8.0, reference="mean", noise=noise, n_rounds=1, dtype="float64",
                                        random_state=seed).fit(X, y, groups=groups)
        mean, std = released[-1]
        ratios.append(np.sum((mean - truth) ** 2) / (mean.size * std**2))
    assert 0.7 < np.mean(ratios) < 1.3, ratios


def test_a_fit_the_rounds_would_refuse_charges_nothing_and_releases_nothing(spd_data):
    """The default releases the clients' mean before the rounds: a setting the rounds refuse (more clients a round
    than there are) is refused before the release is charged or run, as it is without a release."""
    from skfedriem.privacy import PrivacyBudget

    X, y, groups = spd_data
    budget = PrivacyBudget(20.0, delta=1e-5)
    with pytest.raises(ValueError, match="clients_per_round"):
        FederatedTangentSpaceClassifier(eps=4.0, clients_per_round=10, privacy_budget=budget,
                                        **FAST).fit(X, y, groups=groups)
    assert budget.fits == []
