"""
Personalised inputs: every client re-centred on its own privately released mean
================================================================================

EEG covariances of one subject (or one site: one amplifier, one montage) share a part of their
own, beside which the class signal is small. pyRiemann's transfer learning re-centres each domain
on its own Riemannian mean (``TLCenter``) before one shared classifier. With
``recentre="client"`` the covariance classifiers do the same under differential privacy: every
client releases its mean by a Gaussian mechanism of its own (a share of ``eps``, charged in
``epsilon_``), its trials are re-centred on that release, and the rounds train one model on
trials that all sit around the identity. At prediction, ``groups=`` names each trial's client
(re-centred on its released mean); a subject never seen is re-centred on its own trials' mean.

Here: 8 synthetic sites, each moved by a congruence of its own (a site effect), a stratified
third of every site's trials held out; the private tangent-space classifier at ε = 10, global and
re-centred, with local and distributed noise, beside pyRiemann's pipeline without privacy. The
study on the 24 real PhysioNet subjects is in the user guide ("Personalised models").
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from pyriemann.tangentspace import TangentSpace
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

from skfedriem import FederatedTangentSpaceClassifier
from skfedriem.datasets import make_spd_classification

warnings.filterwarnings("ignore", category=UserWarning)
X, y, sites = make_spd_classification(n_clients=8, n_matrices_per_client=60, n_channels=6, class_sep=0.3,
                                      random_state=0)
rng = np.random.default_rng(1)
for site in np.unique(sites):  # the site effect: each site's trials moved by a congruence of its own
    a = rng.standard_normal((6, 6)) * 0.5
    root = np.eye(6) + (a + a.T) / 4
    X[sites == site] = root @ X[sites == site] @ root.T
train, test = train_test_split(np.arange(len(y)), test_size=1 / 3, stratify=sites * 2 + y, random_state=0)

scores = {"pyRiemann TS + LR\n(no privacy)": make_pipeline(TangentSpace(), LogisticRegression()).fit(
    X[train], y[train]).score(X[test], y[test])}
for noise in ("local", "distributed"):
    for recentre in (None, "client"):
        clf = FederatedTangentSpaceClassifier(eps=10.0, noise=noise, recentre=recentre, random_state=0)
        clf.fit(X[train], y[train], groups=sites[train])
        score = clf.score(X[test], y[test], groups=sites[test] if recentre else None)
        scores[f"{noise} noise\n{'re-centred' if recentre else 'global'}"] = score
        print(f"{noise:11} {recentre or 'global':7} held-out accuracy {score:.3f}  epsilon_ {clf.epsilon_:.2f}")

# %%
# Every client's release is one Gaussian step at rate 1 in the ledger, beside the release of the
# federation's mean (the base point of the clients' tangent vectors) and the rounds:
print(clf.ledger_.history[:3])

fig, ax = plt.subplots(figsize=(7, 3.4))
ax.bar(range(len(scores)), list(scores.values()), color=["grey"] + ["tab:blue", "tab:orange"] * 2)
ax.set_xticks(range(len(scores)), list(scores), fontsize=8)
ax.axhline(0.5, color="black", ls=":", label="chance")
ax.set(ylim=(0.4, 1.0), ylabel="held-out accuracy", title="8 synthetic sites with a site effect, ε = 10")
ax.legend(loc="upper left")
fig.tight_layout()
plt.show()
