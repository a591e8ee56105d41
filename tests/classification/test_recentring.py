"""recentre="client": every client re-centred on its own privately released mean (personalised inputs)."""

import math

import numpy as np
import pytest
import torch

from skfedriem import FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem.classification._recentring import (PERSONAL_CLIP, PERSONAL_SHARE, PersonalMeans, recentred,
                                                  riemannian_mean)
from skfedriem.datasets import make_spd_classification
from skfedriem.privacy import PrivacyAccountant

FAST = dict(n_rounds=8, batch_size=16, random_state=0)


@pytest.fixture(scope="module")
def shifted_sites():
    """Four sites whose trials sit around their own point: the site effect re-centring removes."""
    X, y, groups = make_spd_classification(n_clients=4, n_matrices_per_client=40, n_channels=5, random_state=0)
    rng = np.random.default_rng(1)
    for g in np.unique(groups):
        a = rng.standard_normal((5, 5)) * 0.4
        shift = np.linalg.matrix_power(np.eye(5) + (a + a.T) / 4, 2)
        root = np.linalg.cholesky(shift)
        X[groups == g] = root @ X[groups == g] @ root.T
    return X, y, groups


class _Fixed:
    """A client's randomness that draws a given standard normal vector (to read the release exactly)."""

    def __init__(self, z: np.ndarray) -> None:
        self.z = z

    def standard_normal(self, shape, dtype):
        assert shape == self.z.shape
        return torch.from_numpy(self.z).to(dtype)


def _vector_at(point: np.ndarray, base: np.ndarray) -> np.ndarray:
    """upper(log(B^{-1/2} P B^{-1/2})), √2 off the diagonal: pyRiemann's tangent vector, computed apart."""
    w, v = np.linalg.eigh(base)
    inner = (v / np.sqrt(w)) @ v.T
    e, u = np.linalg.eigh(inner @ point @ inner)
    log = (u * np.log(e)) @ u.T
    i, j = np.triu_indices(len(point))
    return np.where(i == j, 1.0, math.sqrt(2)) * log[i, j]


def _clipped_mean(X: np.ndarray, base: np.ndarray, clip: float) -> np.ndarray:
    """The release's mean before its noise, computed apart: trace-normalised trials' clipped vectors at ``base``."""
    rows = [_vector_at(x, base) for x in X / (np.trace(X, axis1=1, axis2=2)[:, None, None] / X.shape[1])]
    return np.mean([r * min(1.0, clip / np.linalg.norm(r)) for r in rows], axis=0)


@pytest.mark.parametrize("clipped", [True, False])
def test_substituting_one_record_moves_its_clients_release_by_at_most_2C_over_m(clipped):
    """The release is a clipped mean: one record substituted moves it by at most 2C / m beside the same noise (here
    negligible: μ huge, so no shrinkage). Without the clip (the broken variant) an extreme record moves it further."""
    X, _, _ = make_spd_classification(1, 20, 5, random_state=3)
    extreme = X.copy()
    extreme[0] = np.diag([1e4, 1, 1, 1, 1e-4]) * np.trace(X[0])
    personal = PersonalMeans(mu=1e12, clip=1.0 if clipped else 1e6)
    base = riemannian_mean(X / (np.trace(X, axis1=1, axis2=2)[:, None, None] / 5))
    z = np.random.default_rng(0).standard_normal(15)
    vectors = []
    for trials in (X, extreme):
        mean, sigma, units = personal.release(torch.from_numpy(trials), None, base, _Fixed(z))
        assert units == 20 and sigma == pytest.approx(2 * personal.clip / (20 * personal.mu))
        vectors.append(_vector_at(mean, base))
    assert (np.linalg.norm(vectors[0] - vectors[1]) <= 2 * 1.0 / 20 * (1 + 1e-6)) == clipped


def test_the_release_is_the_clipped_mean_plus_its_noise_shrunk_by_the_noise_it_carries():
    from skfedriem.classification import shrunk_mean

    X, _, _ = make_spd_classification(1, 30, 4, random_state=2)
    base = np.diag([1.2, 1.0, 0.9, 0.9])
    personal = PersonalMeans.planned(4.0, 1e-5, 4, "record")
    assert personal.clip == pytest.approx(PERSONAL_CLIP * 2)  # PERSONAL_CLIP √n
    z = np.random.default_rng(5).standard_normal(10)
    mean, sigma, _ = personal.release(torch.from_numpy(X), None, base, _Fixed(z))
    assert sigma == pytest.approx(2 * personal.clip / (30 * personal.mu))
    expected = shrunk_mean(_clipped_mean(X, base, personal.clip) + sigma * z, sigma)
    assert np.allclose(_vector_at(mean, base), expected, atol=1e-9)


