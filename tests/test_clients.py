"""Clients and their subjects: subject-level privacy (``privacy_unit="subject"``) from ``fit`` to the ledger."""

import warnings

import numpy as np
import pytest
import sklearn
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.pipeline import Pipeline

from skfedriem import FederatedPCA, FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem._clients import client_subjects
from skfedriem.datasets import make_federated_pca, make_spd_classification
from skfedriem.privacy import PrivacyAccountant

from .privacy.prv_reference import SymmetrisedSubsampledGaussian, prv_epsilon

FAST = dict(n_rounds=3, random_state=0)


@pytest.fixture(scope="module")
def federation():
    """3 clients of 40 trials, each of 4 subjects of 10 trials (subject names unique across clients)."""
    X, y, groups = make_spd_classification(3, 40, 5, random_state=0)
    subjects = np.array([f"site{g}-s{i % 4}" for i, g in enumerate(groups)])
    return X, y, groups, subjects


def test_a_subject_level_fit_is_charged_at_the_subject_rate_as_an_independent_accountant(federation):
    """The ledger's ε equals prv-accountant's composition of the symmetrised subsampled Gaussian at q = B / n_s
    (subjects), μ0 = 2C / (B σ), over T τ steps, all read from the run: σ the noise it drew, B its subjects per
    step, n_s the smallest client's subjects."""
    X, y, groups, subjects = federation
    clf = FederatedSPDNetClassifier(eps=4.0, batch_size=2, privacy_unit="subject", **FAST)
    clf.fit(X, y, groups=groups, subjects=subjects)
    n_subjects = min(len(set(subjects[groups == g])) for g in np.unique(groups))
    assert (clf.batch_size_, n_subjects) == (2, 4)
    assert {entry.sample_rate for entry in clf.ledger_.history} == {2 / 4}
    mu0 = 2 * clf.clip / (clf.batch_size_ * clf.noise_std_)
    steps = sum(entry.steps for entry in clf.ledger_.history)
    assert steps == 3 * clf.plan_.steps_per_round == 3 * 2  # one epoch of 4 subjects at B = 2
    low, _, up = prv_epsilon(SymmetrisedSubsampledGaussian(2 / 4, mu0), steps, clf.delta)
    assert low <= clf.epsilon_ <= 1.01 * up
    assert "privacy_unit='subject'" in clf.plan_.reason and "q = 0.5" in clf.plan_.reason


@pytest.mark.parametrize("cls", [FederatedSPDNetClassifier, FederatedTangentSpaceClassifier])
def test_without_subjects_each_client_is_one_subject(cls, federation):
    """Client-level privacy: every step is the client's one subject, all its trials (q = 1)."""
    X, y, groups, _ = federation
    clf = cls(eps=4.0, privacy_unit="subject", **FAST).fit(X, y, groups=groups)
    assert clf.batch_size_ == 1 and clf.epsilon_ <= 4.0
    assert {entry.sample_rate for entry in clf.ledger_.history} == {1.0}


def test_a_subject_whose_trials_sit_at_two_clients_is_refused_by_name(federation):
    X, y, groups, subjects = federation
    shared = subjects.copy()
    shared[np.flatnonzero(groups == groups[-1])[0]] = subjects[0]  # one trial of subject 0 at another client
    clf = FederatedSPDNetClassifier(eps=4.0, privacy_unit="subject", **FAST)
    with pytest.raises(ValueError, match=f"Subject '{subjects[0]}' has records at clients"):
        clf.fit(X, y, groups=groups, subjects=shared)


def test_bad_subject_arrays_are_refused(federation):
    X, y, groups, subjects = federation
    clf = FederatedSPDNetClassifier(eps=4.0, privacy_unit="subject", **FAST)
    with pytest.raises(ValueError, match=r"'subjects' array must have one label per sample, shape \(120,\)"):
        clf.fit(X, y, groups=groups, subjects=subjects[:-1])
    with pytest.raises(ValueError, match="'subjects' array contains NaN"):
        clf.fit(X, y, groups=groups, subjects=np.where(np.arange(120) == 3, np.nan, 1.0))
    with pytest.raises(ValueError, match="'privacy_unit' parameter"):
        FederatedSPDNetClassifier(privacy_unit="person").fit(X, y, groups=groups)


def test_subjects_given_to_a_record_level_fit_are_named_as_unused(federation):
    X, y, groups, subjects = federation
    with pytest.warns(UserWarning, match="privacy_unit='record': the clients are groups, each trial is protected"):
        FederatedSPDNetClassifier(eps=4.0, **FAST).fit(X, y, groups=groups, subjects=subjects)


