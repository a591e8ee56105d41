import itertools

import pytest
import torch

from skfedriem.models import SPDNet
from skfedriem.privacy import DenseGradients, layerwise_per_sample_gradients, per_sample_gradients, record_norms
from skfedriem.federated.lockstep import stacked_module, supports_stacking
from skfedriem.privacy import ModelCapabilities, StackedDenseGradients, StackedLinear

from ...privacy.models import StiefelNet, cross_entropy, make_data


def _spd(n_records, n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n_records, n, 2 * n, generator=g, dtype=torch.float64)
    return A @ A.mT / (2 * n)


def test_record_norms_keep_leading_axes():
    rows = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    stacked = record_norms(rows)
    assert stacked.shape == (3, 5)
    assert all(torch.equal(stacked[k], record_norms(rows[k])) for k in range(3))


def test_stacked_dense_gradients_reduce_each_client_as_alone():
    g = torch.Generator().manual_seed(1)
    grads = {"a": torch.randn(3, 8, 4, 2, generator=g), "b": torch.randn(3, 8, 5, generator=g)}
    grads["a"][1, 2, 0, 0] = float("inf")  # a record that is dropped (weight 0) leaves its client's sum finite
    weights = torch.rand(3, 8, generator=g)
    weights[1, 2] = 0.0
    stacked = StackedDenseGradients(grads)
    sums = stacked.weighted_sum(weights)
    for k in range(3):
        alone = DenseGradients({name: v[k] for name, v in grads.items()})
        torch.testing.assert_close(stacked.norms()[k], alone.norms(), rtol=0, atol=0, equal_nan=True)  # bit for bit
        assert all(torch.equal(sums[name][k], s) for name, s in alone.weighted_sum(weights[k]).items())
    assert torch.isfinite(sums["a"][1]).all()


def test_vmap_over_clients_is_each_clients_per_sample_gradient():
    net = StiefelNet(seed=0)
    X, y = make_data(24, seed=3)
    g = torch.Generator().manual_seed(2)
    stacked = {name: p.detach() + 0.1 * torch.randn(2, *p.shape, generator=g, dtype=p.dtype)
               for name, p in net.named_parameters()}
    grads = per_sample_gradients(net, cross_entropy, (X.view(2, 12, -1), y.view(2, 12)), stacked=stacked)
    for k in range(2):
        with torch.no_grad():
            for name, p in net.named_parameters():
                p.copy_(stacked[name][k])
        alone = per_sample_gradients(net, cross_entropy, (X[12 * k: 12 * (k + 1)], y[12 * k: 12 * (k + 1)]))
        for name in alone:
            torch.testing.assert_close(grads[name][k], alone[name], rtol=1e-10, atol=1e-12)


def test_layer_rules_on_a_stacked_copy_are_each_clients():
    net = SPDNet(6, 3, dims=(4,), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    twin = stacked_module(net, 2)
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    X, y = _spd(10, seed=1).view(2, 5, 6, 6), torch.randint(3, (2, 5), generator=g)

    def stacked_loss(out, target):
        return cross_entropy(out.flatten(0, 1), target.flatten()).view(out.shape[:2])

    grads = layerwise_per_sample_gradients(twin, stacked_loss, (X, y), record_dims=2)
    for k in range(2):
        with torch.no_grad():
            for (name, p), q in zip(net.named_parameters(), twin.parameters()):
                p.copy_(q[k])
        alone = layerwise_per_sample_gradients(net, cross_entropy, (X[k], y[k]))
        for name in alone:
            torch.testing.assert_close(grads[name][k], alone[name], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("weight_stacked, bias", list(itertools.product([True, False], ["stacked", "shared", None])))
@pytest.mark.parametrize("width", [1, 3, 4])
def test_a_stacked_linear_applies_client_k_s_parameters_to_client_k_s_records(weight_stacked, bias, width):
    g = torch.Generator().manual_seed(5)
    K = 3
    weight = torch.randn(*((K,) if weight_stacked else ()), 2, 4, generator=g, dtype=torch.float64)
    linear = torch.nn.Linear(4, 2, bias=bias is not None).double()
    layer = StackedLinear(linear)
    layer.weight = torch.nn.Parameter(weight)
    if bias is not None:
        layer.bias = torch.nn.Parameter(torch.randn(*((K,) if bias == "stacked" else ()), 2, generator=g,
                                                    dtype=torch.float64))
    X = torch.randn(K, width, 4, generator=g, dtype=torch.float64)
    out = layer(X)
    for k in range(K):
        w = weight[k] if weight_stacked else weight
        b = None if bias is None else (layer.bias[k] if bias == "stacked" else layer.bias)
        torch.testing.assert_close(out[k], torch.nn.functional.linear(X[k], w, b))


def test_only_declared_classes_and_plain_layers_stack():
    assert supports_stacking(SPDNet(6, 2, dims=(4,)))
    assert not supports_stacking(StiefelNet())  # its own forward was not written for a client axis
    assert supports_stacking(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Identity()))
    assert supports_stacking(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh()))  # registered: element-wise
    assert not supports_stacking(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Dropout()))  # global RNG


