import numpy as np
import pytest
import torch
from pyriemann.tangentspace import TangentSpace as PyRiemannTangentSpace
from pyriemann.geometry.distance import distance_riemann

from skfedriem.datasets import make_spd_classification
from skfedriem.models import TangentSpace, TangentSpaceLogistic
from skfedriem.privacy.per_record.layerwise import supports_layerwise


def trace_normalised(X):
    return X * (X.shape[-1] / np.trace(X, axis1=-2, axis2=-1))[:, None, None]


def test_the_features_are_pyriemanns_tangent_vectors_at_the_given_point():
    X, _, _ = make_spd_classification(2, 20, 5, scale=1e-10, random_state=0)
    reference = make_spd_classification(1, 1, 5, random_state=1)[0][0]
    net = TangentSpaceLogistic(5, 2, torch.from_numpy(reference), dtype=torch.float64)
    ours = net.features(net.normalize(torch.from_numpy(X))).numpy()
    theirs = PyRiemannTangentSpace(metric="riemann").fit(trace_normalised(X))
    theirs.reference_ = trace_normalised(reference[None])[0]  # a fixed point instead of the training mean
    np.testing.assert_allclose(ours, theirs.transform(trace_normalised(X)), atol=1e-10)
    # the √2 weights make the Euclidean norm the affine-invariant distance to the reference
    distances = distance_riemann(trace_normalised(X), theirs.reference_)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), distances, rtol=1e-8)


def test_the_default_point_is_the_identity_where_the_map_is_the_matrix_logarithm():
    X, _, _ = make_spd_classification(1, 4, 3, random_state=0)
    features = TangentSpace(torch.eye(3, dtype=torch.float64))(torch.from_numpy(X)).numpy()
    w, v = np.linalg.eigh(X)
    logs = v @ (np.log(w)[..., None] * np.swapaxes(v, -1, -2))
    rows, cols = np.triu_indices(3)
    np.testing.assert_allclose(features, logs[:, rows, cols] * np.where(rows == cols, 1, np.sqrt(2)), atol=1e-12)


def test_starts_at_zero_without_touching_the_global_generator_and_has_per_record_gradient_rules():
    state = torch.get_rng_state()
    net = TangentSpaceLogistic(6, 3)
    assert torch.equal(torch.get_rng_state(), state)
    assert all((p == 0).all() for p in net.parameters()) and sum(p.numel() for p in net.parameters()) == 21 * 3 + 3
    assert supports_layerwise(net)
    assert torch.equal(net(torch.eye(6).expand(4, 6, 6)), torch.zeros(4, 3))


def test_a_reference_of_another_size_is_refused():
    with pytest.raises(ValueError, match=r"shape \(4, 4\)"):
        TangentSpaceLogistic(4, 2, torch.eye(3))


@pytest.mark.parametrize("reference, match", [
    (torch.full((3, 3), float("nan")), "non-finite"),
    (torch.tensor([[1.0, 0.5, 0], [0, 1, 0], [0, 0, 1]]), "not symmetric"),
    (-torch.eye(3), r"eigenvalues span \[-1"),
    (torch.diag(torch.tensor([1.0, 1.0, 1e-9])), r"condition number at most 2.9e\+03 in torch.float32"),
])
def test_a_reference_that_cannot_whiten_the_inputs_is_refused(reference, match):
    with pytest.raises(ValueError, match=match):
        TangentSpace(reference)
    TangentSpace(torch.diag(torch.tensor([1.0, 1.0, 1e-6], dtype=torch.float64)))  # fine in float64
