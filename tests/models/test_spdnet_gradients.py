"""SPDNet's per-record tangent gradients in closed form: the generic routes' gradients, and only where they apply."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from skfedriem.datasets import make_spd_classification
from skfedriem.federated.lockstep import ClientStack
from skfedriem.models import SPDNet
from skfedriem.privacy import DenseGradients, layerwise_per_sample_gradients, per_sample_gradients
from skfedriem.privacy.per_record.gradients import per_record_gradients, project_per_sample
from skfedriem.privacy.per_record.per_sample import trainable_parameters


def cross_entropy(output, target):
    return F.cross_entropy(output, target, reduction="none")


def spd_batch(n=12, channels=8, classes=3, seed=0):
    X, y, _ = make_spd_classification(1, n, channels, n_classes=classes, scale=1e-10, random_state=seed)
    return torch.as_tensor(X), torch.as_tensor(y)


def net(dims=(5,), normalize=True, seed=0, reeig_eps=1e-4):
    return SPDNet(8, 3, dims=dims, reeig_eps=reeig_eps, normalize=normalize,
                  generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def reference(model, batch):
    """torch.func's per-sample gradients, projected onto each block's tangent space."""
    return project_per_sample(per_sample_gradients(model, cross_entropy, batch), trainable_parameters(model))


@pytest.mark.parametrize("dims, normalize, frozen, reeig_eps", [
    ((5,), True, None, 1e-4), ((6, 4), True, None, 1e-4), ((6, 4), False, "features.0.weight", 1e-4),
    ((6, 4), True, "features.3.weight", 1e-4), ((5,), True, "classifier.bias", 1e-4),
    ((5,), True, "classifier.weight", 1e-4), ((6, 4), True, None, 0.8)],
    ids=["one block", "two blocks", "raw inputs, first W frozen", "second W frozen", "bias frozen",
         "weight frozen", "ReEig floor active"])
def test_the_closed_form_is_torch_funcs_tangent_gradient(dims, normalize, frozen, reeig_eps):
    model = net(dims, normalize, reeig_eps=reeig_eps)
    if frozen:
        dict(model.named_parameters())[frozen].requires_grad_(False)
    X, y = spd_batch()
    batch = (X if normalize else 1e10 * X, y)
    if reeig_eps > 0.5:  # the floor clamps eigenvalues of every record (equal values f(λ), the quotient's 0 rise)
        Y = model.features[1](model.features[0](X))
        assert bool((torch.linalg.eigvalsh(Y)[:, 0] < reeig_eps).all())
    ours, ref = model.per_record_tangent_gradients(cross_entropy, batch), reference(model, batch)
    assert list(ours) == list(ref) and frozen not in ours
    for name in ref:
        torch.testing.assert_close(ours[name], ref[name], rtol=1e-9, atol=1e-12)


def test_records_with_equal_eigenvalues_take_the_mean_slope_and_stay_torch_funcs():
    """Identity records: WᵀIW = I on the Stiefel manifold, every eigenvalue 1 (the Loewner matrix's mean slopes)."""
    model = net((6, 4))
    X, y = spd_batch()
    X[::3] = torch.eye(8, dtype=X.dtype)
    ours, ref = model.per_record_tangent_gradients(cross_entropy, (X, y)), reference(model, (X, y))
    for name in ref:
        torch.testing.assert_close(ours[name], ref[name], rtol=1e-9, atol=1e-12)


def test_the_stiefel_gradient_of_every_record_is_tangent():
    model = net((6, 4))
    grads = model.per_record_tangent_gradients(cross_entropy, spd_batch())
    for name in ("features.1.weight", "features.3.weight"):
        W = dict(model.named_parameters())[name].detach()
        skew = W.T @ grads[name]
        assert float((skew + skew.mT).abs().max()) < 1e-12 * float(grads[name].abs().max())
        assert float(grads[name].abs().max()) > 0


def test_clients_stacked_get_each_their_own_gradients():
    """Three clients' parameters and records in one call: client k's rows are a lone copy's at its parameters."""
    model, X, y = net((6, 4)), *spd_batch(18)
    g = torch.Generator().manual_seed(3)
    stack = ClientStack(model, 3)
    with torch.no_grad():
        for name, block in stack.blocks.items():
            block.add_(0.01 * torch.randn(block.shape, generator=g, dtype=block.dtype))
        stack.project_()
    stacked = model.per_record_tangent_gradients(cross_entropy, (X.view(3, 6, 8, 8), y.view(3, 6)), record_dims=2,
                                                 parameters=stack.blocks)
    for k in range(3):
        lone = net((6, 4))
        with torch.no_grad():
            for name, p in lone.named_parameters():
                p.copy_(stack.blocks[name][k])
        alone = lone.per_record_tangent_gradients(cross_entropy, (X[6 * k:6 * (k + 1)], y[6 * k:6 * (k + 1)]))
        for name in alone:
            torch.testing.assert_close(stacked[name][k], alone[name], rtol=1e-10, atol=1e-13)


def test_the_lockstep_stack_takes_the_closed_form():
    model, X, y = net((6, 4)), *spd_batch(18)
    stack = ClientStack(model, 3)
    batch = (X.view(3, 6, 8, 8), y.view(3, 6))
    taken = stack.per_record_gradients(cross_entropy, batch)
    closed = model.per_record_tangent_gradients(cross_entropy, batch, record_dims=2, parameters=stack.blocks)
    assert list(taken.grads) == list(closed) and all(torch.equal(taken.grads[n], closed[n]) for n in closed)


class Subclass(SPDNet):
    def forward(self, X):
        return 2 * super().forward(X)


def hooked():
    model = net()
    model.features[1].register_forward_hook(lambda *args: None)
    return model


def extended():
    model = net()
    model.classifier = nn.Sequential(nn.Linear(15, 15).double(), nn.Linear(15, 3).double())
    return model


def without_vech():
    model = net()
    model.features = model.features[:-1]
    return model


def repeated_block():
    """A BiRe block listed twice runs twice (named_children would list it once)."""
    model = net((8, 8))
    layers = list(model.features)
    model.features = nn.Sequential(*layers[:3], *layers[1:3], *layers[3:])
    assert model(spd_batch()[0]).shape == (12, 3)  # a model that runs
    return model


def tied_weights():
    model = net((8, 8))
    model.features[3].weight = model.features[1].weight
    return model


def hook_of(kind):
    def make():
        model = net()
        layer = model.classifier
        if kind == "pre":
            layer.register_forward_pre_hook(lambda *args: None)
        else:
            layer.register_full_backward_hook(lambda *args: None)
        return model

    return make


class Pipeline(nn.Sequential):
    def forward(self, X):
        return super().forward(X) * 2


def another_sequential():
    model = net()
    model.features = Pipeline(*model.features)
    return model


def patched_forward():
    model = net()
    bimap = model.features[1]
    bimap.forward = lambda X: 2 * type(bimap).forward(bimap, X)
    return model


def extra_parameter():
    model = net()
    model.register_parameter("extra", nn.Parameter(torch.ones(3, dtype=torch.float64)))
    return model


def trainable_floor():
    model = net()
    model.features[2].eps = nn.Parameter(torch.tensor(1e-4, dtype=torch.float64))
    return model


@pytest.mark.parametrize("make", [
    lambda: Subclass(8, 3, (5,), generator=torch.Generator().manual_seed(0)), hooked, extended, without_vech,
    repeated_block, tied_weights, hook_of("pre"), hook_of("backward"), another_sequential, patched_forward,
    extra_parameter, trainable_floor],
    ids=["subclass", "hooks", "another classifier", "another layer list", "a layer twice", "tied weights",
         "a pre-hook", "a backward hook", "a Sequential subclass", "a forward set on the instance",
         "an extra parameter", "a trainable floor"])
def test_anything_but_an_spdnet_as_built_takes_the_generic_route(make):
    model = make()
    assert model.per_record_tangent_gradients(cross_entropy, spd_batch()) is None


def test_a_hook_on_every_module_takes_the_generic_route():
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, inputs, output: output)
    try:
        assert net().per_record_tangent_gradients(cross_entropy, spd_batch()) is None
    finally:
        handle.remove()
    assert net().per_record_tangent_gradients(cross_entropy, spd_batch()) is not None


def test_inputs_of_another_shape_and_a_loss_not_per_record_take_the_generic_route():
    model = net()
    X, y = spd_batch()
    assert model.per_record_tangent_gradients(cross_entropy, (X[:, None], y)) is None  # a filter-bank axis
    assert model.per_record_tangent_gradients(lambda out, t: F.cross_entropy(out, t), (X, y)) is None  # a mean


def test_the_private_step_takes_the_closed_form_and_a_subclass_the_layer_rules():
    batch = spd_batch()
    model = net()
    taken = per_record_gradients(model, cross_entropy, batch)
    closed = model.per_record_tangent_gradients(cross_entropy, batch)
    assert all(torch.equal(taken.grads[name], closed[name]) for name in closed)
    sub = Subclass(8, 3, (5,), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    rules = project_per_sample(layerwise_per_sample_gradients(sub, cross_entropy, batch), trainable_parameters(sub))
    taken = per_record_gradients(sub, cross_entropy, batch)
    assert isinstance(taken, DenseGradients)
    assert all(torch.equal(taken.grads[name], rules[name]) for name in rules)
