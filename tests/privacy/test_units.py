"""Subject-level steps: a subject moves a step's release by one clipped vector, however many trials it has."""

import math

import numpy as np
import pytest
import torch

from skfedriem.audit.mutations import subjects_clipped_by_record
from skfedriem.exceptions import InvalidInstructionsError
from skfedriem.federated.client import ClientRecipe
from skfedriem.federated.instructions import RoundInstructions, step_plan
from skfedriem.privacy import PrivateManifoldOptimizer
from skfedriem.privacy.mechanisms.mechanism import private_gradient
from skfedriem.privacy.mechanisms.units import RECORD, PrivacyUnit, SubjectIndex, split_units, step_diameter, unit_count

SUBJECT = PrivacyUnit("subject")

CLIP = 1.0


class Direction(torch.nn.Module):
    """A Euclidean weight whose per-record gradient is the record itself: a record sets its gradient."""

    def __init__(self, dim: int = 3) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(dim, dtype=torch.float64))

    def forward(self, x):
        return x @ self.w


def own_loss(output):
    return output


def federation(k_target: int, extreme: bool, n_other: int = 3, per_other: int = 4):
    """Records of ``n_other`` subjects of ``per_other`` records, and a target subject of ``k_target`` records
    pointing along e_0 (or, ``extreme``, far along −e_0: its replacement)."""
    rng = np.random.default_rng(0)
    others = rng.normal(size=(n_other * per_other, 3)) * 0.1
    target = np.tile([-1e6 if extreme else 1.0, 0.0, 0.0], (k_target, 1))
    X = torch.from_numpy(np.vstack([others, target]))
    segments = torch.from_numpy(np.concatenate([np.repeat(np.arange(n_other), per_other),
                                                np.full(k_target, n_other)]))
    return X, segments, n_other + 1


def release(X, segments, n_subjects, *, by_subject=True):
    module = Direction()
    return private_gradient(module, own_loss, (X,), clip=CLIP, noise_std=0.0, denominator=n_subjects,
                            segments=segments if by_subject else None)["w"]


@pytest.mark.parametrize("k", [1, 5, 40])
def test_one_subject_moves_a_step_by_at_most_its_clipped_vector_whatever_its_trials(k):
    """Replacing a subject's k trials by extreme ones moves the release by ≤ 2C / B (B subjects): the same bound for
    1, 5 or 40 trials, and reached (the bound is tight)."""
    honest, replaced = federation(k, extreme=False), federation(k, extreme=True)
    moved = float(torch.linalg.vector_norm(release(*honest) - release(*replaced)))
    bound = step_diameter(Direction(), SUBJECT) * CLIP / honest[2]
    assert moved <= bound * (1 + 1e-12)
    assert moved >= 0.999 * bound


@pytest.mark.parametrize("k", [5, 40])
def test_record_level_clipping_of_a_subject_exceeds_that_bound(k):
    """Clipping each trial (the record-level mechanism, and the mutation that clips a subject's trials one by one)
    lets the subject move the same step by about k times the subject-level bound."""
    honest, replaced = federation(k, extreme=False), federation(k, extreme=True)
    bound = 2 * CLIP / honest[2]
    by_record = float(torch.linalg.vector_norm(release(*honest, by_subject=False) - release(*replaced,
                                                                                             by_subject=False)))
    assert by_record > 0.9 * k * bound
    module, steps = Direction(), []
    for X, segments, n in (honest, replaced):
        step = PrivateManifoldOptimizer(module, torch.optim.SGD(module.parameters(), lr=1.0), loss_fn=own_loss,
                                        clip=CLIP, noise_std=0.0)
        with torch.no_grad():
            module.w.zero_()
        with subjects_clipped_by_record():
            step.step((X,), denominator=n, segments=segments)
        steps.append(-module.w.detach().clone())
    assert float(torch.linalg.vector_norm(steps[0] - steps[1])) > 0.9 * k * bound


def test_the_index_returns_every_record_of_each_sampled_subject():
    index = SubjectIndex(np.array([2, 0, 1, 0, 2, 2]))
    assert index.n_subjects == 3
    records, segments = index.records_of(np.array([2, 0]))
    assert sorted(records[segments == 0].tolist()) == [0, 4, 5] and sorted(records[segments == 1].tolist()) == [1, 3]
    empty, none = index.records_of(np.zeros(0, dtype=int))
    assert empty.size == 0 and none.size == 0


