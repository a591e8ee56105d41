"""One budget for every fit on the same records: composed tightly, refused before training, shared by clones."""

import copy
import math
import pickle
import subprocess
import sys

import numpy as np
import pytest
from prv_accountant import PRVAccountant
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

from skfedriem import FederatedPCA, FederatedSPDNetClassifier
from skfedriem.datasets import make_federated_pca, make_spd_classification
from skfedriem.exceptions import PrivacyBudgetExceeded
from skfedriem.privacy import PrivacyAccountant, PrivacyBudget, calibrate_mu0

from .prv_reference import SymmetrisedSubsampledGaussian

X, GROUPS = make_federated_pca(n_clients=3, n_samples_per_client=100, n_features=5, random_state=0)


def pca(budget, **kw):
    return FederatedPCA(n_components=2, solver="riemannian", n_rounds=5, local_steps=2, batch_size=20, privacy_budget=budget,
                        **{"eps": 1.0, **kw})


def release(mu0=0.1, q=0.1, steps=500):
    acc = PrivacyAccountant()
    acc.step(mu0=mu0, sample_rate=q, num_steps=steps)
    return acc


def test_fits_compose_and_the_one_that_would_overflow_is_refused_before_training():
    budget = PrivacyBudget(epsilon=1.6, delta=1e-5)  # two fits at eps = 1 compose to 1.41, three to 1.74
    first = pca(budget).fit(X, groups=GROUPS)
    second = pca(budget).fit(X, groups=GROUPS)
    alone = first.epsilon_
    assert len(budget.fits) == 2 and budget.fits[0]["epsilon"] == pytest.approx(alone, rel=1e-6)
    assert max(alone, second.epsilon_) < budget.spent() < alone + second.epsilon_  # composed, not summed
    third = pca(budget)
    with pytest.raises(PrivacyBudgetExceeded, match=r"would take the privacy budget to epsilon=1.74.* > 1.6.*not run"):
        third.fit(X, groups=GROUPS)
    assert not hasattr(third, "components_") and len(budget.fits) == 2  # nothing trained, nothing recorded


def test_a_non_private_fit_is_refused():
    with pytest.raises(PrivacyBudgetExceeded, match="not private"):
        pca(PrivacyBudget(epsilon=10.0), eps=None).fit(X, groups=GROUPS)


def test_grid_search_under_a_budget_charges_every_fit_and_matches_a_direct_composition():
    Xs, y, _ = make_spd_classification(n_clients=1, n_matrices_per_client=60, n_channels=4, random_state=0)
    budget = PrivacyBudget(epsilon=40.0, delta=1e-5)
    est = FederatedSPDNetClassifier(eps=8.0, dims=(2,), n_rounds=2, batch_size=8, n_clients=2, privacy_budget=budget)
    search = GridSearchCV(est, {"lr": [1e-2, 3e-2]}, cv=2, error_score="raise").fit(Xs, y)
    assert search.best_estimator_.privacy_budget is budget  # clones share one ledger
    fits = budget.fits
    assert len(fits) == 2 * 2 + 1  # candidates x folds, then the refit
    assert all(f["epsilon"] <= 8.0 for f in fits)
    # the same composition by an independent accountant (prv-accountant, closed-form privacy losses)
    steps = [s for f in fits for s in f["steps"]]
    prvs = [SymmetrisedSubsampledGaussian(s["sample_rate"], s["mu0"]) for s in steps]
    counts = [s["steps"] for s in steps]
    low, _, up = PRVAccountant(prvs, eps_error=1e-2, delta_error=1e-8,
                               max_self_compositions=counts).compute_epsilon(1e-5, counts)
    assert low <= budget.spent() <= up * 1.01
    assert budget.spent() < sum(f["epsilon"] for f in fits) / 2  # far below the sum of the fits' epsilons


def _search(budget, eps):
    Xs, y, _ = make_spd_classification(n_clients=1, n_matrices_per_client=60, n_channels=4, random_state=0)
    est = FederatedSPDNetClassifier(eps=eps, dims=(2,), n_rounds=2, batch_size=8, n_clients=2, privacy_budget=budget)
    return GridSearchCV(est, {"lr": [3e-2]}, cv=2, error_score="raise").fit(Xs, y)


@pytest.mark.slow  # 30 s of fits and calibrations; make test-slow (and CI) runs it
def test_a_planned_search_calibrates_every_fit_to_its_share_and_the_refit_runs():
    """The issue's user: GridSearchCV under PrivacyBudget(20) spent the budget on the folds and the refit was refused."""
    with pytest.raises(PrivacyBudgetExceeded, match="refit|would take"):  # unplanned: fits at eps = 15 each
        _search(PrivacyBudget(epsilon=20.0), eps=15.0)
    budget = PrivacyBudget(epsilon=20.0, n_fits=1 * 2 + 1)  # candidates x folds + the refit
    search = _search(budget, eps="budget")
    fits = budget.fits
    assert len(fits) == 3 and search.best_estimator_.epsilon_ == pytest.approx(fits[-1]["epsilon"], rel=1e-6)
    assert 19.5 < budget.spent() <= 20.0  # the budget is used, and never passed
    first = fits[0]["epsilon"]
    assert all(abs(f["epsilon"] - first) < 0.05 * first for f in fits[:-1])  # equal shares for equal folds
    assert fits[-1]["epsilon"] >= 0.99 * first  # the refit takes what is left: at least a share
    # an independent composition of the recorded steps agrees (prv-accountant)
    steps = [s for f in fits for s in f["steps"]]
    prvs = [SymmetrisedSubsampledGaussian(s["sample_rate"], s["mu0"]) for s in steps]
    counts = [s["steps"] for s in steps]
    low, _, up = PRVAccountant(prvs, eps_error=1e-2, delta_error=1e-8,
                               max_self_compositions=counts).compute_epsilon(1e-5, counts)
    assert low <= 20.0 and low <= budget.spent() <= up * 1.01


