"""
Public pretraining: start a private fit from a model trained on public recordings
=================================================================================

With a few dozen trials per client, a private classifier trained from scratch spends most of
its budget finding where to start. Recordings that are already public (another study's
published data, consenting volunteers) cost nothing: train a model on them without privacy,
then pass it as ``init=`` to the private fit, which fine-tunes it on the clients' trials.
``epsilon_`` covers the private rounds only, and is all the clients' records ever cost.

Here PhysioNet motor imagery (imagined left vs right hand, the 21 channels over the motor cortex)
plays both parts:
subjects 1 and 2 stand for the public recordings, subjects 3–5 are the private clients, a third
of whose trials are held out. Both private fits use
:class:`~skfedriem.FederatedTangentSpaceClassifier` at the same reference point (the Riemannian
mean of the public covariances, so public too). When the recordings are not on this machine,
a synthetic federation of the same shape stands in and the figure says so.

Fine-tune with small steps: the private rounds add noise, and at a step made for a start from
zero, 200 noisy rounds can walk a good public model away from where it was; the public start
below is fine-tuned at ``lr=0.02``, and the figure shows where it ends against the public model
alone. What the public model knows depends on how alike the public and private subjects
are: with two other people's recordings, expect a modest gain at best on the real data.
"""

import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from pyriemann.geometry.mean import mean_riemann
from sklearn.model_selection import train_test_split

from skfedriem import FederatedTangentSpaceClassifier
from skfedriem.datasets import make_spd_classification

warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message="batch_size=")
warnings.filterwarnings("ignore", message=".* is seeded")  # seeds make the figure reproducible
warnings.filterwarnings("ignore", message="init: the weights")  # they are public here: see the text
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
    motor = [f"{row}{col}" for row in ("FC", "C", "CP") for col in ("5", "3", "1", "z", "2", "4", "6")]
    paradigm = LeftRightImagery(fmin=8, fmax=32, resample=128, channels=motor)
    trials, y, groups = load_moabb(dataset, paradigm, subjects=[1, 2, 3, 4, 5])
    X = Covariances("oas").fit_transform(trials)
    public = np.isin(groups, np.unique(groups)[:2])
    source = "PhysioNet MI: 2 public subjects, 3 private clients"
else:
    X, y, groups = make_spd_classification(n_clients=5, n_matrices_per_client=45, n_channels=21, class_sep=0.25,
                                           noise=1.5, scale=1e-10, random_state=0)
    public = groups < 2
    source = "SYNTHETIC stand-in (the PhysioNet recordings are not on this machine)"
Xp, yp, gp = X[~public], y[~public], groups[~public]
train, test = train_test_split(np.arange(len(yp)), test_size=1 / 3, stratify=np.char.add(gp.astype(str),
                                                                                            yp.astype(str)),
                               random_state=0)
print(source, X.shape)

# %%
# The public model: trained without privacy on the public subjects only (one client each).
reference = mean_riemann(X[public])
common = dict(reference=reference, classes=np.unique(y))
pretrained = FederatedTangentSpaceClassifier(eps=None, **common, random_state=0)
pretrained.fit(X[public], y[public], groups=groups[public])
print(f"public model alone: held-out accuracy {pretrained.score(Xp[test], yp[test]):.3f}")

# %%
# The private fits, from scratch and from the public model (fine-tuned at a small ``lr``), at three
# budgets (two seeds each).
budgets, seeds = (1.0, 4.0, 10.0), range(2)
scores = {"from scratch": [], "from the public model": []}
for eps in budgets:
    for label, start in (("from scratch", {}), ("from the public model", dict(init=pretrained, lr=0.02))):
        runs = [FederatedTangentSpaceClassifier(eps=eps, **start, **common, random_state=seed)
                .fit(Xp[train], yp[train], groups=gp[train]) for seed in seeds]
        scores[label].append([run.score(Xp[test], yp[test]) for run in runs])
        print(f"eps={eps:g} {label:22}: held-out accuracy {np.mean(scores[label][-1]):.3f} "
              f"(certified eps {max(run.epsilon_ for run in runs):.3f})")

fig, ax = plt.subplots(figsize=(6, 3.6))
for label, values in scores.items():
    values = np.asarray(values)
    ax.errorbar(budgets, values.mean(axis=1), yerr=values.std(axis=1), marker="o", capsize=3, label=label)
ax.axhline(pretrained.score(Xp[test], yp[test]), color="tab:green", ls="--", label="public model alone")
ax.axhline(0.5, color="grey", ls=":", label="chance")
ax.set(xscale="log", xticks=budgets, xticklabels=[f"{e:g}" for e in budgets], xlabel="ε (δ = 1e-5)",
       ylabel="held-out accuracy", title=source)
ax.legend(fontsize="small")
fig.tight_layout()
