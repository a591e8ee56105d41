import math
import pickle

import numpy as np
import pytest
import sklearn
import torch
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfedriem import FederatedPCA
from skfedriem.datasets import make_federated_pca
from skfedriem.metrics import pca_optimality_gap
from skfedriem.models import PCAProjector
from skfedriem._seeding import run_seeds
from skfedriem.privacy import DenseGradients, PrivacyBudget, SeededRandomness, gdp_epsilon, per_sample_gradients
from skfedriem.privacy.per_record.gradients import project_per_sample
from skfedriem.privacy.per_record.per_sample import trainable_parameters


@pytest.fixture(scope="module")
def data():
    return make_federated_pca(4, 400, 8, n_components=2, eigengap=6.0, random_state=0)


def small(**kw):
    args = dict(n_components=2, solver="riemannian", n_rounds=40, local_steps=5, batch_size=100, lr=5.0,
                random_state=0)
    args.update(kw)
    return FederatedPCA(**args)


@parametrize_with_checks(
    [FederatedPCA(solver="riemannian", n_components=1, n_rounds=3, local_steps=2, batch_size=4, n_clients=2,
                  random_state=0), FederatedPCA(n_components=1, n_clients=2, random_state=0)],
    expected_failed_checks=lambda est: {},
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


@pytest.mark.parametrize("kind", ["grassmann", "stiefel"])
def test_closed_form_tangent_gradients_match_autograd(kind, gen):
    model = PCAProjector(7, 3, kind, generator=gen)
    X = torch.randn(11, 7, generator=gen, dtype=torch.float64)
    ref = DenseGradients(project_per_sample(per_sample_gradients(model, lambda o: o, (X,)), trainable_parameters(model)))
    fast = model.per_sample_tangent_gradients(X)
    w = torch.rand(11, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(fast.norms(), ref.norms())
    torch.testing.assert_close(fast.weighted_sum(w)["weight"], ref.weighted_sum(w)["weight"])


@pytest.mark.parametrize("aggregation", ["projavg", "rlavg"])
def test_non_private_full_batch_reaches_the_optimum(aggregation, data):
    X, groups = data
    pca = small(eps=None, batch_size=400, n_rounds=150, local_steps=2, aggregation=aggregation).fit(X, groups=groups)
    M = X.T @ X / len(X)
    top = np.linalg.eigvalsh(M)[::-1][:2].sum()
    assert pca_optimality_gap(pca.components_, X) / top < 1e-6


@pytest.mark.parametrize("aggregation", ["retavg", "kfavg"])
@pytest.mark.parametrize("manifold", ["grassmann", "stiefel"])
def test_baseline_rules_converge(aggregation, manifold, data):
    X, groups = data
    pca = small(eps=None, n_rounds=60, aggregation=aggregation, manifold=manifold).fit(X, groups=groups)
    assert pca_optimality_gap(pca.components_, X) < 1e-3
    np.testing.assert_allclose(pca.components_ @ pca.components_.T, np.eye(2), atol=1e-10)


def test_minibatch_noise_floor_is_bounded(data):
    X, groups = data
    pca = small(eps=None, n_rounds=80, batch_size=20).fit(X, groups=groups)
    M = X.T @ X / len(X)
    assert pca_optimality_gap(pca.components_, X) / np.linalg.eigvalsh(M)[-2:].sum() < 0.02


def test_privacy_gap_shrinks_as_eps_grows(data):
    X, groups = data
    gaps = {}
    for eps in (0.2, 2.0, 50.0):
        gaps[eps] = np.median([
            pca_optimality_gap(small(eps=eps, n_rounds=15, random_state=s).fit(X, groups=groups).components_, X)
            for s in range(3)
        ])
    assert gaps[0.2] > gaps[2.0] > gaps[50.0]


def test_projavg_and_rlavg_agree_to_first_order_in_the_step(data):
    X, groups = data

    def gap(lr):
        P = {}
        for agg in ("projavg", "rlavg"):
            est = small(eps=1.0, lr=lr, n_rounds=1, aggregation=agg).fit(X, groups=groups)
            P[agg] = est.components_.T @ est.components_
        return np.abs(P["projavg"] - P["rlavg"]).max()

    # halving the step twice divides a second-order difference by ~16
    assert gap(0.4) / gap(0.1) > 8


def test_fitted_attributes_and_privacy_report(data):
    X, groups = data
    pca = small(eps=1.0, n_rounds=10).fit(X, groups=groups, reference_X=X)
    assert pca.components_.shape == (2, 8)
    assert pca.epsilon_ <= 1.0 and pca.delta_ == 1e-5
    assert pca.noise_std_ == pytest.approx(2 * 1.0 / (100 * pca.mu0_))
    assert len(pca.history_) == 10
    assert [h["round"] for h in pca.history_] == list(range(1, 11))
    assert all(h["epsilon"] <= 1.0 * 1.01 for h in pca.history_)
    assert pca.history_[-1]["optimality_gap"] == pytest.approx(pca_optimality_gap(pca.components_, X))
    Z = pca.transform(X)
    np.testing.assert_allclose(pca.inverse_transform(Z), X @ pca.components_.T @ pca.components_)
    assert list(pca.get_feature_names_out()) == ["federatedpca0", "federatedpca1"]
    again = pickle.loads(pickle.dumps(pca))
    np.testing.assert_array_equal(again.transform(X), Z)
    assert not hasattr(clone(pca), "components_")


def test_same_seed_same_model(data):
    X, groups = data
    a = small(eps=1.0, n_rounds=5).fit(X, groups=groups)
    b = small(eps=1.0, n_rounds=5).fit(X, groups=groups)
    np.testing.assert_array_equal(a.components_, b.components_)


def test_pipeline_and_grid_search_with_groups_routed():
    X, groups = make_federated_pca(4, 60, 6, random_state=1)
    with sklearn.config_context(enable_metadata_routing=True):
        pca = FederatedPCA(solver="riemannian", n_rounds=3, local_steps=2, batch_size=20, random_state=0).set_fit_request(groups=True)
        pipe = Pipeline([("scale", FunctionTransformer(lambda Z: 2 * Z)), ("pca", pca)])
        pipe.fit(X, groups=groups)
        search = GridSearchCV(
            pipe,
            {"pca__eps": [1.0, 10.0]},
            scoring=lambda est, Xs, y=None: -pca_optimality_gap(est[-1].components_, Xs),
            cv=GroupKFold(n_splits=2),
        ).fit(X, groups=groups)
    assert search.best_params_["pca__eps"] in (1.0, 10.0)


@pytest.mark.parametrize(
    "kwargs, fit_kwargs, match",
    [
        (dict(eps=0.0), {}, r"'eps' parameter of FederatedPCA must be a float in the range \(0.0, 100.0\], None or a "
                            r"str among {'budget'}"),
        (dict(eps=-1), {}, r"'eps'.*Got -1"),
        (dict(delta=1.0), {}, r"'delta'.*Got 1.0"),
        (dict(aggregation="fedavg"), {}, r"'aggregation'.*Got 'fedavg'"),
        (dict(manifold="sphere"), {}, r"'manifold'.*Got 'sphere'"),
        (dict(sampling="shuffle"), {}, r"'sampling'.*Got 'shuffle'"),
        (dict(n_components=9), {}, r"'n_components'.*<= n_features=8.*Got 9"),
        (dict(init=np.eye(3, 8)), {}, r"'init'.*shape \(n_components, n_features\) = \(2, 8\).*\(3, 8\)"),
        (dict(init=np.ones((2, 8))), {}, r"'init'.*linearly independent"),
        (dict(init="pca"), {}, r"'init'.*Got 'pca'"),
        (dict(), dict(groups=np.zeros(3)), r"'groups'.*shape \(1600,\).*Got shape \(3,\)"),
    ],
)
def test_bad_input_raises_clear_errors(kwargs, fit_kwargs, match, data):
    X, _ = data
    with pytest.raises(ValueError, match=match):
        small(**kwargs).fit(X, **fit_kwargs)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_inf_rejected(bad, data):
    X = data[0].copy()
    X[3, 2] = bad
    with pytest.raises(ValueError, match="NaN|infinity"):
        small().fit(X)


def test_one_dimensional_input_rejected(data):
    with pytest.raises(ValueError, match="2D array"):
        small().fit(data[0][:, 0])


def test_eps_none_is_non_private(data):
    X, groups = data
    pca = small(eps=None, n_rounds=2).fit(X, groups=groups)
    assert math.isinf(pca.epsilon_) and pca.noise_std_ == 0 and pca.mu0_ is None


@pytest.mark.parametrize("manifold", ["grassmann", "stiefel"])
def test_a_public_initial_subspace_is_the_first_iterate(manifold, data):
    X, groups = data
    init = np.array([[1.0, 1.0, 0, 0, 0, 0, 0, 0], [0, 1.0, 0, 0, 0, 0, 0, 0]])
    pca = small(eps=None, n_rounds=1, local_steps=1, lr=1e-12, init=init, manifold=manifold).fit(X, groups=groups)
    basis = np.linalg.qr(init.T)[0]
    np.testing.assert_allclose(pca.components_.T @ pca.components_, basis @ basis.T, atol=1e-9)


def test_an_extreme_record_cannot_poison_a_private_fit(data):
    X, groups = data
    X = X.copy()
    X[5] = 1e200  # its gradient overflows: it contributes zero, the release stays finite
    pca = small(eps=4.0, n_rounds=3).fit(X, groups=groups)
    assert np.isfinite(pca.components_).all()


def test_warm_start_continues_the_fit_and_composes_the_privacy(data):
    X, groups = data
    budget = PrivacyBudget(epsilon=10.0)
    pca = small(eps=1.0, n_rounds=5, warm_start=True, privacy_budget=budget).fit(X, groups=groups)
    first_epsilon, first_components = pca.epsilon_, pca.components_.copy()
    pca.fit(X, groups=groups)
    assert [h["round"] for h in pca.history_] == list(range(1, 11))
    assert pca.ledger_.steps == 2 * 5 * 5
    assert first_epsilon < pca.epsilon_ < 2 * first_epsilon  # both fits, composed
    assert len(budget.fits) == 2 and budget.spent() == pytest.approx(pca.epsilon_, rel=1e-9)
    assert not np.allclose(pca.components_, first_components)
    cold = small(eps=1.0, n_rounds=5, privacy_budget=None).fit(X, groups=groups)
    assert cold.epsilon_ == pytest.approx(first_epsilon) and len(cold.history_) == 5
    with pytest.raises(ValueError, match="expecting 8 features"):  # a warm start continues the same model
        pca.fit(X[:, :6], groups=groups)


def test_the_federation_api_rebuilds_a_fit_from_public_parts(data):
    """What a deployment does: records prepared by each site, a trainer from public shapes, fitted attributes."""
    X, groups = data
    est = small(eps=None, n_rounds=3)
    records = [est.prepare_records(X[groups == g]) for g in np.unique(groups)]
    trainer = est.make_trainer((8,), deployed=True, client_sizes=[len(r[0]) for r in records])
    trainer.fit(records)
    est.set_fitted(trainer, input_shape=(8,))
    reference = small(eps=None, n_rounds=3).fit(X, groups=groups)
    np.testing.assert_allclose(est.components_, reference.components_, atol=1e-12)
    assert est.n_features_in_ == 8 and est.transform(X[:2]).shape == (2, 2)


def test_the_whole_space_needs_no_training_and_costs_no_privacy():
    X = np.random.default_rng(0).normal(size=(30, 3))
    pca = FederatedPCA(n_components=3).fit(X)
    np.testing.assert_array_equal(pca.components_, np.eye(3))
    assert pca.epsilon_ == 0.0 and pca.history_ == [] and pca.ledger_.steps == 0
    np.testing.assert_allclose(pca.inverse_transform(pca.transform(X)), X)


# ------------------------------------------------------------------ the one-shot covariance solver
def covariance(**kw):
    return FederatedPCA(**{"n_components": 2, "solver": "covariance", "random_state": 0, **kw})


def test_covariance_solver_certifies_one_gaussian_release_per_client(data):
    X, groups = data
    pca = covariance(eps=2.0).fit(X, groups=groups)
    assert pca.ledger_.steps == 1 and len(pca.history_) == 1
    # one full-batch step (q = 1): the accountant's ε is the exact GDP conversion
    assert pca.epsilon_ <= 2.0
    assert pca.epsilon_ == pytest.approx(gdp_epsilon(pca.mu0_, 1e-5), rel=1e-3)
    # σ_i = √2 C / (m_i μ0), m_i = 400: clipped rank-one moments are at most √2 C apart
    assert pca.noise_std_ == pytest.approx(math.sqrt(2) * 1.0 / (400 * pca.mu0_))
    assert pca.batch_size_ == 400


def test_covariance_solver_equals_numpy_from_the_same_noise():
    X, groups = make_federated_pca(3, 50, 6, n_components=2, random_state=1)
    X[0] *= 3.0  # one record above the clip: it is scaled to norm √C
    sizes = [50, 50, 50]
    pca = covariance(eps=3.0, clip=0.5).fit(X, groups=groups)

    seeds = run_seeds(0, private=True, secure_mode=False, owner="test").clients.spawn(3)
    averaged = np.zeros((6, 6))
    for i, seed in enumerate(seeds):
        rows = X[groups == i]
        scale = np.minimum(1.0, 0.5 / (rows**2).sum(1))  # clip ‖x xᵀ‖ = ‖x‖² at C
        moment = (rows * scale[:, None]).T @ rows / sizes[i]
        randomness = SeededRandomness(seed)
        randomness.subset(sizes[i], sizes[i])  # the full batch is drawn first, as every batch is
        noise = randomness.standard_normal((6, 6), torch.float64).numpy()
        averaged += (moment - math.sqrt(2) * 0.5 / (sizes[i] * pca.mu0_) * noise) / 3  # one SGD step at rate 1
    expected = np.linalg.eigh((averaged + averaged.T) / 2)[1][:, ::-1][:, :2].T
    assert np.allclose(pca.components_.T @ pca.components_, expected.T @ expected, atol=1e-10)


def test_non_private_covariance_solver_is_the_top_eigenspace_of_the_mean_moment(data):
    X, groups = data
    pca = covariance(eps=None).fit(X, groups=groups)
    moment = sum(X[groups == g].T @ X[groups == g] / (groups == g).sum() for g in range(4)) / 4
    top = np.linalg.eigh(moment)[1][:, -2:]
    assert np.allclose(pca.components_.T @ pca.components_, top @ top.T, atol=1e-10)
    assert pca.epsilon_ == math.inf


def test_covariance_solver_beats_the_riemannian_one_where_dimension_is_small(data):
    X, groups = data
    gaps = {solver: pca_optimality_gap(FederatedPCA(2, eps=1.0, solver=solver, random_state=0)
                                       .fit(X, groups=groups).components_, X) for solver in ("covariance", "riemannian")}
    assert gaps["covariance"] < gaps["riemannian"]


def test_covariance_solver_refuses_a_warm_start(data):
    X, groups = data
    pca = covariance(eps=2.0, warm_start=True).fit(X, groups=groups)
    with pytest.raises(ValueError, match="warm_start.*solver='covariance'"):
        pca.fit(X, groups=groups)


def test_unknown_solver_is_named(data):
    with pytest.raises(ValueError, match=r"'solver'.*'newton'"):
        covariance(solver="newton").fit(*data[:1])


def test_continuing_a_non_private_fit_reports_infinite_epsilon(data):
    """A warm_start after eps=None keeps the non-private rounds in the ledger, as infinite loss."""
    X, groups = data
    pca = small(eps=None, n_rounds=3, warm_start=True).fit(X, groups=groups)
    assert not pca.ledger_.private and pca.ledger_.steps == 3 * 5
    pca.set_params(eps=1.0, lr=1e-12, n_rounds=1)
    with pytest.warns(UserWarning, match="was not private"):
        pca.fit(X, groups=groups)
    assert math.isinf(pca.epsilon_) and [h["epsilon"] for h in pca.history_] == [math.inf] * 4


def test_the_one_shot_release_reports_its_explained_variance(data):
    """The eigenvalues of the released moment are post-processing; the Riemannian solver releases none."""
    X, groups = data
    pca = covariance(eps=None).fit(X, groups=groups)
    moment = X.T @ X / len(X)  # full batches of equal clients, no noise: the pooled uncentred second moment
    expected = np.linalg.eigvalsh(moment)[::-1]
    np.testing.assert_allclose(pca.explained_variance_, expected[:2], rtol=1e-10)
    np.testing.assert_allclose(pca.explained_variance_ratio_, expected[:2] / expected.sum(), rtol=1e-10)
    assert np.all(np.diff(pca.explained_variance_) <= 0)
    assert not hasattr(small(eps=None, n_rounds=2).fit(X, groups=groups), "explained_variance_")
