"""A new classifier and a new manifold are each one file (the documentation's examples) and at most one
registration: the test imports the file and uses the extension as users use the built-in ones."""

import inspect
import sys
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pyriemann.estimation import Covariances
from sklearn.model_selection import GroupKFold, cross_val_score
from sklearn.pipeline import Pipeline

from skfedriem import FederatedTangentSpaceClassifier
from skfedriem.classification.planning import SCHEDULES, ClassifierSchedule, plan_classifier
from skfedriem.datasets import make_spd_classification
from skfedriem.federated import FederatedTrainer, FederationSettings
from skfedriem.flower.deployment.run_config import ESTIMATORS, estimator_from_run_config, register_deployable
from skfedriem.manifolds import ManifoldParameter, manifold_of
from skfedriem.exceptions import OneByOneClientsWarning
from skfedriem.federated import client_round
from skfedriem.privacy import LoneClient, PrivacyBudget, SeededRandomness, WholeRunAccounting, register_accounting
from skfedriem.privacy.accounting.accounting_methods import ACCOUNTINGS, ChargedRun
from skfedriem.privacy.mechanisms.mechanism import noisy_release
from skfedriem.privacy.per_record.per_sample import trainable_parameters

from .classification.contract import check_contract_on_spd_input
from .extending_examples import load_example


@pytest.fixture(scope="module")
def new_classifier():
    """The example classifier, registered while this module's tests run (other tests list the built-in kinds)."""
    yield load_example("log_euclidean").FederatedLogEuclideanClassifier
    ESTIMATORS._entries.pop("logeuclidean")
    SCHEDULES._entries.pop("logeuclidean")
    sys.modules.pop("extending_example_log_euclidean")


@pytest.fixture(scope="module")
def oblique():
    return load_example("oblique").Oblique


def test_a_new_classifier_takes_every_shared_setting_and_is_planned_and_deployable_by_name(new_classifier):
    signature = inspect.signature(new_classifier)
    assert {"eps", "batch_size", "clip_quantile", "lockstep", "classes", "dtype"} <= set(signature.parameters)
    assert signature.parameters["batch_size"].default == "auto"
    assert "batch_size : int, None or \"auto\", default=\"auto\"" in new_classifier.__doc__
    assert SCHEDULES.get("logeuclidean") is new_classifier.schedule
    plan = plan_classifier(model="logeuclidean", client_sizes=[60] * 3, eps=4.0)
    assert (plan.optimizer, plan.lr, plan.batch_size) == ("sgd", 0.1, 60)
    assert ESTIMATORS.get("logeuclidean") is new_classifier  # the one registration
    est = estimator_from_run_config("logeuclidean", {"eps": 4.0, "n-rounds": 3, "batch-size": 16, "seed": 1})
    assert isinstance(est, new_classifier) and (est.eps, est.n_rounds, est.batch_size) == (4.0, 3, 16)
    assert est.client_optimizer() == "sgd"


