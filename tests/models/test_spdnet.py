import pytest
import torch
import torch.nn.functional as F

from skfedriem.datasets import make_spd_classification
from skfedriem.manifolds import Stiefel, manifold_of
from skfedriem.models import BiMap, LogReEig, SPDNet, TraceNormalize


@pytest.mark.parametrize(
    "channels, classes, dims, expected",
    [(22, 4, (16,), 900), (60, 7, (20,), 2677), (64, 2, (16,), 1298)],
    ids=["BNCI2014_001", "Weibo2014", "Cho2017"],
)
def test_parameter_counts_of_the_paper(channels, classes, dims, expected):
    net = SPDNet(channels, classes, dims)
    assert sum(p.numel() for p in net.parameters()) == expected


def test_architecture_and_manifolds():
    net = SPDNet(10, 3, dims=(8, 5), reeig_eps=1e-3)
    kinds = [type(layer).__name__ for layer in net.features]
    assert kinds == ["TraceNormalize", "BiMap", "ReEig", "BiMap", "LogReEig", "Vech"]
    for layer in net.features:
        if isinstance(layer, BiMap):
            assert isinstance(manifold_of(layer.weight), Stiefel)
            assert manifold_of(layer.weight).check_point(layer.weight.detach(), atol=1e-5)  # float32
    assert manifold_of(net.classifier.weight).__class__.__name__ == "Euclidean"
    assert net.classifier.in_features == 15


def test_forward_shapes_and_scale_invariance():
    X, _, _ = make_spd_classification(1, 12, 8, random_state=0)
    X = torch.as_tensor(X, dtype=torch.float64)
    net = SPDNet(8, 3, dims=(4,), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = net(X)
    assert out.shape == (12, 3)
    # per-trial trace normalisation: volts² or µV², same logits
    torch.testing.assert_close(net(1e-10 * X), out)
    raw = SPDNet(8, 3, dims=(4,), normalize=False, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert not torch.allclose(raw(1e-10 * X), raw(X))


def test_trace_normalize_uses_each_record_alone():
    X = torch.stack([torch.eye(3), 5 * torch.eye(3)])
    out = TraceNormalize()(X)
    torch.testing.assert_close(out, torch.eye(3).repeat(2, 1, 1))
    torch.testing.assert_close(TraceNormalize()(X[1:]), out[1:])


def test_same_generator_same_network():
    a = SPDNet(8, 2, generator=torch.Generator().manual_seed(3), dims=(4,))
    b = SPDNet(8, 2, generator=torch.Generator().manual_seed(3), dims=(4,))
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_bimap_per_sample_rule_is_the_gradient(gen):
    X, _, _ = make_spd_classification(1, 5, 6, random_state=1)
    X = torch.as_tensor(X, dtype=torch.float64)
    layer = BiMap(6, 3, generator=gen, dtype=torch.float64)
    G = torch.randn(5, 3, 3, generator=gen, dtype=torch.float64)
    rule = layer.per_sample_parameter_gradients(X, G)["weight"]
    for i in range(5):
        (g,) = torch.autograd.grad((layer(X[i]) * G[i]).sum(), layer.weight)
        torch.testing.assert_close(rule[i], g)


def test_gradients_are_finite_on_degenerate_inputs():
    net = SPDNet(6, 2, dims=(4,), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = torch.tensor([0, 1, 0])
    A = torch.randn(3, 6, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    inputs = {
        "identity": torch.eye(6, dtype=torch.float64).repeat(3, 1, 1),
        "rank_deficient": A @ A.mT + 1e-300 * torch.eye(6, dtype=torch.float64),
        "volts_squared": 1e-12 * torch.eye(6, dtype=torch.float64).repeat(3, 1, 1),
    }
    for name, X in inputs.items():
        net.zero_grad()
        F.cross_entropy(net(X), y).backward()
        for p in net.parameters():
            assert torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("dims", [(), (0,), (8, 10), (12,)])
def test_bad_dims_are_rejected(dims):
    with pytest.raises(ValueError, match="'dims'"):
        SPDNet(10, 2, dims=dims)


def test_log_re_eig_layer_repr():
    assert "eps=0.001" in repr(LogReEig(1e-3))
