"""Re-centring at a public reference point: the map itself, SPDNet's closed-form gradients through it, and that a
re-centring that read the batch would be refused before any release."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from skfedriem.datasets import make_spd_classification
from skfedriem.models import SPDNet
from skfedriem.models.recentring import Recentre
from skfedriem.privacy import per_sample_gradients, private_gradient
from skfedriem.privacy.per_record.gradients import project_per_sample
from skfedriem.privacy.per_record.per_sample import trainable_parameters


def cross_entropy(output, target):
    return F.cross_entropy(output, target, reduction="none")


def covariances(n=12, channels=6, seed=0):
    X, y, _ = make_spd_classification(1, n, channels, n_classes=3, random_state=seed)
    return torch.as_tensor(X), torch.as_tensor(y)


def offset(channels=6, seed=1):
    """An SPD point far from the identity (a common part the records share)."""
    A = torch.randn(channels, channels, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return A @ A.mT + 0.5 * torch.eye(channels, dtype=torch.float64)


def test_the_reference_point_goes_to_the_identity_and_every_record_on_its_own():
    R, (X, _) = offset(), covariances()
    layer = Recentre(R)
    torch.testing.assert_close(layer(R[None])[0], torch.eye(6, dtype=torch.float64))
    torch.testing.assert_close(layer.whitener @ layer.whitener @ R, torch.eye(6, dtype=torch.float64))
    torch.testing.assert_close(layer(X[3:]), layer(X)[3:])  # no statistic of the batch
    with pytest.raises(ValueError, match="must be SPD"):
        Recentre(-R)


def test_spdnet_whitens_its_inputs_by_the_trace_normalised_reference():
    R, (X, _) = offset(), covariances()
    net = SPDNet(6, 3, dims=(4,), reference=R, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert net.reference_point().trace() == pytest.approx(6.0)  # trace-normalised like the inputs
    plain = SPDNet(6, 3, dims=(4,), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(net(R[None] * 7.0), plain(torch.eye(6, dtype=torch.float64)[None]))
    torch.testing.assert_close(plain.reference_point(), torch.eye(6, dtype=torch.float64))
    plain.at_reference(R)
    torch.testing.assert_close(plain(X), net(X))
    with pytest.raises(ValueError, match=r"shape \(6, 6\)"):
        plain.at_reference(torch.eye(5, dtype=torch.float64))


@pytest.mark.parametrize("dims", [(4,), (5, 3)])
def test_the_closed_form_through_the_recentring_is_torch_funcs_tangent_gradient(dims):
    R, batch = offset(), covariances()
    net = SPDNet(6, 3, dims=dims, reference=R, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    ours = net.per_record_tangent_gradients(cross_entropy, batch)
    assert ours is not None  # the closed form applies to the re-centred network as built
    reference = project_per_sample(per_sample_gradients(net, cross_entropy, batch), trainable_parameters(net))
    for name in reference:
        torch.testing.assert_close(ours[name], reference[name], rtol=1e-9, atol=1e-12)


class BatchRecentre(nn.Module):
    """A re-centring at the batch's own mean: one record moves every other record's input (the broken variant)."""

    def forward(self, X):
        eigenvalues, vectors = torch.linalg.eigh(X.mean(0))
        whitener = (vectors * eigenvalues.rsqrt()) @ vectors.mT
        return whitener @ X @ whitener


def test_a_recentring_that_reads_the_batch_is_refused_before_a_release():
    R, (X, y) = offset(), covariances()
    net = SPDNet(6, 3, dims=(4,), reference=R, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    private_gradient(net, cross_entropy, (X, y), clip=1.0, noise_std=0.5, denominator=12)  # the public point: runs
    net.recentre = BatchRecentre()
    assert net.per_record_tangent_gradients(cross_entropy, (X, y)) is None  # not the network as built
    with pytest.raises(ValueError, match="couples the records"):
        private_gradient(net, cross_entropy, (X, y), clip=1.0, noise_std=0.5, denominator=12)
