"""
Private SPDNet on real EEG: PhysioNet motor imagery (or a synthetic stand-in)
=============================================================================

Five subjects of the PhysioNet EEG Motor Movement/Imagery dataset (imagined left vs right
hand, 64 channels, 8–32 Hz, 128 Hz), one client per subject, OAS covariance matrices,
:class:`~skfedriem.FederatedSPDNetClassifier` with and without privacy, a third of each subject's
trials held out. When the recordings are not on this machine (``../shared/data/eegmmidb`` next
to the repository), a synthetic federation of the same shape stands in, and the figure says so.

With about 30 training trials per client, ε = 10 leaves SPDNet near chance on the real data:
too few records per client for that budget (see the user guide, *Choosing hyper-parameters*).
"""

import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from sklearn.model_selection import train_test_split

from skfedriem import FederatedSPDNetClassifier
from skfedriem.datasets import make_spd_classification
from skfedriem.display import HistoryDisplay

warnings.filterwarnings("ignore", category=FutureWarning)
here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
recordings = next((p / "shared" / "data" / "eegmmidb" for p in here.parents
                   if (p / "shared" / "data" / "eegmmidb").is_dir()), None)

if recordings is not None:
    from moabb.datasets import PhysionetMI
    from moabb.paradigms import LeftRightImagery
    from pyriemann.estimation import Covariances

    from skfedriem.datasets import load_moabb, use_local_eegmmidb

    use_local_eegmmidb(recordings)
    dataset = PhysionetMI(imagined=True)
    dataset.feet_runs = []
    trials, y, groups = load_moabb(dataset, LeftRightImagery(fmin=8, fmax=32, resample=128), subjects=[1, 2, 3, 4, 5])
    X = Covariances("oas").fit_transform(trials)
    source = "PhysioNet MI, 5 subjects as clients"
else:
    X, y, groups = make_spd_classification(n_clients=5, n_matrices_per_client=45, n_channels=64, class_sep=0.4,
                                           noise=1.5, scale=1e-10, random_state=0)
    source = "SYNTHETIC stand-in (the PhysioNet recordings are not on this machine)"
train, test = train_test_split(np.arange(len(y)), test_size=1 / 3, stratify=np.char.add(groups.astype(str),
                                                                                           y.astype(str)),
                               random_state=0)
print(source, X.shape)

results = {}
for eps in (None, 10.0):
    clf = FederatedSPDNetClassifier(eps=eps, dims=(16,), n_rounds=60, batch_size=16, optimizer="adam", lr=1e-2)
    clf.fit(X[train], y[train], groups=groups[train], validation_data=(X[test], y[test]))
    results["non-private" if eps is None else f"ε = {eps:g}"] = clf
    print(f"eps={eps}: held-out accuracy {clf.score(X[test], y[test]):.3f}, certified eps {clf.epsilon_:.3f}")

fig, ax = plt.subplots(figsize=(6, 3.6))
for label, clf in results.items():
    ax.plot([h["round"] for h in clf.history_], [h["valid_accuracy"] for h in clf.history_], label=label)
ax.axhline(0.5, color="grey", ls=":", label="chance")
ax.set(xlabel="round", ylabel="held-out accuracy", title=source)
ax.legend()
fig.tight_layout()

# The private fit's whole history: ε spent per round against its target, held-out loss and accuracy, and who replied.
display = HistoryDisplay.from_estimator(results["ε = 10"])
plt.show()
