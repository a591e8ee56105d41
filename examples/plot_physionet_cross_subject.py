"""
The paper's protocol on real subjects: MOABB's cross-subject evaluation, clients of whole subjects
==================================================================================================

MOABB's :class:`~moabb.evaluations.CrossSubjectEvaluation` holds out whole subjects and fits each
pipeline on the others, passing the training trials' ``subjects`` to ``fit`` (metadata routing).
A federated classifier makes its clients of those whole subjects: here ``subject_clients=6``, six
fixed groups of the sorted training subjects (``"each"``, the default, makes one client a subject),
never random chunks of trials. So the paper's protocol runs unmodified.

The 24 PhysioNet subjects with all three imagery runs (imagined left vs right hand, 8–32 Hz,
128 Hz, 9 motor-cortex channels), 4 folds of 6 held-out subjects. Pipelines, all on OAS covariances:

* :class:`~skfedriem.FederatedTangentSpaceClassifier` at ε = 10, its defaults: the tangent space
  at the clients' mean, released privately before the rounds (its share of ε charged with them);
* the same at the identity (``reference=None``), where real EEG's features sit far from the
  origin and a private logistic regression stays near chance;
* personalised inputs (``recentre="client"``, distributed noise, one client a training subject):
  every training subject re-centred on its own privately released mean, and every held-out subject
  on the mean of its own trials when it is scored (MOABB scores each alone, without ``groups``);
* pyRiemann's ``TangentSpace() → LogisticRegression()`` on the pooled training subjects, without
  privacy: the trusted curator's reference.

When the recordings are not on this machine (``../shared/data/eegmmidb`` next to the repository),
MOABB's FakeDataset (noise: every score near 0.5) stands in, and the figure says so.
"""

import tempfile
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import mne
from moabb.evaluations import CrossSubjectEvaluation
from moabb.paradigms import LeftRightImagery
from pyriemann.estimation import Covariances
from pyriemann.tangentspace import TangentSpace
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from skfedriem import FederatedTangentSpaceClassifier

warnings.filterwarnings("ignore", category=FutureWarning)
mne.set_log_level("WARNING")  # MOABB's paradigm reads each run with MNE, which would print every file's events
here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
recordings = next((p / "shared" / "data" / "eegmmidb" for p in here.parents
                   if (p / "shared" / "data" / "eegmmidb").is_dir()), None)
MOTOR = ["FC3", "FCz", "FC4", "C3", "Cz", "C4", "CP3", "CPz", "CP4"]

if recordings is not None:
    from moabb.datasets import PhysionetMI

    from skfedriem.datasets import use_local_eegmmidb

    use_local_eegmmidb(recordings)
    dataset = PhysionetMI(imagined=True)
    dataset.feet_runs = []  # left/right imagery: the runs on disk
    dataset.subject_list = [*range(1, 24), 42]
    paradigm = LeftRightImagery(fmin=8, fmax=32, resample=128, channels=MOTOR)
    source = "PhysioNet MI, 24 subjects, 9 motor channels"
else:
    from moabb.datasets.fake import FakeDataset

    dataset = FakeDataset(event_list=["left_hand", "right_hand"], n_sessions=1, n_runs=1, n_subjects=8,
                          n_events=40, duration=60, seed=0)
    paradigm = LeftRightImagery(fmin=8, fmax=32, resample=128)
    source = "SYNTHETIC stand-in: MOABB's FakeDataset (the PhysioNet recordings are not on this machine)"

federated = dict(eps=10.0, subject_clients=6)
pipelines = {
    "private, clients' mean (default)": make_pipeline(Covariances("oas"), FederatedTangentSpaceClassifier(**federated)),
    "private, identity": make_pipeline(Covariances("oas"), FederatedTangentSpaceClassifier(reference=None,
                                                                                          **federated)),
    "private, each subject re-centred": make_pipeline(Covariances("oas"), FederatedTangentSpaceClassifier(
        eps=10.0, recentre="client", noise="distributed")),
    "pyRiemann TS + LR, pooled, no privacy": make_pipeline(Covariances("oas"), TangentSpace(),
                                                           LogisticRegression(max_iter=1000)),
}
with tempfile.TemporaryDirectory() as folder:
    evaluation = CrossSubjectEvaluation(paradigm=paradigm, datasets=[dataset], n_splits=4, overwrite=True,
                                        hdf5_path=folder)
    results = evaluation.process(pipelines)
print(source)
print(results.groupby("pipeline")["score"].agg(["mean", "std", "count"]).round(3))

fig, ax = plt.subplots(figsize=(7, 3.6))
names = list(pipelines)
for i, name in enumerate(names):
    scores = results.loc[results["pipeline"] == name, "score"]
    ax.scatter([i] * len(scores), scores, color="tab:blue", alpha=0.6)
    ax.plot([i - 0.2, i + 0.2], [scores.mean()] * 2, color="black")
ax.axhline(0.5, color="grey", ls=":", label="chance")
ax.set_xticks(range(len(names)), [n.replace(", ", ",\n", 1) for n in names], fontsize=8)
ax.set(ylabel=f"held-out subjects' {results['score'].name} (ROC AUC)", title=source)
ax.legend(loc="lower right")
fig.tight_layout()
plt.show()
