"""The fast, seeded audit of whole FederatedPCA runs: honest runs pass, broken ones are caught."""

import pytest

from skfedriem.audit import audit_federated_pca, audit_off_manifold_server, audit_subject_level
from skfedriem.audit.mutations import (noise_projected_alone, noise_scaled, subjects_charged_as_records,
                                       subjects_clipped_by_record)

RUNS = 150


@pytest.mark.slow
@pytest.mark.parametrize("sampling, n_records", [("fixed", 2), ("poisson", 4)])
def test_honest_runs_stay_below_the_certified_epsilon(sampling, n_records):
    result = audit_federated_pca(4.0, sampling=sampling, n_records=n_records, n_runs=RUNS, random_state=0)
    assert result.epsilon_certified <= 4.0 and result.steps == 10 and result.n_runs == RUNS
    assert result.sample_rate == 2 / n_records
    assert result.epsilon_lower_bound <= result.epsilon_certified
    assert result.epsilon_lower_bound_any <= result.epsilon_lower_bound
    if n_records == 2:  # at q = 1 the audit is tight enough to see most of it
        assert result.epsilon_lower_bound > 0.25 * result.epsilon_certified


@pytest.mark.slow
@pytest.mark.parametrize("factor", [0.0, 0.5])
def test_runs_with_less_noise_than_charged_are_caught(factor):
    with noise_scaled(factor):
        result = audit_federated_pca(4.0, n_runs=RUNS, random_state=0)
    assert result.violated and result.epsilon_lower_bound > 1.4 * result.epsilon_certified


def test_a_server_off_the_manifold_is_caught_on_the_old_step_only():
    with noise_projected_alone():
        old = audit_off_manifold_server(n_runs=RUNS, random_state=0)
    assert old.violated and old.epsilon_lower_bound > 5 * old.epsilon_certified
    new = audit_off_manifold_server(n_runs=RUNS, random_state=0)
    assert not new.violated


@pytest.mark.slow
def test_the_one_shot_release_is_tight_at_its_root_two_sensitivity():
    """The default solver's audit: honest runs pass; a release calibrated to C instead of √2 C is caught."""
    import math

    from skfedriem.audit import audit_covariance_release

    honest = audit_covariance_release(4.0, n_runs=300, random_state=0)
    assert not honest.violated and honest.epsilon_lower_bound > 0.4 * honest.epsilon_certified
    with noise_scaled(1 / math.sqrt(2)):
        broken = audit_covariance_release(4.0, n_runs=300, random_state=0)
    assert broken.violated


@pytest.mark.slow
def test_a_subject_level_run_holds_its_epsilon_for_a_whole_subject():
    result = audit_subject_level(4.0, n_trials=5, n_runs=RUNS, random_state=0)
    assert result.epsilon_certified <= 4.0 and not result.violated
    assert result.epsilon_lower_bound > 0.25 * result.epsilon_certified  # q = 1: the audit sees most of it


@pytest.mark.slow
def test_a_record_level_run_fails_a_subject_level_claim():
    """The same ε for one trial: a subject of 5 trials is distinguished far beyond it."""
    result = audit_subject_level(4.0, privacy_unit="record", n_trials=5, n_runs=RUNS, random_state=0)
    assert result.violated and result.epsilon_lower_bound > 2 * result.epsilon_certified


@pytest.mark.slow
def test_clipping_a_subjects_trials_one_by_one_is_caught():
    with subjects_clipped_by_record():
        result = audit_subject_level(4.0, n_trials=5, n_runs=RUNS, random_state=0)
    assert result.violated and result.epsilon_lower_bound > 2 * result.epsilon_certified


@pytest.mark.slow
def test_k_records_of_each_subject_hold_the_subject_level_epsilon_and_charging_them_as_one_is_caught():
    """records_per_subject=5: a subject's 5 trials are its 5 records of every step, each clipped alone and charged by
    group privacy over 5 (at q = 1 that is tight: a Gaussian of 5 μ0); calibrated and charged as one record, the same
    subject is distinguished far beyond the ε the run reports."""
    honest = audit_subject_level(4.0, records_per_subject=5, n_trials=5, n_runs=RUNS, random_state=0)
    assert honest.epsilon_certified <= 4.0 and not honest.violated
    assert honest.epsilon_lower_bound > 0.25 * honest.epsilon_certified
    with subjects_charged_as_records():
        broken = audit_subject_level(4.0, records_per_subject=5, n_trials=5, n_runs=RUNS, random_state=0)
    assert broken.violated and broken.epsilon_lower_bound > 2 * broken.epsilon_certified
