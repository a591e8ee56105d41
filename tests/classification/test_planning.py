"""The classifiers' planner: public quantities in, a schedule out, explicit settings kept."""

import math
import warnings

import numpy as np
import pytest
import torch

from skfedriem import FederatedEEGNetClassifier, FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem.classification.planning import NOISE_WALK, ROUND_STEP, plan_classifier, planned_optimizer
from skfedriem.datasets import make_spd_classification
from skfedriem.exceptions import NoiseSwampsSignalWarning
from skfedriem.federated import FederationSettings
from skfedriem.federated.plan import plan_run


def _spd(seed, n_clients=4, per_client=30, channels=5):
    return make_spd_classification(n_clients, per_client, channels, random_state=seed)


@pytest.mark.parametrize("cls", [FederatedSPDNetClassifier, FederatedTangentSpaceClassifier])
def test_a_fit_plans_its_run_once(cls, monkeypatch):
    """The planner's plan is the trainer's: the run's σ is calibrated once per fit (it was planned twice, by the
    planner and again by the trainer), and the fitted plan is the one the rounds ran."""
    from skfedriem.classification import planning
    from skfedriem.federated import pricing

    plans = []

    def counted(*args, **kwargs):
        plans.append(plan_run(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(planning, "plan_run", counted)
    monkeypatch.setattr(pricing, "plan_run", counted)
    X, y, groups = _spd(0)
    clf = cls(eps=4.0, n_rounds=2, random_state=0).fit(X, y, groups=groups)
    # the tangent space's released mean is a run of its own, of one step
    private = [p for p in plans if p.mu0 is not None and p.total_steps > 1]
    assert len(private) == 1
    assert clf.plan_.privacy is private[0] and clf.batch_size_ == private[0].batch_size


@pytest.mark.parametrize("cls", [FederatedSPDNetClassifier, FederatedTangentSpaceClassifier])
def test_the_trainer_runs_the_settings_the_planner_returned(cls):
    """The planner returns the run's complete settings (every "auto" planned): the trainer runs that object, and the
    settings the estimator did not leave to the planner are its own."""
    clf = cls(eps=4.0, n_rounds=2, clip="auto", clip_quantile=0.7, lockstep=False, random_state=0)
    trainer = clf.make_trainer((5, 5), classes=[0, 1], client_sizes=[30, 30, 30])
    assert trainer.settings is clf._plan.trainer_settings
    settings = trainer.settings
    assert (settings.n_rounds, settings.clip_quantile, settings.lockstep) == (2, 0.7, False)
    assert settings.batch_size == 30 and settings.lr == clf._plan.lr and settings.optimizer == "sgd"


def test_the_plan_depends_on_public_quantities_only():
    """Two federations with the same client sizes and different records get the same plan; sizes move it."""
    (X1, y1, g1), (X2, y2, _) = _spd(0), _spd(1)
    rng = np.random.default_rng(2)
    y2 = rng.permutation(y2)  # other records and other labels, same sizes
    for cls in (FederatedSPDNetClassifier, FederatedTangentSpaceClassifier):
        plans = [cls(eps=4.0, n_rounds=3, random_state=0).fit(X, y, groups=g1).plan_ for X, y in ((X1, y1), (X2, y2))]
        assert plans[0] == plans[1]
        bigger = cls(eps=4.0, n_rounds=3, random_state=0).fit(
            np.concatenate([X1, X1]), np.concatenate([y1, y1]), groups=np.concatenate([g1, g1])).plan_
        assert bigger != plans[0]  # twice the records per client: less noise per step, a longer step


@pytest.mark.parametrize("sizes, eps", [([1000] * 3, 1.0), ([40] * 20, 4.0), ([36] * 100, 10.0), ([24, 30, 50], 1.0)])
def test_the_planned_sgd_step_bounds_the_step_per_round_and_the_noise_walk(sizes, eps):
    plan = plan_classifier(model="spdnet", client_sizes=sizes, eps=eps)
    assert (plan.optimizer, plan.lr_schedule, plan.n_rounds) == ("sgd", "constant", 200)
    settings = FederationSettings(eps=eps, batch_size=plan.batch_size, n_rounds=plan.n_rounds)
    privacy = plan_run(sizes, list(range(len(sizes))), settings)  # the trainer's own calibration
    assert plan.steps_per_round == privacy.steps_per_round
    sigma_bar = math.sqrt(np.mean([privacy.client_noise_std(i) ** 2 for i in range(len(sizes))]) / len(sizes))
    walk = plan.lr * sigma_bar * math.sqrt(plan.n_rounds * plan.steps_per_round)
    assert plan.lr * plan.steps_per_round <= ROUND_STEP * (1 + 1e-12)
    assert walk <= NOISE_WALK * (1 + 1e-9)
    assert walk == pytest.approx(NOISE_WALK) or plan.lr * plan.steps_per_round == pytest.approx(ROUND_STEP)


def test_the_regimes_get_the_steps_the_grid_found():
    """Large clients (τ = 16): a step of 0.5 per round; many small ones: a smaller step as the budget shrinks."""
    large = plan_classifier(model="spdnet", client_sizes=[1000] * 3, eps=10.0)
    assert (large.steps_per_round, large.lr) == (16, pytest.approx(ROUND_STEP / 16))
    small = [plan_classifier(model="spdnet", client_sizes=[36] * 30, eps=eps).lr for eps in (1.0, 4.0, 10.0, 1e2)]
    assert small == sorted(small) and small[-1] == ROUND_STEP
    assert plan_classifier(model="spdnet", client_sizes=[36] * 100, eps=1.0).lr > small[0]  # averaging over more


def test_explicit_settings_are_kept_and_the_rest_planned_around_them():
    plan = plan_classifier(model="spdnet", client_sizes=[200] * 3, eps=10.0, batch_size=20, n_rounds=50,
                           lr_schedule="cosine")
    assert (plan.batch_size, plan.n_rounds, plan.lr_schedule, plan.steps_per_round) == (20, 50, "cosine", 10)
    assert plan.lr <= ROUND_STEP / 10
    adam = plan_classifier(model="spdnet", client_sizes=[200] * 3, eps=10.0, optimizer="adam")
    assert (adam.optimizer, adam.lr, adam.lr_schedule) == ("adam", 1e-2, "cosine")
    tangent = plan_classifier(model="tangent", client_sizes=[1000] * 3, eps=1.0)
    tangent_lr = FederatedTangentSpaceClassifier.schedule.sgd_lr
    assert (tangent.optimizer, tangent.lr, tangent.lr_schedule) == ("sgd", tangent_lr, "constant")
    given = plan_classifier(model="tangent", client_sizes=[200] * 3, eps=10.0, lr=0.3, optimizer="sgd")
    assert given.lr == 0.3
    with pytest.raises(ValueError, match="optimizer=.*needs an explicit lr"):
        plan_classifier(model="spdnet", client_sizes=[200] * 3,
                        optimizer=lambda params, lr: torch.optim.SGD(params, lr))


def test_auto_batches_are_clamped_silently_and_eegnet_plans_the_rule_under_privacy():
    plan = plan_classifier(model="spdnet", client_sizes=[40, 50], eps=4.0)
    assert plan.batch_size == 40 and plan.steps_per_round == 1  # under privacy, the smallest client's count
    assert plan_classifier(model="spdnet", client_sizes=[40, 50], eps=None).steps_per_round == 2
    eegnet = plan_classifier(model="eegnet", client_sizes=[100] * 3, eps=4.0)
    rule = plan_classifier(model="spdnet", client_sizes=[100] * 3, eps=4.0, batch_size=16)
    assert (eegnet.optimizer, eegnet.lr_schedule, eegnet.batch_size) == ("sgd", "constant", 16)
    assert eegnet.lr == rule.lr  # the noise-walk rule, as SPDNet's at the same B
    plain = plan_classifier(model="eegnet", client_sizes=[100] * 3, eps=None)
    assert (plain.optimizer, plain.lr, plain.lr_schedule) == ("adam", 3e-3, "cosine")
    X, y, groups = _spd(0, per_client=20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "batch_size=64 is larger than client ..." for a planned B
        warnings.simplefilter("ignore", NoiseSwampsSignalWarning)  # a few rounds: the plan's signal-to-noise
        FederatedSPDNetClassifier(eps=4.0, n_rounds=2).fit(X, y, groups=groups)


def test_one_tiny_client_setting_every_clients_batch_is_warned_about():
    """One 3-trial client made B = 3 for all: 39 steps a round at a noise std of 34.7, without a word."""
    with pytest.warns(UserWarning, match=r"batch_size='auto' is 3 for every client.*only 3 records.*smallest's 1 "
                                         r"step.*noise of a batch of 3.*draws 3 records of the largest client's 120"):
        plan = plan_classifier(model="tangent", client_sizes=[3, 120, 118], eps=4.0)
    assert plan.batch_size == 3
    with pytest.warns(UserWarning, match=r"batch_size='auto' is 3.*up to 40 steps a round of 3 records"):
        plan_classifier(model="tangent", client_sizes=[3, 120, 118], eps=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # comparable clients: B follows them quietly
        plan_classifier(model="spdnet", client_sizes=[30, 36, 41], eps=4.0)


def test_a_site_resolves_the_optimizer_as_the_server_plans_it():
    """A deployed site knows no other client's size: the planned optimiser depends on the model's kind alone."""
    for cls, kind in ((FederatedSPDNetClassifier, "spdnet"), (FederatedTangentSpaceClassifier, "tangent"),
                      (FederatedEEGNetClassifier, "eegnet")):
        est = cls()
        for sizes in ([30] * 3, [2000] * 5):
            assert est.client_optimizer() == plan_classifier(model=kind, client_sizes=sizes, eps=1.0).optimizer
        assert cls(optimizer="adam").client_optimizer() == "adam" == planned_optimizer(kind, "adam")
        plain = cls(eps=None)
        assert plain.client_optimizer() == plan_classifier(model=kind, client_sizes=[30] * 3).optimizer


def test_a_fit_without_privacy_plans_adam_with_a_cosine_schedule_for_spdnet():
    """SPDNet's private SGD schedule stayed near chance on real EEG without privacy (0.51 against Adam's 0.68)."""
    plan = plan_classifier(model="spdnet", client_sizes=[30, 31, 29])
    assert (plan.optimizer, plan.lr, plan.lr_schedule) == ("adam", FederatedSPDNetClassifier.schedule.adam_lr, "cosine")
    assert "without privacy" in plan.reason
    assert plan_classifier(model="spdnet", client_sizes=[30, 31, 29], eps=4.0).optimizer == "sgd"
    assert plan_classifier(model="tangent", client_sizes=[30, 31, 29]).optimizer == "sgd"
    assert plan_classifier(model="spdnet", client_sizes=[30] * 3, optimizer="sgd").optimizer == "sgd"


def test_the_fitted_plan_is_what_ran():
    X, y, groups = _spd(0)
    clf = FederatedSPDNetClassifier(eps=4.0, n_rounds=4, random_state=0).fit(X, y, groups=groups)
    assert clf.plan_.n_rounds == len(clf.history_) == 4
    assert clf.batch_size_ == clf.plan_.batch_size
    assert "σ̄" in clf.plan_.reason and "T = " not in clf.plan_.reason  # T was set by hand
    assert [row["lr"] for row in clf.history_] == pytest.approx([clf.plan_.lr] * 4)  # constant schedule
