"""HistoryDisplay draws what history_ holds, for every estimator."""

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from skfedriem import FederatedEEGNetClassifier, FederatedPCA, FederatedSPDNetClassifier
from skfedriem.datasets import make_federated_pca, make_spd_classification
from skfedriem.display import HistoryDisplay


def fitted():
    X, groups = make_federated_pca(n_clients=3, n_samples_per_client=60, n_features=5, random_state=0)
    yield FederatedPCA(eps=2.0, solver="riemannian", n_rounds=4, clients_per_round=2).fit(X, groups=groups,
                                                                                          reference_X=X)
    covs, labels, sites = make_spd_classification(3, 20, 4, random_state=0)
    yield FederatedSPDNetClassifier(eps=5.0, dims=(2,), n_rounds=3, batch_size=8).fit(
        covs, labels, groups=sites, validation_data=(covs[:10], labels[:10]))
    trials, targets = 1e-5 * np.random.default_rng(0).standard_normal((40, 3, 64)), np.arange(40) % 2
    yield FederatedEEGNetClassifier(eps=None, F1=2, D=1, F2=2, kernel_length=8, n_rounds=2).fit(trials, targets)


@pytest.mark.parametrize("est", list(fitted()), ids=lambda e: type(e).__name__)
def test_it_draws_what_history_holds(est):
    display = HistoryDisplay.from_estimator(est)
    history = est.history_
    rounds = [h["round"] for h in history]
    if np.isfinite(est.epsilon_):
        assert list(display.lines_["epsilon"].get_xdata()) == rounds
        assert list(display.lines_["epsilon"].get_ydata()) == [h["epsilon"] for h in history]
        assert display.lines_["target_epsilon"].get_ydata()[0] == est.eps
    else:
        assert "epsilon" not in display.lines_  # a non-private fit says so instead of drawing inf
    for metric in ("valid_accuracy", "valid_loss", "optimality_gap"):
        if metric in history[0]:
            assert list(display.lines_[metric].get_ydata()) == [h[metric] for h in history]
    heights = [bar.get_height() for bar in display.lines_["participation"]]
    assert heights == [len(h["replied"]) / len(h["clients"]) for h in history]
    assert all(float(t).is_integer() for t in display.axes_[0].get_xticks())  # whole rounds


def test_it_refuses_an_unfitted_estimator_and_the_wrong_axes():
    with pytest.raises(ValueError, match="not fitted"):
        HistoryDisplay.from_estimator(FederatedPCA())
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(1, 2)
    est = next(fitted())
    with pytest.raises(ValueError, match="needs 3 axes"):
        HistoryDisplay.from_estimator(est, ax=ax)
