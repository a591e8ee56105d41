"""The whole-fit audit of FederatedSPDNetClassifier: honest fits pass, fits with half the charged noise do not."""

import pytest

from skfedriem.audit import audit_spdnet_classifier
from skfedriem.audit.mutations import noise_scaled

pytestmark = pytest.mark.slow


def test_honest_spdnet_fits_stay_below_the_certified_epsilon_and_less_noise_is_caught():
    honest = audit_spdnet_classifier(4.0, n_runs=100, random_state=0)
    assert honest.epsilon_certified <= 4.0 and not honest.violated and honest.steps == 5
    with noise_scaled(0.5):
        broken = audit_spdnet_classifier(4.0, n_runs=100, random_state=0)
    assert broken.violated
