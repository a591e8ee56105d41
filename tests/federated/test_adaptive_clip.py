"""``clip="auto"``: the noisy count each step releases, how it is charged, and the clip it steers."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from skfedriem import FederatedSPDNetClassifier
from skfedriem.datasets import make_spd_classification
from skfedriem.exceptions import InvalidInstructionsError
from skfedriem.federated import FederationSettings
from skfedriem.federated.adaptive_clip import COUNT_SHARE, clipped_fraction, next_clip, split_mu0
from skfedriem.federated.plan import plan_run
from skfedriem.federated.resume import check_resume
from skfedriem.privacy import StepPlan
from skfedriem.privacy.mechanisms.mechanism import noisy_clipped_count, private_gradient
from skfedriem.privacy.mechanisms.randomness import SeededRandomness

from ..privacy.prv_reference import SymmetrisedSubsampledGaussian, prv_epsilon

C, B, SIGMA = 1.0, 8, 0.05
SIGMA_B = split_mu0(2 * C / (B * SIGMA) / math.sqrt(1 - COUNT_SHARE))[1]  # the count's planned share of μ0


class Linear(torch.nn.Module):
    """A Euclidean model whose per-record gradient is the record itself (loss −⟨w, x⟩)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(d, dtype=torch.float64))

    def forward(self, x):
        return -(x @ self.w)


def _release(records: torch.Tensor) -> tuple[np.ndarray, float]:
    """The noise-free part of one step's release: the clipped mean gradient and the centred count."""
    module = Linear(records.shape[1])
    mean = private_gradient(module, lambda out: out, (records,), clip=C, noise_std=0.0, denominator=B)["w"]
    norms = torch.linalg.vector_norm(records, dim=1)
    zero = SeededRandomness(np.random.SeedSequence(0))
    count = noisy_clipped_count(norms, C, 1e-300, zero)  # noise of std 1e-300: the count itself
    return mean.numpy(), count


def _normalised_shift(batch: torch.Tensor, other: torch.Tensor) -> float:
    """‖(Δ mean / σ, Δ count / σ_b)‖ between two neighbouring batches: the Gaussian mechanism's μ for them."""
    (m1, c1), (m2, c2) = _release(batch), _release(other)
    return math.hypot(np.linalg.norm(m1 - m2) / SIGMA, (c1 - c2) / SIGMA_B)


def _plan(count_noise_std: float = SIGMA_B) -> StepPlan:
    return StepPlan(n_records=100, batch_size=B, local_steps=1, clip=C, noise_std=SIGMA, sampling="fixed",
                    count_noise_std=count_noise_std)


def test_the_worst_pair_of_records_reaches_the_charged_mu0_and_the_count_blind_charge_misses_it():
    """A record of norm C (unclipped) replaced by its opposite at norm 10 C (clipped): both parts move fully."""
    rng = np.random.default_rng(0)
    batch = torch.from_numpy(rng.normal(size=(B, 5)) * 0.01)
    worst = torch.zeros(5, dtype=torch.float64)
    worst[0] = C
    batch[0], other = worst, batch.clone()
    other[0] = -10 * worst
    shift = _normalised_shift(batch, other)
    assert shift == pytest.approx(_plan().mu0, rel=1e-9)  # = √((2C/(Bσ))² + (1/σ_b)²)
    assert shift > _plan(count_noise_std=0.0).mu0 * 1.01  # charging the gradient alone would understate it


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.01, 5.0), st.floats(0.01, 5.0))
def test_no_pair_of_neighbouring_batches_moves_the_release_by_more_than_mu0(seed, scale, replaced):
    rng = np.random.default_rng(seed)
    batch = torch.from_numpy(rng.normal(size=(B, 4)) * scale / 2)
    other = batch.clone()
    other[int(rng.integers(B))] = torch.from_numpy(rng.normal(size=4) * replaced)
    assert _normalised_shift(batch, other) <= _plan().mu0 * (1 + 1e-9)


def test_the_count_noise_has_the_planned_std():
    norms = torch.tensor([0.5, 2.0, 0.9, 1.5, 0.1, np.inf, 0.99, 3.0], dtype=torch.float64)
    exact = (norms <= 1.0).sum().item() - len(norms) / 2  # 4 unclipped of 8 (inf counts as clipped)
    randomness = SeededRandomness(np.random.SeedSequence(1))
    draws = np.array([noisy_clipped_count(norms, 1.0, SIGMA_B, randomness) for _ in range(4000)]) - exact
    assert abs(draws.mean()) < 4 * SIGMA_B / math.sqrt(4000)
    assert draws.std() == pytest.approx(SIGMA_B, rel=0.05)


