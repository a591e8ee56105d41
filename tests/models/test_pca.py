"""PCAProjector's factored per-record gradients: clipped records stay in the clip ball."""

import math

import pytest
import torch

from skfedriem.models import PCAProjector
from skfedriem.privacy.per_record.gradients import record_norms
from skfedriem.privacy.mechanisms.mechanism import clip_factors


@pytest.mark.parametrize("kind", ["stiefel", "grassmann"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_weighted_factor_that_would_be_subnormal_drops_the_record(kind, dtype):
    """Review finding: w·a_i subnormal (w normal), times a huge b_j, scaled a record to 1.96 C at the smallest C."""
    info = torch.finfo(dtype)
    clip = math.sqrt(info.tiny)  # the smallest clip a step accepts
    smallest_subnormal = float(torch.tensor(0.0, dtype=dtype).nextafter(torch.tensor(1.0, dtype=dtype)))
    basis = torch.zeros(2, 1, dtype=dtype)
    basis[0, 0] = 1.0
    model = PCAProjector(2, 1, manifold=kind, dtype=dtype, basis=basis)
    small = 0.51 * smallest_subnormal / info.tiny / 2  # the clip factor is then 2 tiny: normal
    rounded_up = 0.51 * smallest_subnormal  # w·a_i, rounded to the smallest subnormal: 1.96 times its value
    big = clip / (2 * rounded_up) if kind == "stiefel" else clip / (math.sqrt(2) * rounded_up)
    X = torch.tensor([[big, small]] if kind == "stiefel" else [[small, big]], dtype=dtype)
    gradients = model.per_sample_tangent_gradients(X)
    factors = clip_factors(gradients.norms(), clip)
    assert float(factors[0]) >= info.tiny  # a normal factor: clip_factors alone does not drop it
    clipped = gradients.weighted_sum(factors)["weight"]
    assert float(record_norms(clipped.reshape(1, -1).double())[0]) <= clip * (1 + 1e-5)


@pytest.mark.parametrize("model", ["stiefel", "grassmann", "second moment"])
def test_each_scaled_record_in_closed_form_is_its_weighted_sum_alone(model):
    """Distributed noise rounds every clipped record: the closed form's rows (one call, K clients stacked) are what
    B weighted sums of one record each give (the generic route, 18x slower on Riemannian PCA), a record of factor
    0 holding inf a row of zeros."""
    from skfedriem.models import SecondMoment
    from skfedriem.privacy.per_record.gradients import PerRecordGradients

    g = torch.Generator().manual_seed(0)
    X = torch.randn(3, 7, 5, generator=g, dtype=torch.float64)
    X[1, 2, 0] = math.inf
    if model == "second moment":
        gradients = SecondMoment(5, dtype=torch.float64).capabilities.tangent_gradients(
            SecondMoment(5, dtype=torch.float64), None, (X,), record_dims=2, parameters=None)
    else:
        projector = PCAProjector(5, 2, manifold=model, dtype=torch.float64, generator=g)
        W = projector.weight.detach().expand(3, *projector.weight.shape)
        gradients = projector._tangent_gradients(None, (X,), record_dims=2, parameters={"weight": W})
    factors = clip_factors(gradients.norms(), 0.3)
    assert float(factors[1, 2]) == 0.0
    rows = gradients.scaled(factors)["weight"]
    generic = PerRecordGradients.scaled(gradients, factors)["weight"]
    assert rows.shape == (3, 7, *gradients.weighted_sum(factors)["weight"].shape[1:])
    torch.testing.assert_close(rows, generic, rtol=1e-12, atol=1e-15)
    assert torch.equal(rows[1, 2], torch.zeros_like(rows[1, 2]))
    torch.testing.assert_close(rows.sum(1), gradients.weighted_sum(factors)["weight"], rtol=1e-12, atol=1e-14)
