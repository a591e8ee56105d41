"""The audit of a client's release of its own mean (recentre="client") holds honest and catches half the noise."""

from skfedriem.audit import audit_personal_release
from skfedriem.audit.mutations import personal_noise_scaled


def test_the_honest_release_stays_below_its_certified_epsilon():
    result = audit_personal_release(4.0, n_runs=500, random_state=0)
    assert not result.violated and result.epsilon_lower_bound < 4.0


def test_a_release_at_half_its_charged_noise_is_caught():
    """The broken variant: the client adds σ / 2 while the ledger charges σ (lower bound 6.07 against 4)."""
    with personal_noise_scaled(0.5):
        result = audit_personal_release(4.0, n_runs=500, random_state=10_000)
    assert result.violated and result.epsilon_lower_bound > 4.0
