"""A client's step plan: validated instructions, and the one source of its sampler, its mechanism and its charge."""

import math

import numpy as np
import pytest

from skfedriem.exceptions import InvalidInstructionsError, PrivacyBudgetExceeded
from skfedriem.privacy import PrivacyAccountant, PrivacyBudget, RunningEpsilon, StepPlan, round_release

VALID = dict(n_records=50, batch_size=10, local_steps=3, clip=1.0, noise_std=0.5, sampling="fixed")


@pytest.mark.parametrize("field, value", [
    ("batch_size", 1.999), ("batch_size", 10.0), ("batch_size", 0), ("batch_size", 51), ("batch_size", True),
    ("batch_size", "10"), ("local_steps", 2.5), ("local_steps", 0), ("clip", 0.0), ("clip", -1.0),
    ("clip", math.nan), ("noise_std", -0.1), ("noise_std", math.inf), ("noise_std", math.nan), ("sampling", "shuffle"),
])
def test_instructions_it_cannot_run_as_stated_are_refused_by_name(field, value):
    with pytest.raises(InvalidInstructionsError, match=f"'{field}'"):
        StepPlan(**{**VALID, field: value})


def test_noise_without_clipping_is_refused():
    with pytest.raises(InvalidInstructionsError, match="clips nothing"):
        StepPlan(**{**VALID, "clip": math.inf})


@pytest.mark.parametrize("sampling", ["fixed", "poisson"])
def test_the_sampler_and_the_charge_come_from_the_same_numbers(sampling):
    plan = StepPlan(**{**VALID, "sampling": sampling})
    sampler = plan.sampler()
    assert (sampler.n_records, sampler.batch_size, sampler.denominator) == (50, 10, plan.denominator)
    assert sampler.sample_rate == plan.sample_rate == 0.2
    (entry,) = plan.release().history
    assert (entry.mu0, entry.sample_rate, entry.steps, entry.sampling) == (2 * 1.0 / (10 * 0.5), 0.2, 3, sampling)
    if sampling == "fixed":
        assert len(sampler.sample(np.random.default_rng(0))) == plan.batch_size


def test_a_model_with_a_smaller_diameter_is_charged_for_it():
    assert StepPlan(**VALID, diameter=math.sqrt(2)).mu0 == pytest.approx(math.sqrt(2) / (10 * 0.5))
    with pytest.raises(ValueError, match="diameter must be in"):
        StepPlan(**VALID, diameter=3.0)


def test_steps_without_noise_are_charged_as_infinite_loss():
    plan = StepPlan(**{**VALID, "noise_std": 0.0})
    assert not plan.private and math.isinf(plan.mu0)
    ledger = plan.release()
    assert ledger.steps == 3 and not ledger.private and math.isinf(ledger.get_epsilon(1e-5))
    assert math.isinf(RunningEpsilon(ledger, 1e-5)())
    unclipped = StepPlan(**{**VALID, "noise_std": 0.0, "clip": math.inf})
    assert math.isinf(unclipped.mu0)
    with pytest.raises(PrivacyBudgetExceeded, match="not private"):
        PrivacyBudget(100.0).charge(ledger, label="noiseless")
    assert math.isinf(PrivacyBudget(math.inf).charge(ledger, label="recorded"))


def test_a_private_ledger_with_one_noiseless_step_is_not_private():
    ledger = StepPlan(**VALID).release()
    epsilon = ledger.get_epsilon(1e-5)
    assert math.isfinite(epsilon)
    ledger.extend(StepPlan(**{**VALID, "noise_std": 0.0, "local_steps": 1}).release())
    assert math.isinf(ledger.get_epsilon(1e-5))
    restored = PrivacyAccountant.from_state_dict(ledger.state_dict())
    assert math.isinf(restored.get_epsilon(1e-5))


def test_a_round_is_charged_what_dominates_each_clients_steps():
    plans = [StepPlan(**{**VALID, "n_records": 50}), StepPlan(**{**VALID, "n_records": 25, "local_steps": 2}),
             StepPlan(**{**VALID, "noise_std": 1.0, "local_steps": 5})]
    (entry,) = round_release(plans).history
    assert (entry.mu0, entry.sample_rate, entry.steps) == (0.4, 0.4, 5)
    for plan in plans:  # the envelope is at least each client's own cost
        assert round_release([plan]).get_epsilon(1e-5) <= round_release(plans).get_epsilon(1e-5)
    mixed = round_release([StepPlan(**VALID), StepPlan(**{**VALID, "sampling": "poisson"})])
    assert sorted(e.sampling for e in mixed.history) == ["fixed", "poisson"]  # both, composed
