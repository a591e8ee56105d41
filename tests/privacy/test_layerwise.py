import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from skfedriem.datasets import make_spd_classification
from skfedriem.models import SPDNet
from skfedriem.privacy import layerwise_per_sample_gradients, per_sample_gradients, private_gradient
from skfedriem.privacy.per_record.layerwise import supports_layerwise
from skfedriem.privacy.mechanisms.randomness import SeededRandomness


def cross_entropy(output, target):
    return F.cross_entropy(output, target, reduction="none")


def spd_batch(n=16, channels=8, classes=3, seed=0):
    X, y, _ = make_spd_classification(1, n, channels, n_classes=classes, scale=1e-10, random_state=seed)
    return torch.as_tensor(X), torch.as_tensor(y)


@pytest.mark.parametrize("dims", [(5,), (6, 4)])
def test_spdnet_rules_equal_vmap(dims):
    net = SPDNet(8, 3, dims=dims, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    batch = spd_batch()
    assert supports_layerwise(net)
    ours = layerwise_per_sample_gradients(net, cross_entropy, batch)
    ref = per_sample_gradients(net, cross_entropy, batch)
    assert list(ours) == list(ref)
    for name in ref:
        torch.testing.assert_close(ours[name], ref[name])


def test_mlp_rules_equal_vmap_and_skip_frozen_parameters(gen):
    mlp = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).double()
    mlp[0].bias.requires_grad_(False)
    X = torch.randn(9, 5, generator=gen, dtype=torch.float64)
    y = torch.randint(3, (9,), generator=gen)
    ours = layerwise_per_sample_gradients(mlp, cross_entropy, (X, y))
    ref = per_sample_gradients(mlp, cross_entropy, (X, y))
    assert "0.bias" not in ours and list(ours) == list(ref)
    for name in ref:
        torch.testing.assert_close(ours[name], ref[name])


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def forward(self, X):
        return self.layer(torch.tanh(self.layer(X)))


@pytest.mark.parametrize(
    "module, inputs",
    [
        (nn.Sequential(nn.Conv1d(2, 2, 3), nn.Flatten()), torch.randn(4, 2, 5)),  # no rule for Conv1d
        (Shared(), torch.randn(4, 4)),  # a layer used twice per forward pass
        (nn.Sequential(nn.Linear(3, 2), nn.Flatten()), torch.randn(4, 5, 3)),  # Linear on 3-D input
    ],
    ids=["no_rule", "reused_layer", "linear_3d"],
)
def test_unsupported_modules_fall_back(module, inputs):
    target = torch.zeros(4, dtype=torch.long)
    out_dim = module(inputs).shape[1]
    loss = lambda out, t: F.cross_entropy(out[:, : max(2, out_dim)], t, reduction="none")  # noqa: E731
    assert layerwise_per_sample_gradients(module, loss, (inputs, target)) is None
    # the mechanism still works, through vmap
    grads = private_gradient(module, loss, (inputs, target), clip=1.0, noise_std=0.0, denominator=4)
    assert set(grads) == {n for n, _ in module.named_parameters()}


def test_private_gradient_clips_each_record_through_the_layerwise_path():
    net = SPDNet(8, 3, dims=(5,), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    X, y = spd_batch(n=1)
    # one record, clip far below its gradient norm: the mean has exactly norm C / B
    grads = private_gradient(net, cross_entropy, (X, y), clip=1e-3, noise_std=0.0, denominator=1)
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grads.values()))
    torch.testing.assert_close(norm, torch.tensor(1e-3, dtype=torch.float64))


def test_spdnet_private_gradient_is_tangent_and_bounded():
    net = SPDNet(8, 3, dims=(5,), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    X, y = spd_batch(n=32)
    randomness = SeededRandomness(np.random.SeedSequence(1))
    W = net.features[1].weight.detach()
    clean = private_gradient(net, cross_entropy, (X, y), clip=1e-2, noise_std=0.0, denominator=32)
    # each of the 32 records contributes at most C / B: the mean has norm <= C
    assert torch.sqrt(sum(g.pow(2).sum() for g in clean.values())) <= 1e-2 + 1e-12
    noisy = private_gradient(net, cross_entropy, (X, y), clip=1e-2, noise_std=3.0, denominator=32,
                              randomness=randomness)
    G = noisy["features.1.weight"]
    # noise dominates and is tangent to the Stiefel manifold at W: WᵀG skew-symmetric
    assert G.norm() > 10 * clean["features.1.weight"].norm()
    torch.testing.assert_close(W.T @ G + G.T @ W, torch.zeros(5, 5, dtype=torch.float64), atol=1e-10, rtol=0)
