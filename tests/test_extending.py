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
from skfedriem.privacy import SeededRandomness
from skfedriem.privacy import LoneClient
from skfedriem.privacy.mechanism import noisy_release
from skfedriem.privacy.per_sample import trainable_parameters

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