def test_a_share_leaves_room_for_the_planned_fits_and_the_last_takes_what_is_left():
    budget = PrivacyBudget(epsilon=4.0, n_fits=3)

    def release_at(eps):  # a fit calibrated to eps: the same shape, μ0 scaled to reach eps
        return release(mu0=calibrate_mu0(eps, 1e-5, 0.1, 200), q=0.1, steps=200)

    shares = []
    for _ in range(3):
        eps = budget.share(release_at)
        shares.append(eps)
        budget.charge(release_at(eps), label="fit")
    assert shares[0] == pytest.approx(shares[1], rel=0.01) and shares[2] >= shares[1]
    assert 3.95 < budget.spent() <= 4.0
    with pytest.raises(ValueError, match="all n_fits=3 planned fits were charged"):
        budget.share(release_at)


def test_eps_budget_needs_a_planned_budget():
    Xs, y, groups = make_spd_classification(n_clients=2, n_matrices_per_client=20, n_channels=4, random_state=0)
    with pytest.raises(ValueError, match="eps='budget'.*privacy_budget, which is None"):
        FederatedSPDNetClassifier(eps="budget", n_rounds=1).fit(Xs, y, groups=groups)
    with pytest.raises(ValueError, match="plans no number of fits: create it with n_fits="):
        FederatedSPDNetClassifier(eps="budget", n_rounds=1, privacy_budget=PrivacyBudget(5.0)).fit(Xs, y, groups=groups)
    budget = PrivacyBudget(5.0, n_fits=2)
    assert "n_fits=2" in repr(budget) and pickle.loads(pickle.dumps(budget)).n_fits == 2


def test_copies_and_clones_are_the_same_ledger():
    budget = PrivacyBudget(epsilon=5.0)
    est = pca(budget)
    assert clone(est).privacy_budget is budget and copy.deepcopy(est).privacy_budget is budget
    assert pickle.loads(pickle.dumps(budget)) is budget  # same process: the live ledger


CHARGE_IN_A_CHILD = """
import pickle, sys
from skfedriem.privacy import PrivacyAccountant
budget = pickle.load(open(sys.argv[1], "rb"))
run = PrivacyAccountant(); run.step(mu0=0.1, sample_rate=0.1, num_steps=500)
try:
    budget.charge(run, label="worker fit")
    print("charged")
except RuntimeError as exc:
    print("refused:", exc)
"""


@pytest.mark.parametrize("with_path", [False, True])
def test_worker_processes_charge_the_file_or_are_refused(with_path, tmp_path):
    budget = PrivacyBudget(epsilon=50.0, path=tmp_path / "budget.json" if with_path else None)
    budget.charge(release(), label="parent fit")
    blob = tmp_path / "budget.pkl"
    blob.write_bytes(pickle.dumps(budget))
    out = subprocess.run([sys.executable, "-c", CHARGE_IN_A_CHILD, str(blob)], capture_output=True, text=True,
                         check=True).stdout
    if with_path:
        assert out.strip() == "charged" and [f["label"] for f in budget.fits] == ["parent fit", "worker fit"]
    else:
        assert out.startswith("refused:") and "path=" in out and len(budget.fits) == 1


def test_a_ledger_file_outlives_the_object(tmp_path):
    path = tmp_path / "ledger.json"
    PrivacyBudget(epsilon=10.0, path=path).charge(release(), label="monday")
    later = PrivacyBudget(epsilon=10.0, path=path)
    assert [f["label"] for f in later.fits] == ["monday"]
    assert later.spent() == pytest.approx(release().get_epsilon(1e-5), rel=1e-9)
    assert math.isinf(PrivacyBudget(math.inf).charge(None, label="debug run"))
    with pytest.raises(ValueError, match="'epsilon'.*Got -1"):
        PrivacyBudget(epsilon=-1)
    assert np.isfinite(later.spent())


def test_a_search_is_planned_from_its_splitter_and_grid_and_the_leftover_is_reported():
    from sklearn.model_selection import GroupKFold, LeaveOneGroupOut

    grid = {"lr": [0.1, 0.5], "n_rounds": [50, 100]}
    assert PrivacyBudget.n_fits_for(5, grid) == 5 * 4 + 1
    assert PrivacyBudget.n_fits_for(GroupKFold(3), grid, refit=False) == 12
    groups = np.repeat([0, 1, 2, 3], 5)
    assert PrivacyBudget.n_fits_for(LeaveOneGroupOut(), None, groups=groups) == 4 + 1
    budget = PrivacyBudget(epsilon=3.0, n_fits=3)
    budget.charge(release(), label="fold 1")
    spent = budget.spent()
    assert budget.summary() == (f"spent {spent:.4g} of epsilon=3 (delta=1e-05) over 1 of 3 planned fits; "
                                f"{3 - spent:.4g} left")


def test_a_search_that_outgrows_its_plan_says_how_to_plan_it():
    budget = PrivacyBudget(epsilon=3.0, n_fits=1)
    budget.charge(release(), label="the only planned fit")
    with pytest.raises(ValueError, match=r"n_fits was too small.*n_fits_for\(cv, param_grid\)"):
        budget.share(lambda eps: release(), label="one more")
