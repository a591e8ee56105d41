import pytest
import torch
import torch.nn.functional as F

from skfedriem.models import EEGNet, TrialStandardize
from skfedriem.privacy import layerwise_per_sample_gradients, per_sample_gradients


def trials(gen, n=6, channels=4, times=64):
    return 1e-5 * torch.randn(n, channels, times, generator=gen, dtype=torch.float64)


def test_shapes_and_scale_invariance(gen):
    X = trials(gen)
    net = EEGNet(4, 64, 3, F1=4, D=2, F2=4, kernel_length=16, generator=torch.Generator().manual_seed(0),
                 dtype=torch.float64)
    out = net(X)
    assert out.shape == (6, 3)
    torch.testing.assert_close(net(1e6 * X), out)  # volts or microvolts: same logits
    assert not any(isinstance(m, torch.nn.BatchNorm2d) or isinstance(m, torch.nn.Dropout) for m in net.modules())


def test_trial_standardize_uses_each_trial_alone(gen):
    X = trials(gen, n=3)
    out = TrialStandardize()(X)
    torch.testing.assert_close(out.std(dim=(-2, -1)), torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(TrialStandardize()(X[1:]), out[1:])


def test_initialisation_is_seeded_and_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    a = EEGNet(4, 64, 2, generator=torch.Generator().manual_seed(1))
    b = EEGNet(4, 64, 2, generator=torch.Generator().manual_seed(1))
    assert torch.equal(torch.get_rng_state(), state)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_per_sample_gradients_by_vmap_match_a_loop(gen):
    X = trials(gen, n=5)
    y = torch.tensor([0, 1, 0, 1, 1])
    net = EEGNet(4, 64, 2, F1=2, D=2, F2=4, kernel_length=8, generator=gen, dtype=torch.float64)
    loss = lambda out, t: F.cross_entropy(out, t, reduction="none")  # noqa: E731
    assert layerwise_per_sample_gradients(net, loss, (X, y)) is None  # convolutions: the vmap path
    grads = per_sample_gradients(net, loss, (X, y))
    for i in range(5):
        net.zero_grad()
        loss(net(X[i : i + 1]), y[i : i + 1]).sum().backward()
        for name, p in net.named_parameters():
            torch.testing.assert_close(grads[name][i], p.grad)


def test_too_short_trials_are_rejected():
    with pytest.raises(ValueError, match="n_times >= 32"):
        EEGNet(4, 16, 2)


def test_spatial_first_evaluation_equals_the_layer_order_of_eegnet(gen):
    X = trials(gen, n=3, channels=5, times=70)
    net = EEGNet(5, 70, 2, F1=3, D=2, F2=4, kernel_length=9, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        net.spatial.bias.copy_(torch.randn(6, generator=gen, dtype=torch.float64))
    x = net.standardize(X)
    reference = net.spatial(net.temporal(x.unsqueeze(1)))  # the original order: temporal, then spatial
    torch.testing.assert_close(net._temporal_then_spatial(x), reference)


@pytest.mark.parametrize("times, taps", [(64, 16), (70, 9), (385, 64), (40, 1)])
def test_the_temporal_filter_by_fft_is_torchs_depthwise_convolution(gen, times, taps):
    from skfedriem.models.eegnet import depthwise_correlation

    z = torch.randn(3, 5, times, generator=gen, dtype=torch.float64)
    kernel = torch.randn(5, taps, generator=gen, dtype=torch.float64)
    expected = F.conv1d(z, kernel.unsqueeze(1), padding=taps // 2, groups=5)
    torch.testing.assert_close(depthwise_correlation(z, kernel, taps // 2), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("normalization, norms", [("group", 2), ("layer", 2), (None, 0)])
def test_each_record_is_normalised_on_its_own_between_the_layers(gen, normalization, norms):
    """Group (or layer) normalisation reads one record's feature maps: a record's logits do not depend on the batch,
    and the per-record gradients are those of each record alone."""
    net = EEGNet(4, 64, 2, F1=2, D=2, F2=4, kernel_length=8, normalization=normalization, generator=gen,
                 dtype=torch.float64)
    assert sum(isinstance(m, torch.nn.GroupNorm) for m in net.modules()) == norms
    X, y = trials(gen, n=5), torch.tensor([0, 1, 0, 1, 1])
    torch.testing.assert_close(net(X)[2:], net(X[2:]))
    loss = lambda out, t: F.cross_entropy(out, t, reduction="none")  # noqa: E731
    grads = per_sample_gradients(net, loss, (X, y))
    net.zero_grad()
    loss(net(X[3:4]), y[3:4]).sum().backward()
    for name, p in net.named_parameters():
        torch.testing.assert_close(grads[name][3], p.grad)
    with pytest.raises(ValueError, match="'normalization' parameter must be one of"):
        EEGNet(4, 64, 2, normalization="batch")


def test_per_channel_scaling_centres_and_scales_each_channel(gen):
    X = trials(gen, n=3) * torch.tensor([1.0, 10.0, 100.0, 0.1], dtype=torch.float64)[:, None] + 3.0
    out = TrialStandardize(per_channel=True)(X)
    torch.testing.assert_close(out.std(dim=-1), torch.ones(3, 4, dtype=torch.float64))
    torch.testing.assert_close(out.mean(dim=-1), torch.zeros(3, 4, dtype=torch.float64), rtol=0, atol=1e-9)


def test_the_network_on_standardised_trials_is_the_same_network(gen):
    """The clients standardise each trial once per fit and train the rest: the same function, the same parameters."""
    from skfedriem.privacy.per_record.capabilities import capabilities_of

    net = EEGNet(4, 64, 2, F1=2, D=2, F2=4, kernel_length=8, generator=gen, dtype=torch.float64)
    mapping, head = capabilities_of(net).fixed_features(net)
    X = trials(gen, n=4)
    torch.testing.assert_close(head(mapping(X)), net(X))
    assert dict(head.named_parameters()).keys() == dict(net.named_parameters()).keys()
    assert all(a is b for a, b in zip(head.parameters(), net.parameters()))
    assert isinstance(net.standardize, TrialStandardize)  # the whole network keeps its own map


@pytest.mark.parametrize("normalization", ["group", "layer", None])
def test_the_private_step_runs_each_normalisation_and_refuses_batch_normalisation(gen, normalization):
    """The private step's records-apart check passes the per-record normalisations and catches batch
    normalisation put in their place (the broken variant)."""
    from skfedriem.privacy import private_gradient

    net = EEGNet(4, 64, 2, F1=2, D=2, F2=4, kernel_length=8, normalization=normalization, generator=gen,
                 dtype=torch.float64)
    X, y = trials(gen, n=6), torch.tensor([0, 1, 0, 1, 1, 0])
    loss = lambda out, t: F.cross_entropy(out, t, reduction="none")  # noqa: E731
    private_gradient(net, loss, (X, y), clip=1.0, noise_std=0.5, denominator=6)
    net.spatial_norm = torch.nn.BatchNorm2d(4, dtype=torch.float64)
    with pytest.raises(ValueError, match="couples the records"):
        private_gradient(net, loss, (X, y), clip=1.0, noise_std=0.5, denominator=6)