def test_the_release_is_charged_at_its_share_by_an_independent_accountant():
    """μ of the personal release meets (PERSONAL_SHARE ε, δ) alone, read by dp-accounting's PLD of the Gaussian."""
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    personal = PersonalMeans.planned(10.0, 1e-5, 9, "record")
    (entry,) = personal.planned_ledger([30, 40]).history
    assert (entry.sample_rate, entry.steps, entry.unit) == (1.0, 1, "record")
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dp_event.GaussianDpEvent(noise_multiplier=1.0 / entry.mu0))
    assert accountant.get_epsilon(1e-5) == pytest.approx(PERSONAL_SHARE * 10.0, rel=1e-3)


def test_a_fit_charges_the_releases_and_composes_them_within_eps(shifted_sites):
    X, y, groups = shifted_sites
    clf = FederatedTangentSpaceClassifier(eps=4.0, recentre="client", **FAST).fit(X, y, groups=groups)
    personal = [e for e in clf.ledger_.history if e.sample_rate == 1.0 and e.steps == 1]
    assert len(personal) == 2  # the federation's mean (the base point), then the clients' own
    assert clf.epsilon_ <= 4.0
    without = PrivacyAccountant.from_state_dict({"history": [
        h for h in clf.ledger_.state_dict()["history"] if h["mu0"] != personal[1].mu0]})
    assert without.get_epsilon(1e-5) < clf.epsilon_
    assert set(clf.personal_means_) == set(np.unique(groups))
    assert np.allclose(clf.reference_, np.eye(5))  # the rounds read re-centred trials at the identity


def test_one_record_moves_only_its_own_clients_released_mean(shifted_sites):
    """Records apart with re-centring on: at a public base point, substituting a record of site 0 leaves every other
    site's released mean (and so its re-centred inputs) bit for bit as it was."""
    X, y, groups = shifted_sites
    changed = X.copy()
    first = np.flatnonzero(groups == np.unique(groups)[0])[0]
    changed[first] = np.diag([50.0, 1, 1, 1, 0.02]) * np.trace(X[first])
    means = []
    for trials in (X, changed):
        clf = FederatedTangentSpaceClassifier(eps=4.0, recentre="client", reference=None, n_rounds=1, batch_size=16,
                                              random_state=0).fit(trials, y, groups=groups)
        means.append(clf.personal_means_)
    site, *others = np.unique(groups)
    assert not np.allclose(means[0][site], means[1][site])
    for other in others:
        assert np.array_equal(means[0][other], means[1][other])


def test_with_one_subject_a_client_the_mean_lies_within_the_unit_and_costs_nothing(shifted_sites):
    X, y, groups = shifted_sites
    options = dict(eps=4.0, privacy_unit="subject", reference=None, n_rounds=8, random_state=0)
    clf = FederatedTangentSpaceClassifier(recentre="client", **options).fit(X, y, groups=groups)
    plain = FederatedTangentSpaceClassifier(**options).fit(X, y, groups=groups)
    assert clf.ledger_.history == plain.ledger_.history  # the rounds' steps only
    assert clf.personal_means_ == {}  # exact means are released to no one, so not kept
    assert clf.epsilon_ <= 4.0
    two = np.where(groups == np.unique(groups)[0], np.unique(groups)[1], groups)  # a site of two subjects
    clf = FederatedTangentSpaceClassifier(recentre="client", **options).fit(X, y, groups=two, subjects=groups)
    (entry,) = [e for e in clf.ledger_.history if e.steps == 1]
    assert entry.unit == "subject"
    assert list(clf.personal_means_) == [np.unique(groups)[1]]  # the two-subject site's, released at 2C / 2


def test_prediction_re_centres_each_group_on_its_released_mean_or_its_own(shifted_sites):
    X, y, groups = shifted_sites
    clf = FederatedTangentSpaceClassifier(eps=None, recentre="client", **FAST).fit(X, y, groups=groups)
    site = np.unique(groups)[0]
    rows = groups == site
    known = clf.decision_function(X[rows], groups=groups[rows])
    inputs = recentred(torch.from_numpy(X[rows]), clf.personal_means_[site]).numpy()
    direct = clf.module_(torch.from_numpy(inputs).to(clf.module_.reference_point().dtype)).detach().double().numpy()
    assert np.allclose(known, direct[:, 1] - direct[:, 0], atol=1e-5)
    new = clf.decision_function(X[rows], groups=np.full(rows.sum(), "new subject"))
    assert np.allclose(new, clf.decision_function(X[rows]), atol=1e-9)  # groups=None: one new subject, itself
    assert clf.score(X, y, groups=groups) > 0.6
    with pytest.raises(ValueError, match="groups"):
        FederatedTangentSpaceClassifier(eps=None, **FAST).fit(X, y, groups=groups).predict(X, groups=groups)