@pytest.mark.parametrize("codes", [np.array([0, 2]), np.array([-1, 0]), np.array([0.0, 1.0]), np.zeros(0, int)])
def test_subject_codes_that_skip_a_subject_or_are_not_integers_are_refused(codes):
    with pytest.raises(ValueError, match="subject codes"):
        SubjectIndex(codes)


def test_a_subject_level_client_counts_and_splits_its_subjects():
    data = (torch.zeros(5, 2), torch.zeros(5), torch.tensor([0, 0, 1, 1, 1]))
    assert unit_count(data, SUBJECT) == 2 and unit_count(data, RECORD) == 5
    records, index = split_units(data, SUBJECT)
    assert len(records) == 2 and index.n_subjects == 2
    with pytest.raises(ValueError, match="privacy_unit"):
        PrivacyUnit("person")


def test_a_client_refuses_a_round_planned_for_another_unit():
    module = Direction()
    instructions = RoundInstructions(lr=0.1, local_steps=1, batch_size=2, clip=1.0, noise_std=1.0, sampling="fixed",
                                     aggregation="projavg", privacy_unit="subject")
    with pytest.raises(InvalidInstructionsError, match="planned to protect each 'subject'"):
        step_plan(instructions, 10, module, RECORD)
    plan = step_plan(instructions, 4, module, SUBJECT)
    assert plan.sample_rate == 0.5 and math.isclose(plan.mu0, 2 * 1.0 / (2 * 1.0))
    with pytest.raises(InvalidInstructionsError, match="planned to protect each 'record'"):
        step_plan(RoundInstructions(**{**instructions.__dict__, "privacy_unit": "record"}), 4, module, SUBJECT)


def test_a_model_that_confines_its_records_gradients_is_charged_the_clip_ball_for_subjects():
    """A record-level model's smaller diameter (the second moments' √2) is not assumed for a subject's mean."""
    from skfedriem.models import SecondMoment

    assert step_diameter(SecondMoment(3), RECORD) == math.sqrt(2) and step_diameter(SecondMoment(3), SUBJECT) == 2


def test_subject_level_clients_never_run_in_lockstep():
    with pytest.raises(ValueError, match="lockstep"):
        ClientRecipe(Direction(), own_loss, lockstep=True, unit=SUBJECT)


def test_each_step_samples_fresh_uniform_subjects():
    """Every subject of a client is drawn at rate B / n over many steps, and a step's subjects are distinct."""
    from skfedriem.privacy.mechanisms.randomness import SeededRandomness
    from skfedriem.privacy.mechanisms.sampling import FixedSizeSampler

    index = SubjectIndex(np.repeat(np.arange(10), np.arange(1, 11)))  # subjects of 1 to 10 trials
    sampler, randomness = FixedSizeSampler(10, 3), SeededRandomness(np.random.SeedSequence(0))
    counts = np.zeros(10)
    for _ in range(4000):
        chosen = sampler.sample(randomness)
        records, segments = index.records_of(chosen)
        assert len(set(chosen.tolist())) == 3 and len(records) == index._counts[chosen].sum()
        counts[chosen] += 1
    assert np.allclose(counts / 4000, 0.3, atol=0.03)


# ---- subjects that give k records a round (records_per_subject), sampled and clipped as records


def test_every_subject_gives_exactly_k_of_its_own_records_a_round():
    """A subject with more than k records gives k distinct ones, drawn afresh each round (each record at rate
    k / n_s); one with fewer gives each of its own ⌊k / n_s⌋ times and some once more."""
    from skfedriem.privacy.mechanisms.randomness import SeededRandomness

    index, randomness = SubjectIndex(np.repeat(np.arange(4), [10, 2, 3, 4])), SeededRandomness(np.random.SeedSequence(0))
    owner = index.codes
    seen = np.zeros(10)
    for _ in range(3000):
        slots = index.slots(4, randomness)
        assert slots.shape == (16,)
        for j in range(4):
            assert (owner[slots[4 * j:4 * (j + 1)]] == j).all()
        first = slots[:4]
        assert len(set(first.tolist())) == 4
        seen[first] += 1
        assert np.bincount(slots[4:8], minlength=12)[10:12].tolist() == [2, 2]  # 2 records, twice each
        assert sorted(np.bincount(slots[8:12], minlength=15)[12:15].tolist()) == [1, 1, 2]
        assert sorted(slots[12:16].tolist()) == [15, 16, 17, 18]
    assert np.allclose(seen / 3000, 0.4, atol=0.03)


