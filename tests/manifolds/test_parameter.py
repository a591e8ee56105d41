import copy
import io
import pickle

import pytest
import torch

from skfedriem.manifolds import Euclidean, ManifoldParameter, Stiefel, manifold_of, project_parameters_


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        St = Stiefel(4, 2)
        self.W = ManifoldParameter(St.random_point(generator=torch.Generator().manual_seed(0)), St)
        self.b = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))


@pytest.mark.parametrize(
    "roundtrip",
    [
        copy.deepcopy,
        lambda m: pickle.loads(pickle.dumps(m)),
        lambda m: torch.load(io.BytesIO(_save(m)), weights_only=False),
    ],
    ids=["deepcopy", "pickle", "torch.save"],
)
def test_manifold_tag_survives_copies(roundtrip):
    net = Net()
    other = roundtrip(net)
    assert isinstance(other.W, ManifoldParameter)
    assert other.W.manifold == Stiefel(4, 2)
    torch.testing.assert_close(other.W.data, net.W.data)
    assert other.W.data_ptr() != net.W.data_ptr()


def _save(module):
    buffer = io.BytesIO()
    torch.save(module, buffer)
    return buffer.getvalue()


def test_untagged_parameters_are_euclidean():
    net = Net()
    assert manifold_of(net.b) == Euclidean(2)
    assert manifold_of(net.W) == Stiefel(4, 2)


def test_project_parameters_in_place():
    net = Net()
    with torch.no_grad():
        net.W.add_(0.1)
        net.b.add_(0.1)
    project_parameters_(net)
    assert Stiefel(4, 2).check_point(net.W.data, atol=1e-12)
    torch.testing.assert_close(net.b.data, torch.full((2,), 0.1, dtype=torch.float64))


def test_rejects_mismatched_shape_and_non_manifold():
    with pytest.raises(ValueError, match="shape"):
        ManifoldParameter(torch.zeros(3, 3), Stiefel(4, 2))
    with pytest.raises(TypeError, match="Manifold"):
        ManifoldParameter(torch.zeros(3), "sphere")