def test_the_split_spends_the_planned_share_on_the_count_and_the_whole_mu0_at_the_target():
    settings = FederationSettings(eps=4.0, batch_size=10, n_rounds=20, local_steps=3)
    fixed = plan_run([100, 150], ["a", "b"], settings)
    adaptive = plan_run([100, 150], ["a", "b"], settings.replace(clip="auto"))
    assert adaptive.mu0 == fixed.mu0  # one calibration: the same (ε, δ) for the pair
    mu_g, sigma_b = split_mu0(adaptive.mu0)
    assert (adaptive.gradient_mu0, adaptive.count_noise_std) == (mu_g, sigma_b)
    assert (1 / sigma_b) ** 2 == pytest.approx(COUNT_SHARE * adaptive.mu0 ** 2)
    assert adaptive.noise_std == pytest.approx(fixed.noise_std / math.sqrt(1 - COUNT_SHARE))
    step = StepPlan(n_records=100, batch_size=10, local_steps=3, clip=1.0, noise_std=adaptive.noise_std,
                    sampling="fixed", count_noise_std=sigma_b)
    assert step.mu0 == pytest.approx(adaptive.mu0, rel=1e-12)
    # what every ledger charges, against an independent accountant of the joint mechanism (prv-accountant)
    ledger = step.release()
    ledger.step(mu0=step.mu0, sample_rate=step.sample_rate, num_steps=20 * 3 - 3)
    low, _, up = prv_epsilon(SymmetrisedSubsampledGaussian(0.1, step.mu0), 60, 1e-5)
    assert low <= ledger.get_epsilon(1e-5) <= up * 1.01
    assert ledger.get_epsilon(1e-5) <= 4.0 * (1 + 1e-9)


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, "4"])
def test_a_count_noise_a_client_cannot_run_is_refused(value):
    with pytest.raises(InvalidInstructionsError, match="count_noise_std"):
        _plan(count_noise_std=value)
    with pytest.raises(InvalidInstructionsError, match="clips nothing"):
        StepPlan(n_records=10, batch_size=2, local_steps=1, clip=math.inf, noise_std=0.0, sampling="fixed",
                 count_noise_std=1.0)


@pytest.fixture(scope="module")
def federation():
    return make_spd_classification(n_clients=3, n_matrices_per_client=60, n_channels=4, random_state=0)


def test_an_adaptive_fit_is_charged_at_its_target_and_its_clip_follows_the_released_fractions(federation):
    X, y, groups = federation
    fitted = {clip: FederatedSPDNetClassifier(eps=4.0, clip=clip, n_rounds=12, random_state=0).fit(X, y, groups=groups)
              for clip in ("auto", 1.0)}
    auto, fixed = fitted["auto"], fitted[1.0]
    assert auto.epsilon_ <= 4.0 and auto.epsilon_ == pytest.approx(fixed.epsilon_, rel=1e-9)
    # the reference release, then every round charged at the planned step (one entry of 12 steps)
    assert auto.mu0_ == pytest.approx(fixed.mu0_, rel=1e-9) and [e.steps for e in auto.ledger_.history] == [1, 12]
    assert auto.noise_std_ == pytest.approx(fixed.noise_std_ / math.sqrt(1 - COUNT_SHARE))
    rows = auto.history_
    assert rows[0]["clip"] == 1.0 and all("clip" not in r for r in fixed.history_)
    for before, after in zip(rows, rows[1:]):
        assert after["clip"] == pytest.approx(next_clip(before["clip"], before["clipped_fraction"], 0.5))


def test_the_clip_moves_towards_the_quantile(federation):
    X, y, groups = federation
    clips = {q: FederatedSPDNetClassifier(eps=10.0, clip="auto", clip_quantile=q, n_rounds=30, random_state=0)
             .fit(X, y, groups=groups).history_[-1]["clip"] for q in (0.05, 0.95)}
    assert clips[0.05] < 1.0 < clips[0.95]  # clip fewer records: a larger C; more: a smaller one


def test_one_client_cannot_throw_the_clip_away():
    """A faulty or hostile reply (a huge, tiny or non-finite fraction) moves the clip by a bounded factor."""
    from skfedriem.federated.adaptive_clip import CLIP_LR, CLIP_RANGE, FRACTION_RANGE
    from skfedriem.federated.instructions import CLIPPED_FRACTION

    def replies(*values):
        return {i: ({CLIPPED_FRACTION: torch.tensor(v, dtype=torch.float64)}, 0.0) for i, v in enumerate(values)}

    fraction = clipped_fraction(sub for sub, _ in replies(-1e4, 0.5, 0.5, math.nan).values())
    assert fraction == pytest.approx((FRACTION_RANGE[0] + 1.0) / 3)  # clamped, the NaN left out
    worst = next_clip(1.0, FRACTION_RANGE[0], 0.5)
    assert worst == pytest.approx(math.exp(CLIP_LR * 1.5))
    assert next_clip(1.0, -1e300, 0.5) == CLIP_RANGE[1] and next_clip(1.0, 1e300, 0.5) == CLIP_RANGE[0]


def test_a_resume_with_another_quantile_or_step_is_refused(federation, tmp_path):
    from skfedriem.federated import TrainingState

    X, y, groups = federation
    est = FederatedSPDNetClassifier(eps=4.0, clip="auto", n_rounds=3, random_state=0)
    trainer = est.make_trainer(X.shape[1:], classes=np.unique(y), client_sizes=[60, 60, 60])
    trainer.pricing.planned_release([60, 60, 60])
    record = trainer.pricing.record()
    for change in ({"clip_quantile": 0.9}, {"lr": 0.3}):
        other = est.set_params(**change).make_trainer(X.shape[1:], classes=np.unique(y),
                                                      client_sizes=[60, 60, 60])
        other.pricing.planned_release([60, 60, 60])
        with pytest.raises(ValueError, match=f"Cannot resume.*{next(iter(change))}"):
            check_resume(TrainingState(1, {}, {"history": []}, [], None, False, plan=record), other.pricing.record())
        est.set_params(clip_quantile=0.5, lr="auto")
