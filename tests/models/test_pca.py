"""PCAProjector's factored per-record gradients: clipped records stay in the clip ball."""

import math

import pytest
import torch

from skfedriem.models import PCAProjector
from skfedriem.privacy.gradients import record_norms
from skfedriem.privacy.mechanism import clip_factors


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
