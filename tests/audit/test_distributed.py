"""The audit of distributed noise: honest rounds pass; shares sized by K, shares from a public seed and a sum decoded
short of K − t shares are caught; rounding past the bound is caught by the bound's own check."""

import numpy as np
import pytest
import torch

from skfedriem.audit.distributed import audit_distributed_rounds
from skfedriem.audit.mutations import (missing_share_counted, rounding_past_the_bound, shares_from_a_public_seed,
                                       shares_sized_by_clients)
from skfedriem.privacy.mechanisms import discrete
from skfedriem.privacy.mechanisms.randomness import SeededRandomness

RUNS = 120


def test_shares_the_server_can_regenerate_are_caught():
    honest = audit_distributed_rounds(1.4, n_runs=60, regenerate=True, random_state=0)
    assert not honest.violated
    with shares_from_a_public_seed():
        broken = audit_distributed_rounds(1.4, n_runs=60, regenerate=True, random_state=0)
    assert broken.violated and broken.epsilon_lower_bound > 1.5 * broken.epsilon_certified


@pytest.mark.slow
def test_honest_rounds_stay_below_the_certified_epsilon_and_shares_sized_by_k_are_caught():
    honest = audit_distributed_rounds(1.4, n_runs=RUNS, random_state=0)
    assert not honest.violated and honest.epsilon_lower_bound > 0.4 * honest.epsilon_certified  # tight at q = 1
    with shares_sized_by_clients():  # K = 6, t = 3 colluders: half the honest noise
        broken = audit_distributed_rounds(1.4, n_runs=RUNS, random_state=0)
    assert broken.violated


@pytest.mark.slow
def test_a_sum_decoded_short_of_its_honest_shares_is_caught():
    honest = audit_distributed_rounds(1.4, colluders=1, dropped=4, n_runs=RUNS, random_state=0)
    assert not honest.violated and honest.epsilon_lower_bound == 0.0  # every round discarded: nothing seen
    with missing_share_counted():
        broken = audit_distributed_rounds(1.4, colluders=1, dropped=4, n_runs=RUNS, random_state=0)
    assert broken.violated


def test_rounding_past_the_bound_is_caught_by_the_bound_check():
    """Too small an excess (at most √n over s C ≈ 16 √n) for an audit's runs to see; the rounding's own bound
    catches it: records of half-integer coordinates (rounding's worst case, ±½ each) at the clip, rounded without
    the condition, exceed R about once in six."""
    n = 16
    rows = torch.full((2000, n), 3.5, dtype=torch.float64)
    bound = discrete.rounding_bound(float(rows[0].norm()), n)
    source = SeededRandomness(np.random.SeedSequence(0))
    assert (np.linalg.norm(discrete._conditional_round(rows.unsqueeze(0).numpy(), bound, [source])[0], axis=1) <= bound).all()
    with rounding_past_the_bound():
        rounded = discrete._conditional_round(rows.unsqueeze(0).numpy(), bound, [source])[0]
    assert (np.linalg.norm(rounded, axis=1) > bound).any()


def test_dropped_clients_must_leave_the_canary_and_colluders():
    with pytest.raises(ValueError, match="'dropped'"):
        audit_distributed_rounds(clients=4, colluders=1, dropped=3, n_runs=1)


@pytest.mark.slow
def test_with_a_dropout_allowance_rounds_missing_clients_pass_and_excess_taken_out_regardless_is_caught():
    """K = 6, t = 1 colluder, d = 3, 3 honest clients silent: the two answering honest clients' shares of level 3
    carry the noise; a server that takes out all of their excess (level 0) leaves them 2/5 of it."""
    from skfedriem.audit.mutations import excess_removed_whatever_dropped

    honest = audit_distributed_rounds(1.4, colluders=1, dropped=3, dropouts=3, n_runs=RUNS, random_state=0)
    assert not honest.violated and honest.epsilon_lower_bound > 0.3 * honest.epsilon_certified
    with excess_removed_whatever_dropped():
        broken = audit_distributed_rounds(1.4, colluders=1, dropped=3, dropouts=3, n_runs=RUNS, random_state=0)
    assert broken.violated
