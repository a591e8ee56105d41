"""
A MOABB evaluation: federated SPDNet beside pyRiemann's MDM, on MOABB's FakeDataset
===================================================================================

MOABB's evaluations take any scikit-learn pipeline. Here a within-session evaluation on
``FakeDataset`` (synthetic signals generated on the spot, no download) puts pyRiemann's minimum
distance to mean beside :class:`~skfedriem.FederatedSPDNetClassifier`, private and not. The fake
signals carry no class structure worth learning and each fold tests a handful of trials: the
scores show that the pipelines run inside MOABB, not which one is better. Inside each fold the training trials of one session are split into ``n_clients`` clients
by position. FakeDataset has 3 channels: the default ``dims=None`` uses a BiMap to
``min(16, n_channels)``.
"""

import warnings

import matplotlib.pyplot as plt
from moabb.datasets.fake import FakeDataset
from moabb.evaluations import WithinSessionEvaluation
from moabb.paradigms import LeftRightImagery
from pyriemann.classification import MDM
from pyriemann.estimation import Covariances
from sklearn.pipeline import make_pipeline

from skfedriem import FederatedSPDNetClassifier

warnings.filterwarnings("ignore")
dataset = FakeDataset(event_list=["left_hand", "right_hand"], n_sessions=1, n_runs=1, n_subjects=2, n_events=40,
                      duration=60, seed=0)
pipelines = {
    "MDM": make_pipeline(Covariances("oas"), MDM()),
    "SPDNet federated": make_pipeline(Covariances("oas"),
                                      FederatedSPDNetClassifier(eps=None, n_rounds=10, batch_size=8, n_clients=2)),
    "SPDNet federated, ε = 10": make_pipeline(Covariances("oas"),
                                              FederatedSPDNetClassifier(eps=10.0, n_rounds=10, batch_size=8,
                                                                        n_clients=2)),
}
evaluation = WithinSessionEvaluation(paradigm=LeftRightImagery(fmin=8, fmax=32), datasets=[dataset],
                                     overwrite=True, save_model=False, hdf5_path=None)
results = evaluation.process(pipelines)
summary = results.groupby("pipeline")["score"].agg(["mean", "std"])
print(summary)

fig, ax = plt.subplots(figsize=(6, 3.4))
ax.bar(summary.index, summary["mean"], yerr=summary["std"], capsize=4)
ax.axhline(0.5, color="grey", ls=":", label="chance")
ax.set(ylabel="within-session ROC AUC", ylim=(0, 1))
ax.legend()
fig.tight_layout()
