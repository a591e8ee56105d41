"""MOABB's own evaluations of the private pipelines on the real PhysioNet subjects: within a session and across subjects.

* ``within``: :class:`~moabb.evaluations.WithinSessionEvaluation` (5-fold cross-validation inside each subject's
  session, about 36 training trials a fold; ROC AUC). The federated classifiers get no ``groups``: a fold's trials are
  one site's (one client, the default). Subjects ``--within-subjects`` (default 1-10).
* ``cross``: :class:`~moabb.evaluations.CrossSubjectEvaluation` on the 24 subjects with all three imagery runs, 4 folds
  of 6 held-out subjects (the gallery example's protocol); the federated classifiers make their clients of whole
  training subjects (``subjects`` by metadata routing; ``subject_clients=6``: 6 fixed groups).

Pipelines (``--pipelines``), all after ``Covariances("oas")``: pyRiemann's ``TangentSpace() → LogisticRegression()``
without privacy (``TS+LR``); :class:`~skfedriem.FederatedSPDNetClassifier` and
:class:`~skfedriem.FederatedTangentSpaceClassifier` at ε = 10 with their defaults (``SPDNet eps=10``, ``Tangent
eps=10``), SPDNet without privacy (``SPDNet eps=none``), and in the cross-subject evaluation at the identity
(``... identity``: ``reference=None``, the default before) and with distributed noise (``... distributed``). Left vs right imagery, 8–32 Hz, 128 Hz; 9 motor-cortex channels and all 64 (``--channels``).

For each fit, whether the plan warned that the model "will likely learn little or nothing" (a
:class:`~skfedriem.exceptions.NoiseSwampsSignalWarning`) is recorded with its score, so that the warning's wording can
be checked against what it warns of.

    python benchmarks/moabb_physionet.py [--evaluations within cross] [--channels motor all]
        [--within-subjects 1 2 ... 10] [--pipelines ...]
"""

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import sklearn
from pyriemann.estimation import Covariances
from pyriemann.tangentspace import TangentSpace
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline

from skfedriem import FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem.datasets import use_local_eegmmidb
from skfedriem.exceptions import NoiseSwampsSignalWarning

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eegmmidb"
MOTOR = ["FC3", "FCz", "FC4", "C3", "Cz", "C4", "CP3", "CPz", "CP4"]
SUBJECTS = [*range(1, 24), 42]
#: Every fit's (pipeline, whether the plan warned); filled in this process (MOABB fits pipelines here, n_jobs=1).
WARNED: list[tuple[str, bool]] = []


class Noted(ClassifierMixin, BaseEstimator):
    """A federated classifier that notes whether its fit warned that it would learn little or nothing (a benchmark's probe)."""

    __metadata_request__fit = {"subjects": True}  # as the federated classifiers request it

    def __init__(self, name: str = "", estimator=None) -> None:
        self.name = name
        self.estimator = estimator

    def fit(self, X, y, subjects=None):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", NoiseSwampsSignalWarning)
            self.estimator_ = sklearn.clone(self.estimator).fit(X, y, subjects=subjects)
        WARNED.append((self.name, any(issubclass(w.category, NoiseSwampsSignalWarning) for w in caught)))
        self.classes_ = self.estimator_.classes_
        return self

    def predict(self, X):
        return self.estimator_.predict(X)

    def predict_proba(self, X):
        return self.estimator_.predict_proba(X)

    def decision_function(self, X):
        return self.estimator_.decision_function(X)


