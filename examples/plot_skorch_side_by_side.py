"""
Federated and centralised SPDNet side by side, with skorch
==========================================================

The same network trained two ways in one ``GridSearchCV``: federated with record-level privacy
(:class:`~skfedriem.FederatedSPDNetClassifier`, three sites) and centralised without privacy, as
an ordinary supervised fit with skorch's ``NeuralNetClassifier``
(:func:`skfedriem.experiments.central.central_net`, which keeps SPDNet's BiMap weights on the
Stiefel manifold with :class:`~skfedriem.manifolds.ProjectedAdam`). skorch wants float32 inputs
and fixed sizes; our estimators infer them.
"""

import matplotlib.pyplot as plt
import numpy as np
import torch
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

from skfedriem import FederatedSPDNetClassifier
from skfedriem.datasets import make_spd_classification
from skfedriem.experiments.central import central_net

X, y, groups = make_spd_classification(n_clients=3, n_matrices_per_client=150, n_channels=12, n_classes=3,
                                       class_sep=0.6, noise=1.0, random_state=0)
torch.manual_seed(0)  # skorch initialises the network from torch's global generator
candidates = {
    "centralised, skorch": central_net("spdnet", input_shape=(12, 12), n_classes=3, lr=1e-2, batch_size=32,
                                       n_rounds=30, dims=(8,)),
    "federated, non-private": FederatedSPDNetClassifier(eps=None, dims=(8,), n_rounds=30, batch_size=32),
    "federated, ε = 10": FederatedSPDNetClassifier(eps=10.0, dims=(8,), n_rounds=30, batch_size=32),
}
pipe = Pipeline([("float32", FunctionTransformer(np.asarray, kw_args={"dtype": np.float32})),
                 ("clf", candidates["federated, non-private"])])
search = GridSearchCV(pipe, {"clf": list(candidates.values())}, cv=3).fit(X, y)
scores = dict(zip(candidates, search.cv_results_["mean_test_score"]))
spread = dict(zip(candidates, search.cv_results_["std_test_score"]))
for name, score in scores.items():
    print(f"{name:24} accuracy {score:.3f} ± {spread[name]:.3f}")

fig, ax = plt.subplots(figsize=(6, 3.4))
ax.bar(list(scores), list(scores.values()), yerr=list(spread.values()), capsize=4)
ax.axhline(1 / 3, color="grey", ls=":", label="chance")
ax.set(ylabel="3-fold accuracy", ylim=(0, 1))
ax.legend()
fig.tight_layout()