def test_a_warm_start_cannot_change_the_unit(federation):
    X, y, groups, subjects = federation
    clf = FederatedSPDNetClassifier(eps=4.0, warm_start=True, **FAST).fit(X, y, groups=groups)
    clf.set_params(privacy_unit="subject")
    with pytest.raises(ValueError, match="protected each 'record'; got privacy_unit='subject'"):
        clf.fit(X, y, groups=groups, subjects=subjects)


def test_subject_level_clients_run_one_by_one_and_the_plan_is_for_subjects(federation):
    X, y, groups, subjects = federation
    clf = FederatedSPDNetClassifier(eps=4.0, privacy_unit="subject", **FAST)
    trainer = clf.make_trainer((5, 5), classes=[0, 1], client_sizes=[4, 4, 4])
    assert not trainer.client_recipe(simulated=True).lockstep
    trainer.pricing.plan([4, 4, 4], [0, 1, 2])
    assert trainer.pricing.client_instructions(0, 0.1).privacy_unit == "subject"
    assert trainer.plan_.batch_size == 2  # "auto": half of the smallest client's 4 subjects


def test_pipelines_cross_validation_and_grid_search_route_groups_and_subjects(federation):
    X, y, groups, subjects = federation
    with sklearn.config_context(enable_metadata_routing=True):
        clf = FederatedSPDNetClassifier(eps=4.0, privacy_unit="subject", **FAST)
        clf.set_fit_request(groups=True, subjects=True, validation_data=False)
        pipe = Pipeline([("clf", clf)])
        scores = cross_val_score(pipe, X, y, cv=KFold(3, shuffle=True, random_state=0),
                                 params={"groups": groups, "subjects": subjects})
        search = GridSearchCV(pipe, {"clf__lr": [0.05, 0.1]}, cv=KFold(2, shuffle=True, random_state=0))
        search.fit(X, y, groups=groups, subjects=subjects)
    assert scores.shape == (3,) and np.all((0 <= scores) & (scores <= 1))
    assert search.best_estimator_.named_steps["clf"].epsilon_ <= 4.0