def pipelines(evaluation: str) -> dict:
    """The pipelines of one evaluation, each as a newcomer would write it (defaults)."""
    federated = {} if evaluation == "within" else {"subject_clients": 6}
    made = {
        "TS+LR": make_pipeline(Covariances("oas"), TangentSpace(), LogisticRegression(max_iter=1000)),
        "SPDNet eps=none": FederatedSPDNetClassifier(eps=None, **federated),
        "SPDNet eps=10": FederatedSPDNetClassifier(eps=10.0, **federated),
        "Tangent eps=10": FederatedTangentSpaceClassifier(eps=10.0, **federated),
    }
    if evaluation == "cross":
        made["SPDNet eps=10 identity"] = FederatedSPDNetClassifier(eps=10.0, reference=None, **federated)
        made["Tangent eps=10 identity"] = FederatedTangentSpaceClassifier(eps=10.0, reference=None, **federated)
        made["SPDNet eps=10 distributed"] = FederatedSPDNetClassifier(eps=10.0, noise="distributed", **federated)
        made["Tangent eps=10 distributed"] = FederatedTangentSpaceClassifier(eps=10.0, noise="distributed",
                                                                              **federated)
    return {name: est if isinstance(est, Pipeline) else
            make_pipeline(Covariances("oas"), Noted(name, est))
            for name, est in made.items()}


def evaluate(evaluation: str, channels: str, subjects: list[int], names: list[str] | None, data: Path) -> dict:
    """Scores by pipeline (per subject for ``within``, per held-out subject for ``cross``) and the warned fits."""
    from moabb.datasets import PhysionetMI
    from moabb.evaluations import CrossSubjectEvaluation, WithinSessionEvaluation
    from moabb.paradigms import LeftRightImagery

    use_local_eegmmidb(data)
    dataset = PhysionetMI(imagined=True)
    dataset.feet_runs = []  # left/right imagery: the runs on disk
    dataset.subject_list = subjects
    paradigm = LeftRightImagery(fmin=8, fmax=32, resample=128, channels=MOTOR if channels == "motor" else None)
    chosen = {k: v for k, v in pipelines(evaluation).items() if names is None or k in names}
    WARNED.clear()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder, sklearn.config_context(enable_metadata_routing=True):
        kind = WithinSessionEvaluation if evaluation == "within" else CrossSubjectEvaluation
        options = {"random_state": 0} if evaluation == "within" else {"n_splits": 4}
        frame = kind(paradigm=paradigm, datasets=[dataset], overwrite=True, hdf5_path=folder, **options).process(chosen)
    scores = {name: {"mean": float(s.mean()), "sd": float(s.std()), "by_subject": s.round(4).tolist()}
              for name, s in frame.groupby("pipeline")["score"]}
    warned = {name: [w for n, w in WARNED if n == name] for name in chosen}
    for name, flags in warned.items():
        if flags:
            scores[name]["fits_warned"] = f"{sum(flags)} of {len(flags)}"
    return {"scores": scores, "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evaluations", nargs="+", default=["within", "cross"], choices=["within", "cross"])
    parser.add_argument("--channels", nargs="+", default=["motor", "all"], choices=["motor", "all"])
    parser.add_argument("--within-subjects", type=int, nargs="+", default=list(range(1, 11)))
    parser.add_argument("--pipelines", nargs="+", default=None, help="only these (default: all)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    import mne

    mne.set_log_level("ERROR")  # MOABB's paradigm reads each run with MNE, which would print every file's events
    if not args.data.is_dir():
        print(f"no EEGMMIDB files at {args.data}: nothing to run")
        print(json.dumps({"benchmark": "moabb_physionet", "results": {}}))
        return
    results = {}
    print("ROC AUC (MOABB's score for two classes), mean ± sd over subjects (within) or held-out subjects (cross)")
    print(f"{'evaluation':<8} {'channels':<7} {'pipeline':<28} {'AUC':>13}  warned")
    for evaluation in args.evaluations:
        for channels in args.channels:
            subjects = args.within_subjects if evaluation == "within" else SUBJECTS
            result = evaluate(evaluation, channels, subjects, args.pipelines, args.data)
            results[f"{evaluation} {channels}"] = result
            for name, s in result["scores"].items():
                print(f"{evaluation:<8} {channels:<7} {name:<28} {s['mean']:>6.3f} ± {s['sd']:.3f}  "
                      f"{s.get('fits_warned', '')}", flush=True)
            print(f"  ({len(subjects)} subjects, {result['seconds']:.0f} s)")
    print(json.dumps({"benchmark": "moabb_physionet", "results": results}))


if __name__ == "__main__":
    main()
