"""Real EEG: PhysioNet eegmmidb, 5 subjects, imagined left vs right hand, offline.

FederatedSPDNetClassifier (ε = none and 10) next to pyRiemann's MDM and
tangent space + logistic regression, all after Covariances("oas"), on the same
splits. LeftRightImagery(fmin=8, fmax=32, resample=128); 45 trials per subject.

* pooled: subjects are the clients; a stratified third of every subject's
  trials is held out (seeds 0..n−1); accuracy on the held-out trials.
* within-session: MOABB's WithinSessionEvaluation (5-fold CV inside each
  subject's session; ROC AUC, MOABB's score for two classes); the federated
  classifier splits each training fold into 3 random stratified clients.

Needs the files of ../shared/data/eegmmidb (or --data) and the eeg extra.

    python benchmarks/physionet_real.py
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

from skfedriem import FederatedSPDNetClassifier
from skfedriem.datasets import load_moabb, use_local_eegmmidb

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eegmmidb"


def pipelines(batch_size: int) -> dict:
    spdnet = dict(dims=(32,), n_rounds=100, batch_size=batch_size, lr=1e-2, random_state=0)
    return {
        "SPDNet eps=none": make_pipeline(Covariances("oas"), FederatedSPDNetClassifier(eps=None, **spdnet)),
        "SPDNet eps=10": make_pipeline(Covariances("oas"), FederatedSPDNetClassifier(eps=10.0, **spdnet)),
        "MDM": make_pipeline(Covariances("oas"), MDM()),
        "TS+LR": make_pipeline(Covariances("oas"), TangentSpace(), LogisticRegression(max_iter=1000)),
    }


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
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    from moabb.datasets import PhysionetMI
    from moabb.evaluations import WithinSessionEvaluation
    from moabb.paradigms import LeftRightImagery

    use_local_eegmmidb(args.data)
    dataset = PhysionetMI(imagined=True)
    dataset.feet_runs = []  # only left/right imagery runs are on disk
    dataset.subject_list = [1, 2, 3, 4, 5]
    paradigm = LeftRightImagery(fmin=8, fmax=32, resample=128)
    X, y, groups = load_moabb(dataset, paradigm, subjects=dataset.subject_list)

    pooled = {}
    for name, pipe in pipelines(batch_size=16).items():
        t0 = time.perf_counter()
        scores = []
        for seed in range(args.seeds):
            test = held_out_mask(y, groups, seed)
            fit_params = {"federatedspdnetclassifier__groups": groups[~test]} if "SPDNet" in name else {}
            scores.append(pipe.fit(X[~test], y[~test], **fit_params).score(X[test], y[test]))
        pooled[name] = {"mean": float(np.mean(scores)), "sd": float(np.std(scores)),
                        "seconds": (time.perf_counter() - t0) / args.seeds}

    with tempfile.TemporaryDirectory() as results_dir:
        evaluation = WithinSessionEvaluation(paradigm=paradigm, datasets=[dataset], overwrite=True,
                                             hdf5_path=results_dir, random_state=0)
        t0 = time.perf_counter()
        frame = evaluation.process(pipelines(batch_size=8))
        within_seconds = time.perf_counter() - t0
    within = {name: {"mean": float(s.mean()), "sd": float(s.std())}
              for name, s in frame.groupby("pipeline")["score"]}

    print(f"PhysioNet MI, subjects 1-5, left vs right imagery, {len(y)} trials")
    print(f"{'pipeline':16} {'pooled acc (5 clients)':>24} {'within-session AUC':>20}")
    for name in pooled:
        p, w = pooled[name], within[name]
        print(f"{name:16} {p['mean']:>15.3f} ± {p['sd']:.3f} {w['mean']:>13.3f} ± {w['sd']:.3f}")
    print(f"within-session evaluation: {within_seconds:.0f} s")
    print(json.dumps({"benchmark": "physionet_real", "pooled_accuracy": pooled, "within_session_auc": within,
                      "within_seconds": within_seconds}))


if __name__ == "__main__":
    main()