@pytest.mark.parametrize("solver", ["covariance", "riemannian"])
def test_pca_protects_subjects_too(solver):
    X, groups = make_federated_pca(n_clients=3, n_samples_per_client=60, n_features=6, random_state=0)
    subjects = np.array([f"{g}-{i % 5}" for i, g in enumerate(groups)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pca = FederatedPCA(2, eps=4.0, solver=solver, privacy_unit="subject", random_state=0)
        pca.fit(X, groups=groups, subjects=subjects)
    assert pca.epsilon_ <= 4.0 and pca.batch_size_ == 5  # full batches of the 5 subjects
    assert {entry.sample_rate for entry in pca.ledger_.history} == {1.0}


def test_client_subjects_numbers_each_clients_subjects_from_zero():
    indices = [np.array([0, 1, 2]), np.array([3, 4])]
    codes, sizes = client_subjects(indices, ["a", "b"], np.array(["x", "y", "x", "z", "z"]), n_records=5)
    assert [c.tolist() for c in codes] == [[0, 1, 0], [0, 0]] and sizes == [2, 1]
    codes, sizes = client_subjects(indices, ["a", "b"], None, n_records=5)
    assert [c.tolist() for c in codes] == [[0, 0, 0], [0, 0]] and sizes == [1, 1]


def test_subjects_without_any_client_split_are_refused(federation):
    X, y, _, _ = federation
    with pytest.raises(ValueError, match="neither groups nor subjects"):
        FederatedSPDNetClassifier(eps=4.0, privacy_unit="subject", **FAST).fit(X, y)
    whole = FederatedSPDNetClassifier(eps=4.0, privacy_unit="subject", n_clients=1, **FAST).fit(X, y)
    assert whole.batch_size_ == 1 and {e.sample_rate for e in whole.ledger_.history} == {1.0}


def test_a_budget_holding_record_level_fits_refuses_a_subject_level_one(federation):
    """A budget's ε is per subject only while every fit charged to it is; a record-level fit may follow."""
    from skfedriem.exceptions import PrivacyBudgetExceeded
    from skfedriem.privacy import PrivacyBudget

    X, y, groups, subjects = federation
    budget = PrivacyBudget(20.0, n_fits=3)
    FederatedSPDNetClassifier(eps=4.0, privacy_unit="subject", privacy_budget=budget, **FAST).fit(
        X, y, groups=groups, subjects=subjects)
    FederatedSPDNetClassifier(eps=4.0, privacy_budget=budget, **FAST).fit(X, y, groups=groups)
    with pytest.raises(PrivacyBudgetExceeded, match="already holds record-level fits"):
        FederatedSPDNetClassifier(eps=4.0, privacy_unit="subject", privacy_budget=budget, **FAST).fit(
            X, y, groups=groups, subjects=subjects)
    assert [fit["privacy_unit"] for fit in budget.fits] == ["subject", "record"]


def test_poisson_sampling_and_adaptive_clipping_count_subjects(federation):
    """Poisson steps draw each subject at rate B / n_s (the ledger's rate); adaptive clipping's noisy count is over
    the subjects of a step, so its fraction stays a fraction of them."""
    X, y, groups, subjects = federation
    poisson = FederatedSPDNetClassifier(eps=4.0, batch_size=2, sampling="poisson", privacy_unit="subject", **FAST)
    poisson.fit(X, y, groups=groups, subjects=subjects)
    assert {(e.sample_rate, e.sampling) for e in poisson.ledger_.history} == {(2 / 4, "poisson")}
    adaptive = FederatedSPDNetClassifier(eps=4.0, batch_size=2, clip="auto", privacy_unit="subject", **FAST)
    adaptive.fit(X, y, groups=groups, subjects=subjects)
    assert adaptive.epsilon_ <= 4.0 and all("clipped_fraction" in row for row in adaptive.history_)
    assert {e.sample_rate for e in adaptive.ledger_.history} == {2 / 4}


def test_subject_level_fits_do_not_depend_on_n_jobs(federation):
    X, y, groups, subjects = federation
    fits = [FederatedSPDNetClassifier(eps=4.0, batch_size=2, privacy_unit="subject", n_jobs=n_jobs, **FAST).fit(
        X, y, groups=groups, subjects=subjects) for n_jobs in (1, 2)]
    assert fits[0].epsilon_ == fits[1].epsilon_ and fits[0].ledger_.state_dict() == fits[1].ledger_.state_dict()
    np.testing.assert_allclose(fits[0].predict_proba(X), fits[1].predict_proba(X), atol=1e-6)


def test_the_tangent_spaces_released_reference_is_charged_per_subject(federation):
    """reference="mean" releases the clients' mean before the rounds: at subject level, every subject's mean of its
    trials in one full-batch step (q = 1), then the rounds at B subjects of 4, all within ε."""
    X, y, groups, subjects = federation
    clf = FederatedTangentSpaceClassifier(eps=4.0, reference="mean", batch_size=2, privacy_unit="subject", **FAST)
    clf.fit(X, y, groups=groups, subjects=subjects)
    rates = [entry.sample_rate for entry in clf.ledger_.history]
    assert rates[0] == 1.0 and set(rates[1:]) == {2 / 4} and clf.epsilon_ <= 4.0


# ---- subjects that give k trials a round, sampled and clipped as records (records_per_subject=k)


def test_a_fit_of_k_trials_per_subject_is_charged_for_groups_of_k_of_its_records(federation):
    """Every step samples B of the smallest client's k n_s slots (q = B / (k n_s)) at μ0 = Δ C / (B σ) read from the
    run; its record-level composition is prv-accountant's, and ``epsilon_`` is the group privacy of that
    composition over k, at most the target."""
    from skfedriem.privacy import group_epsilon

    X, y, groups, subjects = federation
    clf = FederatedSPDNetClassifier(eps=4.0, batch_size=4, privacy_unit="subject", records_per_subject=3, **FAST)
    clf.fit(X, y, groups=groups, subjects=subjects)
    assert {(e.sample_rate, e.group_size) for e in clf.ledger_.history} == {(4 / 12, 3)}
    steps = sum(entry.steps for entry in clf.ledger_.history)
    assert steps == 3 * 3  # one epoch of 12 slots at B = 4, three rounds
    mu0 = 2 * clf.clip / (clf.batch_size_ * clf.noise_std_)
    records = PrivacyAccountant()
    records.step(mu0=mu0, sample_rate=4 / 12, num_steps=steps)
    low, _, up = prv_epsilon(SymmetrisedSubsampledGaussian(4 / 12, mu0), steps, clf.delta)
    assert low <= records.get_epsilon(clf.delta) <= 1.01 * up
    assert clf.epsilon_ == pytest.approx(group_epsilon(records, 3, clf.delta), rel=1e-9) and clf.epsilon_ <= 4.0
    assert clf.epsilon_ > 2 * records.get_epsilon(clf.delta)
    assert "records_per_subject=3" in clf.plan_.reason and "q = 0.333" in clf.plan_.reason


def test_records_per_subject_without_the_subject_unit_is_refused_by_name(federation):
    X, y, groups, _ = federation
    with pytest.raises(ValueError, match="records_per_subject=3 with privacy_unit='record'"):
        FederatedSPDNetClassifier(eps=4.0, records_per_subject=3, **FAST).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="records_per_subject"):
        FederatedSPDNetClassifier(eps=4.0, privacy_unit="subject", records_per_subject=0, **FAST).fit(
            X, y, groups=groups)


@pytest.mark.parametrize("sampling, clip", [("poisson", 1.0), ("fixed", "auto")])
def test_k_trials_per_subject_with_poisson_sampling_or_adaptive_clipping_count_records(federation, sampling, clip):
    X, y, groups, subjects = federation
    clf = FederatedSPDNetClassifier(eps=4.0, batch_size=4, sampling=sampling, clip=clip, privacy_unit="subject",
                                    records_per_subject=2, **FAST).fit(X, y, groups=groups, subjects=subjects)
    assert {(e.sample_rate, e.sampling, e.group_size) for e in clf.ledger_.history} == {(4 / 8, sampling, 2)}
    assert clf.epsilon_ <= 4.0


def test_k_trials_per_subject_in_a_grid_search_and_under_a_budget_of_every_fit(federation):
    """Routed subjects reach every fit; the budget composes the fits' records and charges groups of k."""
    from skfedriem.privacy import PrivacyBudget, group_epsilon

    X, y, groups, subjects = federation
    budget = PrivacyBudget(30.0)
    with sklearn.config_context(enable_metadata_routing=True):
        clf = FederatedSPDNetClassifier(eps=3.0, batch_size=4, privacy_unit="subject", records_per_subject=2,
                                        privacy_budget=budget, **FAST)
        clf.set_fit_request(groups=True, subjects=True, validation_data=False)
        search = GridSearchCV(Pipeline([("clf", clf)]), {"clf__lr": [0.05, 0.1]},
                              cv=KFold(2, shuffle=True, random_state=0))
        search.fit(X, y, groups=groups, subjects=subjects)
    assert len(budget.fits) == 5 and all(fit["privacy_unit"] == "subject" for fit in budget.fits)
    records = PrivacyAccountant()
    for fit in budget.fits:
        for step in fit["steps"]:
            assert step["group_size"] == 2
            records.step(**{"mu0": step["mu0"], "sample_rate": step["sample_rate"], "num_steps": step["steps"],
                            "sampling": step["sampling"]})
    assert budget.spent() == pytest.approx(group_epsilon(records, 2, budget.delta, ), rel=1e-3)


@pytest.mark.parametrize("solver", ["covariance", "riemannian"])
def test_pca_samples_k_trials_per_subject_too(solver):
    X, groups = make_federated_pca(n_clients=3, n_samples_per_client=60, n_features=6, random_state=0)
    subjects = np.array([f"{g}-{i % 5}" for i, g in enumerate(groups)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pca = FederatedPCA(2, eps=4.0, solver=solver, privacy_unit="subject", records_per_subject=4, random_state=0)
        pca.fit(X, groups=groups, subjects=subjects)
    assert pca.epsilon_ <= 4.0
    assert {entry.group_size for entry in pca.ledger_.history} == {4}


def test_k_trials_per_subject_do_not_depend_on_n_jobs(federation):
    X, y, groups, subjects = federation
    fits = [FederatedSPDNetClassifier(eps=4.0, batch_size=4, privacy_unit="subject", records_per_subject=2,
                                      n_jobs=n_jobs, **FAST).fit(X, y, groups=groups, subjects=subjects)
            for n_jobs in (1, 2)]
    assert fits[0].ledger_.state_dict() == fits[1].ledger_.state_dict()
    np.testing.assert_allclose(fits[0].predict_proba(X), fits[1].predict_proba(X), atol=1e-6)


def test_k_trials_per_subject_run_in_lockstep_as_one_by_one(federation):
    X, y, groups, subjects = federation
    fits = [FederatedSPDNetClassifier(eps=4.0, batch_size=4, privacy_unit="subject", records_per_subject=2,
                                      lockstep=lockstep, **FAST) for lockstep in (False, True)]
    assert fits[1].make_trainer((5, 5), classes=[0, 1], client_sizes=[8, 8, 8]).client_recipe(simulated=True).lockstep
    for clf in fits:
        clf.fit(X, y, groups=groups, subjects=subjects)
    assert fits[0].epsilon_ == fits[1].epsilon_
    np.testing.assert_allclose(fits[1].predict_proba(X), fits[0].predict_proba(X), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("records_per_subject, planned", [(None, 2), (3, 6)])
def test_a_subject_level_plan_samples_half_of_the_smallest_clients_units(federation, records_per_subject, planned):
    """batch_size="auto" under subject-level privacy: half of the smallest client's 4 subjects (or 4 k slots), so
    every step subsamples them; a record-level plan takes the model's B clamped to the client."""
    X, y, groups, subjects = federation
    clf = FederatedSPDNetClassifier(eps=4.0, privacy_unit="subject", records_per_subject=records_per_subject,
                                    **FAST).fit(X, y, groups=groups, subjects=subjects)
    assert clf.batch_size_ == planned and "half of the smallest client's units" in clf.plan_.reason
    record = FederatedSPDNetClassifier(eps=4.0, **FAST).fit(X, y, groups=groups)
    assert record.batch_size_ == 40 and "half" not in record.plan_.reason