def _els_round(extreme: bool, n_target: int, k: int, seed: int = 0):
    """One noiseless full-batch step of a client whose steps sample k records of each subject; returns the step's
    mean (θ_1 = −mean from θ_0 = 0 at rate 1)."""
    from skfedriem.federated.client import ClientState
    from skfedriem.federated.client_round import run_client_round

    X, segments, n_subjects = federation(n_target, extreme=extreme)
    instructions = RoundInstructions(lr=1.0, local_steps=1, batch_size=k * n_subjects, clip=CLIP, noise_std=0.0,
                                     sampling="fixed", aggregation="projavg", privacy_unit="subject",
                                     records_per_subject=k)
    submission, _ = run_client_round(Direction(), {"w": torch.zeros(3, dtype=torch.float64)}, (X, segments),
                                     ClientState.fresh(np.random.SeedSequence(seed)), instructions,
                                     loss_fn=own_loss, unit=PrivacyUnit("subject", k))
    return -submission["w"], k * n_subjects


@pytest.mark.parametrize("n_target, k", [(1, 2), (5, 2), (40, 2), (40, 5)])
def test_a_subject_moves_a_step_of_sampled_records_by_k_clipped_records_whatever_its_trials(n_target, k):
    """Replacing a subject's trials (1, 5 or 40 of them) by extreme ones moves the step by at most k Δ C / B, B the
    k n records it samples: the k records it gives, each clipped, and no more (reached: the bound is tight)."""
    honest, b = _els_round(False, n_target, k)
    replaced, _ = _els_round(True, n_target, k)
    moved = float(torch.linalg.vector_norm(honest - replaced))
    bound = k * step_diameter(Direction(), PrivacyUnit("subject", k)) * CLIP / b
    assert moved <= bound * (1 + 1e-12)
    assert moved >= 0.999 * bound


def test_a_step_of_sampled_records_is_charged_for_groups_of_k():
    module = Direction()
    instructions = RoundInstructions(lr=0.1, local_steps=3, batch_size=4, clip=1.0, noise_std=1.0, sampling="fixed",
                                     aggregation="projavg", privacy_unit="subject", records_per_subject=3)
    plan = step_plan(instructions, 12, module, PrivacyUnit("subject", 3))
    (entry,) = plan.release().history
    assert (entry.group_size, entry.sample_rate, entry.steps) == (3, 4 / 12, 3)
    assert plan.mu0 == pytest.approx(step_diameter(module, RECORD) * 1.0 / 4)  # each record clipped alone
    assert entry.unit == "subject"  # the entry carries what it protects


def test_a_client_refuses_a_round_planned_for_another_count_of_records_per_subject():
    module = Direction()
    instructions = RoundInstructions(lr=0.1, local_steps=1, batch_size=2, clip=1.0, noise_std=1.0, sampling="fixed",
                                     aggregation="projavg", privacy_unit="subject", records_per_subject=3)
    with pytest.raises(InvalidInstructionsError, match="records_per_subject=3"):
        step_plan(instructions, 4, module, SUBJECT)
    with pytest.raises(InvalidInstructionsError, match="records_per_subject=3"):
        step_plan(instructions, 12, module, PrivacyUnit("subject", 2))
    with pytest.raises(ValueError, match="needs privacy_unit='subject'"):
        PrivacyUnit("record", 3)
    for bad in (0, 2.5, True, "3"):
        with pytest.raises(ValueError, match="records_per_subject"):
            PrivacyUnit("subject", bad)
    data = (torch.zeros(5, 3), torch.tensor([0, 0, 1, 1, 1]))
    assert unit_count(data, PrivacyUnit("subject", 3)) == 6 and ClientRecipe(
        module, own_loss, unit=PrivacyUnit("subject", 3)).n_units(data) == 6
