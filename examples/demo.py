"""Main job: a private federated SPDNet classifier, as an EEG lab would run it.

Default: an embedded synthetic federation, 3 sites x 400 covariance matrices
(22 channels, 4 classes, in V² like EEG, with a site effect), a quarter held
out. With ``--physionet`` (needs ../shared/data/eegmmidb and MOABB): the real
PhysioNet recordings, 5 subjects (imagined left vs right hand, 8-32 Hz,
128 Hz, Covariances("oas")) as 5 clients, a third of each subject's trials
held out. With 30 training trials per client, ε = 10 leaves SPDNet at chance
there: too few records per client for that budget.

Both train FederatedSPDNetClassifier at ε = 10 (δ = 1e-5, record-level) and
without privacy on the same split, and print the held-out accuracy and the ε
the accountant certifies. The estimator is not seeded (random_state=None), so
its noise is private and the accuracy varies a little from run to run.

    make demo        # or: python examples/demo.py [--physionet]
"""

import argparse
import importlib.util
import time
import warnings
from pathlib import Path

import numpy as np
from pyriemann.estimation import Covariances
from sklearn.model_selection import train_test_split

from skfedriem import FederatedSPDNetClassifier
from skfedriem.datasets import make_spd_classification

EEGMMIDB = Path(__file__).resolve().parents[2] / "shared" / "data" / "eegmmidb"


def physionet():
    from moabb.datasets import PhysionetMI
    from moabb.paradigms import LeftRightImagery

    from skfedriem.datasets import load_moabb, use_local_eegmmidb

    use_local_eegmmidb(EEGMMIDB)
    dataset = PhysionetMI(imagined=True)
    dataset.feet_runs = []  # only the left/right imagery runs are on disk
    X, y, groups = load_moabb(dataset, LeftRightImagery(fmin=8, fmax=32, resample=128), subjects=[1, 2, 3, 4, 5])
    covs = Covariances("oas").fit_transform(X)
    settings = dict(dims=(32,), n_rounds=100, batch_size=16, optimizer="adam", lr=1e-2)
    return "PhysioNet MI, 5 subjects as clients", covs, y, groups, settings


def synthetic():
    X, y, groups = make_spd_classification(
        n_clients=3, n_matrices_per_client=400, n_channels=22, n_classes=4, class_sep=0.3, noise=2.0,
        heterogeneity=0.3, scale=1e-10, random_state=0,
    )
    settings = dict(dims=(16,), n_rounds=60, batch_size=32, optimizer="adam", lr=1e-2)
    return "synthetic: 3 sites, 22 channels, 4 classes", X, y, groups, settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--physionet", action="store_true", help="the real PhysioNet recordings (5 subjects)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)
    real = args.physionet
    if real and not EEGMMIDB.is_dir():
        parser.error(f"--physionet needs the recordings in {EEGMMIDB}")
    if real and importlib.util.find_spec("moabb") is None:
        parser.error('--physionet needs MOABB: pip install -e ".[eeg]"')
    name, X, y, groups, settings = physionet() if real else synthetic()
    strata = np.char.add(groups.astype(str), y.astype(str))
    train, test = train_test_split(np.arange(len(y)), test_size=1 / 3 if real else 1 / 4, stratify=strata,
                                   random_state=0)
    print(f"{name}: {len(train)} training trials in {len(np.unique(groups))} clients, {len(test)} held out")
    for eps in (10.0, None):
        t0 = time.perf_counter()
        clf = FederatedSPDNetClassifier(eps=eps, delta=1e-5, verbose=1, **settings)  # unseeded: private noise
        clf.fit(X[train], y[train], groups=groups[train])
        accuracy = clf.score(X[test], y[test])
        label = "non-private" if eps is None else f"private eps={eps:g}"
        spent = ("no privacy guarantee" if eps is None
                 else f"privacy spent: eps = {clf.epsilon_:.3f}, delta = {clf.delta_:g}")
        print(f"{label:18} held-out accuracy {accuracy:.3f} (chance {1 / len(clf.classes_):.2f})  {spent}  "
              f"[{time.perf_counter() - t0:.1f} s]")


if __name__ == "__main__":
    main()
