"""The one-shot PCA release's sensitivity: clipped rank-one moments are at most √2 C apart, and that is attained."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from skfedriem.models import SecondMoment
from skfedriem.privacy import clipped_gradient_diameter
from skfedriem.privacy.mechanisms.mechanism import clip_factors


def clipped_sum(X: np.ndarray, clip: float) -> torch.Tensor:
    """Σ_x clip_C(∇ −⟨A, x xᵀ⟩) exactly as the private step computes it."""
    grads = SecondMoment(X.shape[1]).per_sample_tangent_gradients(torch.from_numpy(X))
    return grads.weighted_sum(clip_factors(grads.norms(), clip))["weight"]


def replacement_distance(records: np.ndarray, x: np.ndarray, y: np.ndarray, clip: float) -> float:
    """‖Σ clip(g) over (records, x) − over (records, y)‖_F: what replacing one record x by y moves."""
    return float(torch.linalg.matrix_norm(clipped_sum(np.vstack([records, x]), clip)
                                          - clipped_sum(np.vstack([records, y]), clip)))


def test_the_model_declares_root_two():
    assert clipped_gradient_diameter(SecondMoment(3)) == pytest.approx(math.sqrt(2))
    assert clipped_gradient_diameter(torch.nn.Linear(2, 2)) == 2.0  # gradients that may point anywhere


@pytest.mark.parametrize("clip", [0.5, 1.0, 4.0])
def test_orthogonal_records_of_norm_root_c_attain_it(clip):
    records = np.zeros((3, 4))
    x, y = np.zeros(4), np.zeros(4)
    x[0], y[1] = 10 * math.sqrt(clip), 10 * math.sqrt(clip)  # far above the clip: scaled to ‖x‖² = C
    assert replacement_distance(records, x, y, clip) == pytest.approx(math.sqrt(2) * clip, rel=1e-12)


finite = st.floats(-1e6, 1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(records=arrays(np.float64, (3, 4), elements=finite), x=arrays(np.float64, 4, elements=finite),
       y=arrays(np.float64, 4, elements=finite), clip=st.floats(1e-3, 1e3))
def test_no_pair_of_records_is_further_apart(records, x, y, clip):
    assert replacement_distance(records, x, y, clip) <= math.sqrt(2) * clip * (1 + 1e-9)


@pytest.mark.parametrize("case", ["parallel", "opposite", "one huge", "tiny", "nan", "inf"])
def test_adversarial_pairs_stay_within_it(case):
    clip = 1.0
    rng = np.random.default_rng(0)
    records = rng.normal(size=(5, 3))
    x = np.array([3.0, 4.0, 0.0])
    y = {"parallel": 2 * x, "opposite": -x, "one huge": np.array([0.0, 1e300, 0.0]), "tiny": np.full(3, 1e-300),
         "nan": np.array([np.nan, 0.0, 0.0]), "inf": np.array([0.0, 0.0, np.inf])}[case]
    distance = replacement_distance(records, x, y, clip)
    assert np.isfinite(distance) and distance <= math.sqrt(2) * clip * (1 + 1e-12)
    # a dropped (non-finite) record is at distance ‖x‖² <= C from the other; never the full 2C
    if case in ("nan", "inf"):
        assert distance == pytest.approx(clip)


def _orthogonal_pair_delta(eps: float, r: float, q: float, h: float = 0.01, half_width: float = 8.0) -> float:
    """δ(ε) of (1−q)N(0, I)+qN(a, I) against (1−q)N(0, I)+qN(b, I), a ⟂ b, |a| = |b| = r, by 2-D quadrature."""
    xs = np.arange(-half_width, r + half_width, h)
    x, y = np.meshgrid(xs, xs, indexing="ij")
    base = np.exp(-(x**2 + y**2) / 2)
    p = (1 - q) * base + q * np.exp(-((x - r) ** 2 + y**2) / 2)
    other = (1 - q) * base + q * np.exp(-(x**2 + (y - r) ** 2) / 2)
    return float(np.maximum(0.0, p - math.exp(eps) * other).sum() * h * h / (2 * math.pi))


@pytest.mark.parametrize("q, signal", [(0.1, 2.0)])
def test_under_poisson_sampling_the_charge_covers_orthogonal_records(q, signal):
    """Review finding: with Poisson batches the accountant compares a record with no record, at distance up to C.

    Two orthogonal clipped records z, w (‖z‖² = ‖w‖² = C, the rest zero) give the mixtures above with
    r = C / (B σ); the step must be charged at least their ε, which a charge at the diameter √2 C misses.
    """
    from skfedriem.privacy import StepPlan

    batch, clip = 10, 1.0
    sigma = clip / (batch * signal)
    plan = StepPlan(n_records=int(batch / q), batch_size=batch, local_steps=1, clip=clip, noise_std=sigma,
                    sampling="poisson", diameter=math.sqrt(2))
    charged = plan.release().get_epsilon(1e-5)
    assert _orthogonal_pair_delta(charged, signal, q) <= 1e-5 * 1.05
    at_diameter = StepPlan(n_records=int(batch / q), batch_size=batch, local_steps=1, clip=clip, noise_std=sigma,
                           sampling="fixed", diameter=math.sqrt(2)).mu0  # what the fixed-size accountant takes
    from skfedriem.privacy import PrivacyAccountant

    undercharged = PrivacyAccountant()
    undercharged.step(mu0=at_diameter, sample_rate=q, sampling="poisson")
    assert _orthogonal_pair_delta(undercharged.get_epsilon(1e-5), signal, q) > 5e-5  # the old charge: caught