def test_a_new_classifier_learns_privately_inside_a_pipeline_and_keeps_the_contract(new_classifier):
    X, y, groups = make_spd_classification(3, 60, 6, n_classes=3, class_sep=2.0, noise=0.5, random_state=0)
    clf = new_classifier(eps=4.0, n_rounds=20, random_state=0).fit(X, y, groups=groups)
    assert clf.epsilon_ <= 4.0 and clf.plan_.lr == 0.1 and len(clf.history_) == 20
    assert clf.score(X, y) > 0.6  # three classes
    check_contract_on_spd_input(lambda: new_classifier(eps=10.0, n_rounds=4, batch_size=16, random_state=0),
                                X, y, groups)
    rng = np.random.default_rng(0)
    mixing = [np.eye(5) + 0.6 * rng.standard_normal((5, 5)) for _ in range(2)]
    labels = np.arange(120) % 2
    signals = np.stack([mixing[label] @ rng.standard_normal((5, 200)) for label in labels])
    pipeline = Pipeline([("cov", Covariances("oas")), ("clf", new_classifier(eps=None, n_rounds=15, random_state=0))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # groups by position inside cross_val_score (no metadata routing)
        scores = cross_val_score(pipeline, signals, labels, cv=GroupKFold(3), groups=np.repeat([0, 1, 2], 40))
    assert scores.mean() > 0.8


def test_a_model_name_taken_by_another_model_is_refused():
    """Two models under one name would plan one as the other."""
    from skfedriem.classification import FederatedClassifier

    with pytest.raises(ValueError, match="named 'tangent', the name of another model's schedule"):
        class Impostor(FederatedClassifier):
            schedule = ClassifierSchedule(name="tangent", batch_size=8, optimizer="adam",
                                          optimizer_without_privacy="adam", adam_lr=1e-3)
    assert SCHEDULES.get("tangent") is FederatedTangentSpaceClassifier.schedule
    with pytest.raises(ValueError, match="already registered"):
        register_deployable(FederatedTangentSpaceClassifier, name="spdnet")


class CosineClassifier(torch.nn.Module):
    """Logits s · xᵀ W / ||x|| with W's columns (one direction per class) on the oblique manifold."""

    def __init__(self, manifold, generator):
        super().__init__()
        self.W = ManifoldParameter(manifold.random_point(generator=generator), manifold)

    def forward(self, x):
        return 4.0 * F.normalize(x, dim=-1) @ self.W


def _loss(logits, target):
    return F.cross_entropy(logits, target, reduction="none")


def _clients(n_clients=4, per_client=60, n=5, seed=0):
    rng = np.random.default_rng(seed)
    directions = rng.standard_normal((3, n))
    clients = []
    for _ in range(n_clients):
        y = rng.integers(3, size=per_client)
        X = directions[y] + 0.5 * rng.standard_normal((per_client, n))
        clients.append((torch.from_numpy(X), torch.from_numpy(y)))
    return clients


@pytest.mark.parametrize("aggregation", ["projavg", "rlavg", "retavg"])
def test_a_new_manifold_is_trained_privately_and_stays_on_itself(oblique, aggregation):
    manifold = oblique(5, 3)
    clients = _clients()
    fits = []
    for lockstep in (False, True):
        module = CosineClassifier(manifold, torch.Generator().manual_seed(0))
        settings = FederationSettings(eps=4.0, n_rounds=15, batch_size=20, lr=0.5, aggregation=aggregation,
                                      lockstep=lockstep, verbose=0)
        trainer = FederatedTrainer(module, _loss, settings, seed_sequence=np.random.SeedSequence(1),
                                   client_seed=np.random.SeedSequence(2)).fit(clients)
        assert manifold_of(module.W) == manifold and manifold.check_point(module.W.detach(), atol=1e-10)
        assert trainer.epsilon_ <= 4.0
        fits.append(module.W.detach().clone())
    torch.testing.assert_close(fits[1], fits[0], rtol=1e-6, atol=1e-8)  # lockstep: the same noise and batches
    X = torch.cat([c[0] for c in clients])
    y = torch.cat([c[1] for c in clients])
    module.W.data.copy_(fits[0])
    assert float((module(X).argmax(1) == y).double().mean()) > 0.6  # three classes


def test_a_new_manifolds_noise_is_tangent(oblique):
    manifold = oblique(5, 3)
    module = CosineClassifier(manifold, torch.Generator().manual_seed(0))
    params = trainable_parameters(module)
    zeros = {name: torch.zeros_like(p) for name, p in params.items()}
    noise = noisy_release(LoneClient(module), {name: z.unsqueeze(0) for name, z in zeros.items()}, denominator=1.0,
                          noise_std=1.0, randomness=[SeededRandomness(np.random.SeedSequence(0))])["W"][0]
    assert float(noise.norm()) > 1
    torch.testing.assert_close(manifold.proju(module.W.detach(), noise), noise, rtol=0, atol=1e-12)


def test_a_subclass_without_an_init_keeps_its_parents_parameters():
    """A subclass that restates one default gets an ``__init__`` of its own: the parent's parameters stay in it."""
    from skfedriem import FederatedSPDNetClassifier
    from sklearn.base import clone

    class Tuned(FederatedSPDNetClassifier):
        eps: float = 1.0

    est = Tuned(dims=(3,))
    assert est.get_params()["dims"] == (3,) and clone(est).dims == (3,) and est.eps == 1.0
    assert "dims" in Tuned._parameter_constraints and "eps" in Tuned._parameter_constraints
    assert FederatedSPDNetClassifier().eps == 10.0  # the parent's signature is its own
    assert Tuned.__init__.__qualname__.endswith("Tuned.__init__")


@pytest.fixture(scope="module")
def tangent_mlp():
    """The example model and classifier, registered while this module's tests run."""
    yield load_example("tangent_mlp")
    ESTIMATORS._entries.pop("tangentmlp")
    SCHEDULES._entries.pop("tangentmlp")
    sys.modules.pop("extending_example_tangent_mlp")


def test_a_new_model_is_one_file_and_one_registration_and_its_clients_run_in_lockstep(tangent_mlp, monkeypatch):
    """Built of layers the step knows, the MLP declares nothing: its three clients take their steps together."""
    groups_run = []
    honest = client_round.run_round
    monkeypatch.setattr(client_round, "run_round", lambda recipe, theta, clients, *rest: (
        groups_run.append(len(clients)), honest(recipe, theta, clients, *rest))[1])
    X, y, groups = make_spd_classification(3, 60, 6, n_classes=3, class_sep=2.0, noise=0.5, random_state=0)
    cls = tangent_mlp.FederatedTangentMLPClassifier
    with warnings.catch_warnings():
        warnings.simplefilter("error", OneByOneClientsWarning)
        clf = cls(eps=4.0, hidden=8, n_rounds=25, random_state=0).fit(X, y, groups=groups)
    assert set(groups_run) == {3}  # every round's three clients in one lockstep group
    assert clf.epsilon_ <= 4.0 and clf.score(X, y) > 0.6
    assert ESTIMATORS.get("tangentmlp") is cls and SCHEDULES.get("tangentmlp") is cls.schedule
    est = estimator_from_run_config("tangentmlp", {"eps": 4.0, "n-rounds": 3, "hidden": 4, "seed": 1})
    assert isinstance(est, cls) and est.hidden == 4


def test_a_layer_that_declares_nothing_is_named_once_and_its_clients_run_one_by_one(tangent_mlp):
    from skfedriem.federated import engine

    model = tangent_mlp.tangent_mlp(4, 2, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    model[3] = torch.nn.Hardswish()  # not declared: the step cannot know it acts entry by entry
    X, y, _ = make_spd_classification(2, 20, 4, random_state=0)
    X, y = torch.as_tensor(X), torch.as_tensor(y)
    clients = [(X[:20], y[:20]), (X[20:], y[20:])]
    settings = FederationSettings(n_rounds=1, batch_size=5, local_steps=1, eps=4.0)
    loss = lambda out, target: F.cross_entropy(out, target, reduction="none")  # noqa: E731
    engine._NAMED_ONE_BY_ONE.clear()
    with pytest.warns(OneByOneClientsWarning, match=r"layer '3' \(Hardswish\) declares no stacking"):
        FederatedTrainer(model, loss, settings).fit(clients)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OneByOneClientsWarning)  # said once per process
        FederatedTrainer(model, loss, settings).fit(clients)


class _Doubled(WholeRunAccounting):
    """The paper's accounting with every ε doubled (a looser, still valid, upper bound), registered by tests."""

    name = "test-doubled"

    def calibrate(self, eps, delta, **kw):
        return super().calibrate(eps / 2, delta, **kw)

    def epsilon(self, ledger, delta, **kw):
        return 2 * super().epsilon(ledger, delta, **kw)

    def running_epsilon(self, ledger, delta, **kw):
        return lambda: self.epsilon(ledger, delta, steps_per_round=1, n_rounds=1)

    def composed_epsilon(self, runs, delta, **kw):
        return 2 * super().composed_epsilon(runs, delta, **kw)

    def group_epsilon(self, run, group_size, delta):
        return 2 * super().group_epsilon(run, group_size, delta)


def test_an_accounting_method_registered_once_governs_fits_budgets_sites_and_groups(tmp_path):
    from skfedriem.flower.protocol.client_app import SiteGuard
    from skfedriem.privacy import group_epsilon

    register_accounting(_Doubled(), force=True)
    try:
        X, y, groups = make_spd_classification(3, 40, 4, random_state=0)
        budget = PrivacyBudget(20.0, accounting="test-doubled")
        clf = FederatedTangentSpaceClassifier(eps=4.0, accounting="test-doubled", n_rounds=5, reference=None,
                                              privacy_budget=budget, random_state=0).fit(X, y, groups=groups)
        pld = clf.ledger_.get_epsilon(clf.delta_)
        assert clf.epsilon_ == pytest.approx(2 * pld, rel=1e-6) and clf.epsilon_ <= 4.0  # the fit
        assert budget.spent() == pytest.approx(2 * pld, rel=0.05)  # the budget (its own, coarser grid)
        assert clf.epsilon_for_group(3) == pytest.approx(2 * group_epsilon(clf.ledger_, 3, clf.delta_))  # groups
        site = SiteGuard(str(tmp_path / "ledger.json"), max_epsilon=30.0, accounting="test-doubled")
        site.ledger().charge(clf.ledger_, label="a round", steps_per_round=1, n_rounds=1)
        assert site.ledger().spent() == pytest.approx(2 * clf.ledger_.get_epsilon(1e-5, discretization=1e-3),
                                                      rel=1e-6)  # a site's ledger
    finally:
        ACCOUNTINGS._entries.pop("test-doubled")


def test_an_accounting_method_that_certifies_one_run_refuses_groups_and_sites(tmp_path):
    from skfedriem.flower.protocol.client_app import SiteGuard

    X, y, groups = make_spd_classification(3, 40, 4, random_state=0)
    clf = FederatedTangentSpaceClassifier(eps=4.0, accounting="prirfed", sampling="poisson", n_rounds=5,
                                          reference=None, random_state=0).fit(X, y, groups=groups)
    assert clf.epsilon_for_group(1) == clf.epsilon_
    with pytest.raises(ValueError, match="certifies no group"):  # was 1.25, below the 4.0 of one record
        clf.epsilon_for_group(2)
    with pytest.raises(ValueError, match="certifies one run"):
        SiteGuard(str(tmp_path / "ledger.json"), accounting="prirfed")
    budget = PrivacyBudget(50.0, accounting="prirfed")
    budget.charge(ChargedRun.of(clf.ledger_).ledger, label="one fit")
    with pytest.raises(ValueError, match="certifies one run"):
        budget.charge(clf.ledger_, label="a second fit")
