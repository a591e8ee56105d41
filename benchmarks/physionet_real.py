"""Real EEG: PhysioNet eegmmidb, 5 subjects, imagined left vs right hand, offline.

FederatedSPDNetClassifier (ε = none, 10, 4, 1) and
FederatedTangentSpaceClassifier (its default reference, which is the clients'
mean without privacy and the identity under privacy, and the identity without
privacy; ε = none, 10, 4, 1), every one with its default settings,
next to pyRiemann's MDM and tangent space + logistic regression, all after
Covariances("oas"), on the same splits. LeftRightImagery(fmin=8, fmax=32,
resample=128); 45 trials per subject.

* pooled: subjects are the clients; a stratified third of every subject's
  trials is held out (seeds 0..n−1); accuracy on the held-out trials.
* within-session: MOABB's WithinSessionEvaluation (5-fold CV inside each
  subject's session; ROC AUC, MOABB's score for two classes); each training
  fold is one site's trials, one client (the classifiers' default without
  ``groups``).

Needs the files of ../shared/data/eegmmidb (or --data) and the eeg extra.

    python benchmarks/physionet_real.py [--pipelines TS+LR "Tangent eps=none" ...] [--no-within]
"""

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from pyriemann.classification import MDM
from pyriemann.estimation import Covariances
from pyriemann.tangentspace import TangentSpace
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from skfedriem import FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem.datasets import load_moabb, use_local_eegmmidb

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eegmmidb"


def pipelines() -> dict:
    """Every federated estimator with its defaults (the planned schedule), as a newcomer would run it."""
    return {
        "SPDNet eps=none": make_pipeline(Covariances("oas"), FederatedSPDNetClassifier(eps=None, random_state=0)),
        # the private schedule (planned SGD) without privacy: SPDNet's eps=None default before it planned Adam
        "SPDNet SGD eps=none": make_pipeline(Covariances("oas"), FederatedSPDNetClassifier(
            eps=None, optimizer="sgd", random_state=0)),
        **{f"SPDNet eps={eps:g}": make_pipeline(Covariances("oas"), FederatedSPDNetClassifier(eps=eps))
           for eps in (10.0, 4.0, 1.0)},
        "MDM": make_pipeline(Covariances("oas"), MDM()),
        "TS+LR": make_pipeline(Covariances("oas"), TangentSpace(), LogisticRegression(max_iter=1000)),
        "Tangent eps=none": make_pipeline(Covariances("oas"), FederatedTangentSpaceClassifier(eps=None,
                                                                                              random_state=0)),
        "Tangent identity eps=none": make_pipeline(Covariances("oas"), FederatedTangentSpaceClassifier(
            eps=None, reference=None, random_state=0)),
        **{f"Tangent eps={eps:g}": make_pipeline(Covariances("oas"), FederatedTangentSpaceClassifier(eps=eps))
           for eps in (10.0, 4.0, 1.0)},
    }


def load_subjects(data: Path):
    """(dataset, paradigm, X, y, groups) of the five subjects' left/right imagery, read from ``data``."""
    from moabb.datasets import PhysionetMI
    from moabb.paradigms import LeftRightImagery

    use_local_eegmmidb(data)
    dataset = PhysionetMI(imagined=True)
    dataset.feet_runs = []  # only left/right imagery runs are on disk
    dataset.subject_list = [1, 2, 3, 4, 5]
    paradigm = LeftRightImagery(fmin=8, fmax=32, resample=128)
    X, y, groups = load_moabb(dataset, paradigm, subjects=dataset.subject_list)
    return dataset, paradigm, X, y, groups


def held_out_mask(y, groups, seed):
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), dtype=bool)
    for g in np.unique(groups):
        for label in np.unique(y):
            idx = np.flatnonzero((groups == g) & (y == label))
            test[rng.choice(idx, size=len(idx) // 3, replace=False)] = True
    return test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--pipelines", nargs="+", default=None, help="only these (default: all)")
    parser.add_argument("--no-within", action="store_true", help="skip MOABB's within-session evaluation")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    from moabb.evaluations import WithinSessionEvaluation

    dataset, paradigm, X, y, groups = load_subjects(args.data)

    def chosen():
        return {k: v for k, v in pipelines().items() if args.pipelines is None or k in args.pipelines}

    pooled = {}
    for name, pipe in chosen().items():
        t0 = time.perf_counter()
        scores = []
        for seed in range(args.seeds):
            test = held_out_mask(y, groups, seed)
            federated = pipe.steps[-1][0]
            fit_params = {f"{federated}__groups": groups[~test]} if federated.startswith("federated") else {}
            scores.append(pipe.fit(X[~test], y[~test], **fit_params).score(X[test], y[test]))
        pooled[name] = {"mean": float(np.mean(scores)), "sd": float(np.std(scores)),
                        "seconds": (time.perf_counter() - t0) / args.seeds}

    within, within_seconds = {}, None
    if not args.no_within:
        with tempfile.TemporaryDirectory() as results_dir:
            evaluation = WithinSessionEvaluation(paradigm=paradigm, datasets=[dataset], overwrite=True,
                                                 hdf5_path=results_dir, random_state=0)
            t0 = time.perf_counter()
            frame = evaluation.process(chosen())
            within_seconds = time.perf_counter() - t0
        within = {name: {"mean": float(s.mean()), "sd": float(s.std())}
                  for name, s in frame.groupby("pipeline")["score"]}

    print(f"PhysioNet MI, subjects 1-5, left vs right imagery, {len(y)} trials")
    print(f"{'pipeline':26} {'pooled acc (5 clients)':>24} {'within-session AUC':>20} {'s/fit':>6}")
    for name in pooled:
        p, w = pooled[name], within.get(name)
        inside = f"{w['mean']:>13.3f} ± {w['sd']:.3f}" if w else f"{'-':>21}"
        print(f"{name:26} {p['mean']:>15.3f} ± {p['sd']:.3f} {inside} {p['seconds']:>6.1f}")
    if within_seconds is not None:
        print(f"within-session evaluation: {within_seconds:.0f} s")
    print(json.dumps({"benchmark": "physionet_real", "pooled_accuracy": pooled, "within_session_auc": within,
                      "within_seconds": within_seconds}))


if __name__ == "__main__":
    main()
