"""The two-block audit of a client's rounds: joint clipping and a fresh noise stream are what it checks."""

import pytest

from skfedriem.audit import audit_client_rounds
from skfedriem.audit.mutations import noise_stream_restarted, per_block_clipping

pytestmark = pytest.mark.slow


def test_a_static_server_catches_per_block_clipping_and_honest_rounds_pass():
    honest = audit_client_rounds(1.4, server="static", n_rounds=2, n_runs=300, random_state=0)
    assert not honest.violated and honest.epsilon_lower_bound > 0.5 * honest.epsilon_certified  # tight at q = 1
    with per_block_clipping():  # two blocks, each clipped to C: the whole gradient reaches √2 C
        broken = audit_client_rounds(1.4, server="static", n_rounds=2, n_runs=300, random_state=0)
    assert broken.violated


def test_an_adaptive_server_catches_a_noise_stream_that_restarts_every_round():
    honest = audit_client_rounds(0.5, server="adaptive", n_runs=200, random_state=0)
    assert not honest.violated and honest.steps == 2
    with noise_stream_restarted():
        broken = audit_client_rounds(0.5, server="adaptive", n_runs=200, random_state=0)
    assert broken.violated and broken.false_positive_rate == broken.false_negative_rate == 0.0  # noise cancelled


def test_unknown_server_is_named():
    with pytest.raises(ValueError, match="'server'.*'replay'"):
        audit_client_rounds(server="replay")
