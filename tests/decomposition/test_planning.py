"""FederatedPCA's planner: public quantities in, a solver and a schedule out, explicit settings kept."""

import numpy as np
import pytest
from sklearn.datasets import load_digits

from skfedriem import FederatedPCA
from skfedriem.datasets import make_federated_pca
from skfedriem.metrics import pca_optimality_gap
from skfedriem.decomposition.planning import MAX_COVARIANCE_FEATURES, MAX_STEP, plan_pca
from skfedriem.privacy import gdp_epsilon

PUBLIC = dict(eps=4.0, delta=1e-5, client_sizes=[600, 600, 600], n_features=64, n_components=5)


def test_the_plan_depends_on_public_quantities_only():
    """Two federations with the same shape and client sizes but different records get the same plan."""
    X1, g1 = make_federated_pca(3, 200, 10, n_components=2, random_state=0)
    rng = np.random.default_rng(1)
    X2 = rng.normal(size=X1.shape) * rng.uniform(0.1, 3.0, size=X1.shape[1])
    X2 /= np.linalg.norm(X2, axis=1, keepdims=True) * rng.uniform(1.0, 4.0, size=(len(X2), 1))
    for solver in ("auto", "riemannian"):
        plans = [FederatedPCA(2, eps=2.0, solver=solver, random_state=0).fit(X, groups=g1).plan_ for X in (X1, X2)]
        assert plans[0] == plans[1]
    # and it moves with a public quantity: more records per client, more signal-to-noise, a longer horizon
    bigger = FederatedPCA(2, eps=2.0, solver="riemannian", random_state=0).fit(
        np.vstack([X1, X1]), groups=np.concatenate([g1, g1])).plan_
    assert bigger.signal_to_noise == pytest.approx(2 * plans[0].signal_to_noise)
    assert bigger.horizon == pytest.approx(2 * plans[0].horizon)


def test_the_planned_schedule():
    plan = plan_pca(**PUBLIC, solver="riemannian")
    assert (plan.local_steps, plan.batch_size, plan.lr) == (1, None, pytest.approx(MAX_STEP, rel=0.01))
    assert plan.horizon == pytest.approx(plan.signal_to_noise) == pytest.approx(plan.lr * plan.n_rounds)
    # μ is the whole run's GDP parameter: the (ε, δ) it converts to is the target
    assert gdp_epsilon(plan.mu, 1e-5) == pytest.approx(4.0, rel=1e-6)
    # s = μ m √n / (C √(p(d − p))) for equal clients
    assert plan.signal_to_noise == pytest.approx(plan.mu * 600 * np.sqrt(3) / np.sqrt(5 * 59))
    # a smaller budget, a shorter horizon; the clip scales the step
    assert plan_pca(**{**PUBLIC, "eps": 1.0}, solver="riemannian").horizon < plan.horizon
    assert plan_pca(**PUBLIC, clip=0.1, solver="riemannian").lr == pytest.approx(10 * plan.lr, rel=0.01)


def test_explicit_settings_are_kept_and_the_rest_planned_around_them():
    plan = plan_pca(**PUBLIC, solver="riemannian")
    fixed_rounds = plan_pca(**PUBLIC, solver="riemannian", n_rounds=400)
    assert fixed_rounds.n_rounds == 400 and fixed_rounds.lr == pytest.approx(plan.horizon / 400)
    fixed_lr = plan_pca(**PUBLIC, solver="riemannian", lr=0.1, local_steps=2, batch_size=50)
    assert (fixed_lr.lr, fixed_lr.local_steps, fixed_lr.batch_size) == (0.1, 2, 50)
    assert fixed_lr.n_rounds == np.ceil(plan.horizon / 0.2)
    est = FederatedPCA(2, eps=2.0, solver="riemannian", n_rounds=7, lr=0.3, local_steps=2, batch_size=30,
                       random_state=0).fit(*make_federated_pca(3, 100, 6, n_components=2, random_state=0))
    assert (est.plan_.n_rounds, est.plan_.lr, est.batch_size_, len(est.history_)) == (7, 0.3, 30, 7)


def test_the_solver_rule():
    assert plan_pca(**PUBLIC).solver == "covariance"
    assert plan_pca(**PUBLIC, continues=True).solver == "riemannian"
    assert plan_pca(**PUBLIC, public_init=True).solver == "riemannian"
    assert plan_pca(**{**PUBLIC, "n_features": MAX_COVARIANCE_FEATURES + 1}).solver == "riemannian"
    assert "warm_start" in plan_pca(**PUBLIC, continues=True).reason
    with pytest.raises(ValueError, match="client_sizes"):
        plan_pca(**{**PUBLIC, "client_sizes": []})


def test_warm_start_runs_the_riemannian_solver_and_a_covariance_fit_is_not_continued():
    X, groups = make_federated_pca(3, 100, 6, n_components=2, random_state=0)
    est = FederatedPCA(2, eps=2.0, warm_start=True, random_state=0).fit(X, groups=groups)
    assert est.solver_ == "riemannian"
    one_shot = FederatedPCA(2, eps=2.0, random_state=0).fit(X, groups=groups)
    assert one_shot.solver_ == "covariance"
    with pytest.raises(ValueError, match="init=fitted.components_"):
        one_shot.set_params(solver="riemannian", warm_start=True).fit(X, groups=groups)


def test_make_trainer_needs_the_client_sizes():
    with pytest.raises(ValueError, match="client_sizes"):
        FederatedPCA(2).make_trainer((6,))


@pytest.mark.slow
def test_on_digits_the_default_is_the_one_shot_release_and_the_plan_beats_the_paper_settings():
    X = load_digits().data.astype(np.float64)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    groups = np.random.default_rng(0).permutation(np.arange(len(X)) % 3)
    default = FederatedPCA(5, eps=4.0, random_state=0).fit(X, groups=groups)
    assert default.solver_ == "covariance" and default.epsilon_ <= 4.0
    planned = FederatedPCA(5, eps=4.0, solver="riemannian", manifold="stiefel", random_state=0).fit(X, groups=groups)
    paper = FederatedPCA(5, eps=4.0, solver="riemannian", manifold="stiefel", n_rounds=200, local_steps=5,
                         batch_size=100, lr=0.2, random_state=0).fit(X, groups=groups)
    gaps = {name: pca_optimality_gap(est.components_, X) for name, est in
            (("default", default), ("planned", planned), ("paper", paper))}
    assert gaps["default"] < gaps["planned"] < gaps["paper"], gaps
    assert planned.epsilon_ <= 4.0 and paper.epsilon_ <= 4.0
