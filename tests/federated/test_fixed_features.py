import numpy as np
import pytest
import torch
from torch import nn

from skfedriem import FederatedTangentSpaceClassifier
from skfedriem.datasets import make_spd_classification
from skfedriem.federated import ClientRecipe, on_fixed_features
from skfedriem.models import LinearOnFeatures, TangentSpaceLogistic
from skfedriem.privacy import ModelCapabilities


def _fit(**kw):
    X, y, groups = make_spd_classification(3, 40, 5, n_classes=3, class_sep=2.0, noise=0.5, random_state=0)
    settings = dict(eps=4.0, n_rounds=6, batch_size=8, reference=None, dtype="float64", random_state=0)
    return FederatedTangentSpaceClassifier(**{**settings, **kw}).fit(X, y, groups=groups), X


@pytest.mark.parametrize("settings", [{}, {"lockstep": False}, {"eps": None}, {"sampling": "poisson"}])
def test_a_fit_on_features_computed_once_is_the_fit_that_maps_every_batch(monkeypatch, settings):
    cached, X = _fit(**settings)
    # without the declared fixed features, forward maps each batch at each step
    monkeypatch.setattr(TangentSpaceLogistic, "capabilities", ModelCapabilities(stacks=True))
    monkeypatch.setattr(TangentSpaceLogistic, "forward", lambda self, X: self.classifier(self.features(
        self.normalize(X))))
    mapped, _ = _fit(**settings)
    for (name, a), (_, b) in zip(cached.module_.state_dict().items(), mapped.module_.state_dict().items()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)
    assert np.abs(cached.module_.classifier.weight.detach().numpy()).max() > 0  # it trained the whole model
    assert cached.epsilon_ == mapped.epsilon_
    np.testing.assert_array_equal(cached.predict(X), mapped.predict(X))


class _Mixing(nn.Module):
    """A feature map that mixes the records it is given (adds their mean): only a lone record is safe."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(3, 2)

    def forward(self, X):
        return self.head(self.fixed_features(X))

    def fixed_features(self, X):
        return X + X.mean(0, keepdim=True)

    def on_features(self):
        return _Head(self.head)

    capabilities = ModelCapabilities(fixed_features=lambda model: (model.fixed_features, model.on_features()))


class _Head(nn.Module):
    def __init__(self, head):
        super().__init__()
        self.head = head

    def forward(self, features):
        return self.head(features)


def test_each_records_features_are_computed_from_that_record_alone():
    X = torch.randn(6, 3, dtype=torch.float64)
    y = torch.zeros(6, dtype=torch.long)
    changed = X.clone()
    changed[5] = 100.0
    recipe = ClientRecipe(_Mixing().double(), lambda out, t: out.sum(1))
    _, (original,) = on_fixed_features(recipe, [(X, y)])
    _, (neighbour,) = on_fixed_features(recipe, [(changed, y)])
    torch.testing.assert_close(original[0][:5], neighbour[0][:5], rtol=0, atol=0)
    torch.testing.assert_close(original[0], 2 * X)


def test_the_trained_part_must_train_every_parameter_of_the_model():
    class Partial(_Mixing):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(3))

        capabilities = _Mixing.capabilities

    with pytest.raises(TypeError, match=r"fixed_features must give a head training every parameter.*scale"):
        on_fixed_features(ClientRecipe(Partial(), lambda out, t: out.sum(1)), [(torch.randn(4, 3), torch.zeros(4))])


def test_a_model_without_a_fixed_map_trains_on_its_records():
    recipe = ClientRecipe(nn.Linear(3, 2), lambda out, t: out.sum(1))
    data = [(torch.randn(4, 3), torch.zeros(4))]
    same, records = on_fixed_features(recipe, data)
    assert same is recipe and records[0] is data[0]


def test_the_tangent_models_trained_part_shares_its_parameters_and_can_run_in_lockstep():
    model = TangentSpaceLogistic(4, 2, dtype=torch.float64)
    recipe, (features,) = on_fixed_features(ClientRecipe(model, lambda out, t: out.sum(1), lockstep=True),
                                            [(torch.eye(4, dtype=torch.float64).expand(3, 4, 4), torch.zeros(3))])
    assert isinstance(recipe.module, LinearOnFeatures) and recipe.module.classifier is model.classifier
    assert recipe.lockstep and features[0].shape == (3, 10)