class _MixesClientsSlightly(torch.nn.Module):
    """Claims stacking; stacked, each client's output takes a share ``mix`` of the next client's."""

    capabilities = ModelCapabilities(stacks=True)

    def __init__(self, mix: float, dtype=torch.float32):
        super().__init__()
        self.mix = mix
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, 4, dtype=dtype))

    def forward(self, X):
        if self.weight.dim() == 1:  # alone
            return X * self.weight
        out = X * self.weight.unsqueeze(1)  # stacked: (K, B, 4)
        return (1 - self.mix) * out + self.mix * out.roll(1, dims=0)


def _mean_loss(output, target):
    return ((output.sum(-1) - target) ** 2).view(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_check_catches_a_layer_that_mixes_clients_by_a_millionth(dtype):
    """rtol 1e-3 let a 1e-6 share of another client's forward pass as rounding."""
    from skfedriem.federated.lockstep import ClientStack

    g = torch.Generator().manual_seed(0)
    clients = [(torch.randn(12, 4, generator=g, dtype=dtype), torch.randn(12, generator=g, dtype=dtype))
               for _ in range(3)]
    honest = ClientStack(_MixesClientsSlightly(0.0, dtype), 3)
    honest.load({"weight": honest.module.weight.detach()})
    honest.verify(_mean_loss, clients)  # no mixing: passes
    stack = ClientStack(_MixesClientsSlightly(1e-6, dtype), 3)
    stack.load({"weight": stack.module.weight.detach()})
    with pytest.raises(ValueError, match="mixes clients"):
        stack.verify(_mean_loss, clients)


def test_the_cross_talk_check_compares_bit_patterns():
    from skfedriem.federated.lockstep.check import _identical

    big = torch.finfo(torch.float32).max
    assert not _identical(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not _identical(torch.tensor([float("inf")]), torch.tensor([big]))
    assert _identical(torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0]))


def test_a_sum_whose_terms_cancel_is_compared_at_the_terms_scale():
    """Two records' bias gradients of ±0.5 sum to rounding noise: a stack and a lone copy may differ there by a few
    ulps of the terms, which is not a layer computing something else (the README's grid search was refused so)."""
    from skfedriem.federated.lockstep.check import _close

    stacked, alone = torch.tensor([3e-8], dtype=torch.float32), torch.tensor([-2e-8], dtype=torch.float32)
    assert not _close(stacked, alone)  # at the sum's own scale
    assert _close(stacked, alone, scale=1.0)  # at the terms' scale (Σ ‖g_z‖ = 1)
    assert not _close(torch.tensor([0.01]), torch.tensor([0.0]), scale=1.0)  # a real difference still is one


class _MixingAffine(torch.nn.Module):
    """A layer that declares stacking, whose stacked rule for its bias mixes each client's records (``mean``:
    adds half the batch's mean; ``centred``: adds half the deviation from it, which leaves the sum unchanged)."""


    def __init__(self, mixing: str):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(3, 10, generator=generator) / 30000)
        self.bias = torch.nn.Parameter(torch.zeros(3))
        self.mixing = mixing

    def forward(self, X):
        if self.weight.dim() == 3:
            return torch.baddbmm(self.bias.unsqueeze(-2), X, self.weight.transpose(-1, -2))
        return X @ self.weight.T + self.bias

    def per_sample_parameter_gradients(self, X, G):
        grads = {"weight": G.unsqueeze(-1) * X.unsqueeze(-2), "bias": G}
        if X.dim() == 3:
            mean = G.mean(dim=1, keepdim=True)
            grads["bias"] = G + 0.5 * (mean if self.mixing == "mean" else G - mean)
        return grads

    capabilities = ModelCapabilities(per_record_rule=per_sample_parameter_gradients, rule_input_dims=1, stacks=True)


@pytest.mark.parametrize("mixing", ["mean", "centred"])
def test_a_layer_that_mixes_a_clients_records_is_refused_even_where_its_block_is_small(mixing):
    """The bias's gradients are tiny beside the weight's (records of norm ~3000): compared at all blocks' scale the
    mixing passed; each block at its own terms' scale, and each record on its own, it does not."""
    from skfedriem.federated.lockstep.stack import ClientStack

    torch.manual_seed(1)
    clients = [(1000.0 * torch.randn(8, 10), torch.randint(0, 3, (8,))) for _ in range(3)]
    stack = ClientStack(torch.nn.Sequential(_MixingAffine(mixing)), 3)
    with pytest.raises(ValueError, match="cannot run its clients in lockstep.*'0.bias'|couples the records"):
        stack.verify(lambda out, y: torch.nn.functional.cross_entropy(out, y, reduction="none"), clients)
