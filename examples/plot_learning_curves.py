"""
Learning curves and privacy spent per round, from ``history_``
==============================================================

Every fitted estimator keeps one entry per round in ``history_``: the certified ε spent so far,
who was selected and who replied, the server's aggregation time, and, when ``fit`` gets data the
server holds (``validation_data``), the loss and accuracy on it. All of it is post-processing of
what the server saw; :class:`~skfedriem.display.HistoryDisplay` draws it. Here: three sites, 22-channel covariance matrices, four classes, two of the
three clients per round, and a sixth of the trials held by the server for validation.
"""

import numpy as np
from sklearn.model_selection import train_test_split

from skfedriem import FederatedSPDNetClassifier
from skfedriem.datasets import make_spd_classification
from skfedriem.display import HistoryDisplay

X, y, groups = make_spd_classification(n_clients=3, n_matrices_per_client=360, n_channels=22, n_classes=4,
                                       class_sep=0.6, noise=1.0, heterogeneity=0.3, scale=1e-10, random_state=0)
train, valid = train_test_split(np.arange(len(y)), test_size=1 / 6, stratify=groups, random_state=0)
clf = FederatedSPDNetClassifier(eps=8.0, n_rounds=60, batch_size=32, clients_per_round=2, optimizer="adam",
                                lr=1e-2)
clf.fit(X[train], y[train], groups=groups[train], validation_data=(X[valid], y[valid]))
history = clf.history_
print(sorted(history[-1]))
print("selected in the first rounds:", [h["clients"] for h in history[:4]])

# One panel per series: ε spent per round and its target, each held-out metric, and who replied.
display = HistoryDisplay.from_estimator(clf)
display.axes_[1].axhline(0.25, color="grey", ls=":", label="chance")
display.axes_[1].legend()
print(f"final: accuracy {history[-1]['valid_accuracy']:.3f}, eps {clf.epsilon_:.3f}; "
      f"mean aggregation {1e3 * np.mean([h['aggregation_seconds'] for h in history]):.2f} ms per round")