@pytest.mark.parametrize("Estimator", [FederatedTangentSpaceClassifier, FederatedSPDNetClassifier])
@pytest.mark.parametrize("noise", ["local", "distributed"])
def test_both_covariance_classifiers_fit_re_centred_under_both_placements(shifted_sites, Estimator, noise):
    X, y, groups = shifted_sites
    options = dict(n_rounds=8, random_state=0) if noise == "distributed" else FAST
    clf = Estimator(eps=6.0, recentre="client", noise=noise, **options).fit(X, y, groups=groups)
    assert clf.epsilon_ <= 6.0 and len(clf.personal_means_) == 4
    assert clf.local_epsilon_ >= clf.epsilon_  # each client's own release: charged in its own ledger too
    assert clf.predict(X, groups=groups).shape == y.shape


@pytest.mark.parametrize("setting", ["budget", "init", "warm", "deployed", "records_per_subject", "accounting"])
def test_what_re_centring_cannot_honour_is_refused_by_name(shifted_sites, setting):
    from skfedriem.privacy import PrivacyBudget

    X, y, groups = shifted_sites
    clf = FederatedTangentSpaceClassifier(eps=4.0, recentre="client", **FAST)
    if setting == "budget":
        clf.set_params(eps="budget", privacy_budget=PrivacyBudget(8.0, n_fits=2))
    elif setting == "init":
        clf.set_params(init=FederatedTangentSpaceClassifier(eps=None, **FAST).fit(X, y, groups=groups))
    elif setting == "warm":
        clf.fit(X, y, groups=groups).set_params(warm_start=True)
    elif setting == "records_per_subject":
        clf.set_params(privacy_unit="subject", records_per_subject=2)
    elif setting == "accounting":
        clf.set_params(accounting="prirfed", sampling="poisson")
    with pytest.raises(ValueError, match="recentre='client'"):
        if setting == "deployed":
            clf.make_trainer(X.shape[1:], classes=np.unique(y), deployed=True, client_sizes=[40] * 4)
        else:
            clf.fit(X, y, groups=groups)


def test_routed_groups_reach_fit_and_score_where_asked(shifted_sites):
    """Under metadata routing cross_val_score passes groups to fit, and to score only where asked: each held-out
    site, never seen in fit, is re-centred on its own trials' mean."""
    import sklearn
    from sklearn.model_selection import GroupKFold, cross_val_score

    X, y, groups = shifted_sites
    with sklearn.config_context(enable_metadata_routing=True):
        clf = FederatedTangentSpaceClassifier(eps=None, recentre="client", **FAST)
        clf.set_fit_request(groups=True).set_score_request(groups=True)
        scores = cross_val_score(clf, X, y, cv=GroupKFold(2), params={"groups": groups})
        plain = FederatedTangentSpaceClassifier(eps=None, **FAST).set_fit_request(groups=True)
        cross_val_score(plain, X, y, cv=GroupKFold(2), params={"groups": groups})  # score not asked: as before
    assert scores.shape == (2,) and np.all(scores > 0.5)


def test_the_servers_validation_trials_are_read_as_a_new_subjects(shifted_sites):
    """history_'s held-out metrics re-centre the server's trials on their own mean, as predict(X) does."""
    X, y, groups = shifted_sites
    last = groups == np.unique(groups)[-1]
    clf = FederatedTangentSpaceClassifier(eps=None, recentre="client", **FAST).fit(
        X[~last], y[~last], groups=groups[~last], validation_data=(X[last], y[last]))
    assert clf.history_[-1]["valid_accuracy"] == pytest.approx(clf.score(X[last], y[last]))


def test_a_record_that_underflows_once_trace_normalised_decides_nothing(shifted_sites):
    """diag(1e200, 1e-200, ...) passes the SPD check, then loses its smallest eigenvalue to underflow when divided by
    its trace: it counts as the base point in its client's release (and is left out of an exact mean), so the fit
    runs on D and on D' alike (it raised on D' only: one record decided whether fit completed)."""
    X, y, groups = shifted_sites
    changed = X.copy()
    changed[0] = np.diag([1e200, 1e-200, 1.0, 1.0, 1.0])
    for trials in (X, changed):
        for unit in ("record", "subject"):  # a noisy release; an exact mean within the unit
            clf = FederatedTangentSpaceClassifier(eps=4.0, recentre="client", privacy_unit=unit, dtype="float64",
                                                  n_rounds=2, batch_size=16, random_state=0)
            clf.fit(trials, y, groups=groups)
            assert all(np.isfinite(m).all() for m in clf.personal_means_.values())
            assert np.isfinite(clf.decision_function(trials[1:], groups=groups[1:])).all()  # the others
