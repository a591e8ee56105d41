"""Centralised training of our networks with skorch, side by side with the federated estimator."""

import numpy as np
import pytest
import torch
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

pytest.importorskip("skorch")

from skfedriem import FederatedSPDNetClassifier  # noqa: E402
from skfedriem.datasets import make_spd_classification  # noqa: E402
from skfedriem.experiments.central import central_net, net_history  # noqa: E402


def test_skorch_trains_spdnet_and_keeps_bimap_on_the_stiefel_manifold():
    X, y, _ = make_spd_classification(3, 40, 5, class_sep=2.0, noise=0.5, random_state=0)
    Xv, yv, _ = make_spd_classification(1, 40, 5, class_sep=2.0, noise=0.5, random_state=1)
    torch.manual_seed(0)
    net = central_net("spdnet", input_shape=(5, 5), n_classes=2, lr=3e-2, batch_size=16, n_rounds=15, dims=(3,),
                      validation=(Xv, yv)).fit(X.astype(np.float32), y)
    assert net.score(X.astype(np.float32), y) > 0.85
    W = net.module_.features[1].weight.detach()
    torch.testing.assert_close(W.T @ W, torch.eye(3), atol=1e-5, rtol=0)
    history = net_history(net)
    assert [h["round"] for h in history] == list(range(1, 16)) and 0 <= history[-1]["valid_accuracy"] <= 1


def test_skorch_trains_eegnet_on_raw_trials():
    rng = np.random.default_rng(0)
    y = np.arange(60) % 2
    X = rng.standard_normal((60, 4, 64)).astype(np.float32)
    X[np.arange(60), y] += 3 * np.sin(2 * np.pi * 12 * np.arange(64) / 64).astype(np.float32)
    torch.manual_seed(0)
    net = central_net("eegnet", input_shape=(4, 64), n_classes=2, lr=1e-2, batch_size=16, n_rounds=8).fit(X, y)
    assert net.score(X, y) > 0.8


def test_federated_and_centralised_side_by_side_in_one_grid_search():
    X, y, _ = make_spd_classification(3, 30, 4, class_sep=2.0, noise=0.5, random_state=0)
    central = central_net("spdnet", input_shape=(4, 4), n_classes=2, lr=3e-2, batch_size=15, n_rounds=5, dims=(2,))
    federated = FederatedSPDNetClassifier(eps=None, dims=(2,), n_rounds=5, batch_size=15, lr=3e-2)
    pipe = Pipeline([("float32", FunctionTransformer(np.asarray, kw_args={"dtype": np.float32})), ("clf", federated)])
    search = GridSearchCV(pipe, {"clf": [federated, central]}, cv=2).fit(X, y)
    scores = search.cv_results_["mean_test_score"]
    assert len(scores) == 2 and ((0 <= scores) & (scores <= 1)).all()
