"""Where the noise is added: local noise, distributed noise and a trusted curator, at equal ε, on real and synthetic
federations.

Arms, each with the estimator's defaults (``"auto"`` planned):

* ``local``: ``noise="local"``, every client adds the whole noise;
* ``distributed``: ``noise="distributed"``, each client adds a share, the server decodes the sum (t = ⌈K/10⌉);
* ``central``: one client holding every training record, ``noise="distributed"`` with t = 0: the same discrete
  mechanism, total batch and accountant run once by a trusted curator.

Federations: the 24 real PhysioNet subjects (``--data``; left/right imagery, 8–32 Hz, 128 Hz, OAS covariances) as
24 clients of one subject and as 4 sites of 6 subjects, on 9 motor-cortex channels (FC3 FCz FC4 C3 Cz C4 CP3 CPz
CP4) and on all 64; and the synthetic 20-client task (8 channels, 60 trials a client, class_sep 0.5). A stratified
third of every subject's (client's) trials is held out; pyRiemann's TangentSpace + LogisticRegression on the pooled
training trials is the non-private reference.

    python benchmarks/distributed_noise.py [--seeds 3] [--eps 1 4 10 20] [--models tangent spdnet]
        [--federations 24x1 4x6 synthetic] [--channels motor all] [--rounds auto]
"""

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
from pyriemann.estimation import Covariances
from pyriemann.tangentspace import TangentSpace
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from skfedriem import FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem.datasets import load_moabb, make_spd_classification, use_local_eegmmidb

from physionet_real import held_out_mask  # the same stratified thirds as that benchmark

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eegmmidb"
MOTOR = ["FC3", "FCz", "FC4", "C3", "Cz", "C4", "CP3", "CPz", "CP4"]
MODELS = {"tangent": FederatedTangentSpaceClassifier, "spdnet": FederatedSPDNetClassifier}
ARMS = {"local": {"noise": "local"}, "distributed": {"noise": "distributed"},
        "central": {"noise": "distributed", "colluders": 0}}


def real_subjects(data: Path, channels: str):
    """(covariances, labels, subject) of the 24 subjects' left/right imagery."""
    X, y, subjects = raw_subjects(data, channels)
    return Covariances("oas").fit_transform(X), y, subjects


def raw_subjects(data: Path, channels: str):
    """(raw trials, labels, subject) of the 24 subjects' left/right imagery."""
    from moabb.datasets import PhysionetMI
    from moabb.paradigms import LeftRightImagery

    use_local_eegmmidb(data)
    dataset = PhysionetMI(imagined=True)
    dataset.feet_runs = []  # only the left/right imagery runs are on disk
    dataset.subject_list = [*range(1, 24), 42]
    paradigm = LeftRightImagery(fmin=8, fmax=32, resample=128, channels=MOTOR if channels == "motor" else None)
    X, y, subjects = load_moabb(dataset, paradigm, subjects=dataset.subject_list)
    return X, np.asarray(y), np.asarray(subjects)


def federations(args):
    """(name, X, y, clients, subjects) of every federation asked for."""
    if "synthetic" in args.federations:
        X, y, clients = make_spd_classification(20, 60, 8, class_sep=0.5, random_state=0)
        yield "synthetic 20x1", X, y, clients, clients
    real = [f for f in args.federations if f != "synthetic"]
    if not real or not args.data.is_dir():
        return
    for channels in args.channels:
        X, y, subjects = real_subjects(args.data, channels)
        codes = np.unique(subjects, return_inverse=True)[1]
        for name in real:
            sites = codes if name == "24x1" else codes // 6
            yield f"{channels} {name}", X, y, sites, subjects


def fit_arm(model, arm, eps, rounds, X, y, clients, train, test):
    """One fit's held-out accuracy, ε_central, ε_local, the noise std of the server's mean step, and its seconds."""
    settings = ARMS[arm]
    groups = np.zeros_like(clients) if arm == "central" else clients
    started = time.perf_counter()
    clf = MODELS[model](eps=eps, n_rounds=rounds, **settings).fit(X[train], y[train], groups=groups[train])
    k = np.unique(groups[train]).size
    # local noise: the mean of k clients' steps carries σ / √k (equal clients); distributed: noise_std_ is already
    # that of the decoded mean step
    mean_noise = clf.noise_std_ / np.sqrt(k) if arm == "local" else clf.noise_std_
    return {"accuracy": float(clf.score(X[test], y[test])), "epsilon": float(clf.epsilon_),
            "local_epsilon": float(clf.local_epsilon_), "mean_step_noise": float(mean_noise),
            "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--eps", type=float, nargs="+", default=[1.0, 4.0, 10.0, 20.0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--federations", nargs="+", default=["24x1", "4x6", "synthetic"])
    parser.add_argument("--channels", nargs="+", default=["motor", "all"])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rounds", default="auto", help='n_rounds of every fit (default "auto": planned)')
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rounds = args.rounds if args.rounds == "auto" else int(args.rounds)
    rows, references = [], {}
    print(f"held-out accuracy, mean of {args.seeds} seeds; the distributed arm's ε_central and ε_local; σ̄, the "
          "noise std of the server's mean step per coordinate")
    print(f"{'federation':<16} {'model':<8} {'eps':>4} | {'local':>6} {'distrib':>7} {'central':>7} | "
          f"{'ε_c':>5} {'ε_loc':>7} | {'σ̄ local':>8} {'σ̄ dist':>7}")
    for name, X, y, clients, subjects in federations(args):
        splits = [held_out_mask(y, subjects, seed) for seed in range(args.seeds)]
        references[name] = float(np.mean([make_pipeline(TangentSpace(), LogisticRegression(max_iter=1000))
                                           .fit(X[~t], y[~t]).score(X[t], y[t]) for t in splits]))
        for model in args.models:
            for eps in args.eps:
                runs = {arm: [fit_arm(model, arm, eps, rounds, X, y, clients, ~t, t) for t in splits] for arm in ARMS}
                row = {"federation": name, "model": model, "eps": eps, "clients": int(np.unique(clients).size),
                       **{f"{arm}_{key}": float(np.mean([r[key] for r in result])) for arm, result in runs.items()
                          for key in result[0]},
                       **{f"{arm}_accuracies": [r["accuracy"] for r in result] for arm, result in runs.items()}}
                rows.append(row)
                print(f"{name:<16} {model:<8} {eps:>4g} | {row['local_accuracy']:>6.3f} "
                      f"{row['distributed_accuracy']:>7.3f} {row['central_accuracy']:>7.3f} | "
                      f"{row['distributed_epsilon']:>5.2f} {row['distributed_local_epsilon']:>7.1f} | "
                      f"{row['local_mean_step_noise']:>8.3g} {row['distributed_mean_step_noise']:>7.3g}", flush=True)
    print("pyRiemann TangentSpace + LogisticRegression, pooled, no privacy: "
          + ", ".join(f"{name} {accuracy:.3f}" for name, accuracy in references.items()))
    print(json.dumps({"benchmark": "distributed_noise", "seeds": args.seeds, "rows": rows,
                      "pyriemann_ts_lr": references}))


if __name__ == "__main__":
    main()
