"""
FederatedPCA: privacy against utility, and the cost of the subspace's dimension
===============================================================================

Five clients hold 1000 records each in 20 dimensions. We learn their principal subspace with
:class:`~skfedriem.FederatedPCA` at several privacy levels and measure how much of the pooled,
non-private answer it recovers (:func:`~skfedriem.metrics.subspace_overlap`, 1 = the same
subspace). Then, at a fixed ε, the privacy cost (private minus non-private optimality gap)
against the intrinsic dimension :math:`d_{\\mathcal M} = p(d - p)` of the Grassmann manifold:
the noise lives in the tangent space, so the cost grows with :math:`d_{\\mathcal M}`.

Reduced scale (the paper uses 50 clients × 5000 records, 200 rounds): 50 rounds of 5 steps,
2 runs per ε and 4 per dimension (mean ± standard error). The noise is not seeded.
"""

import matplotlib.pyplot as plt
import numpy as np

from skfedriem import FederatedPCA
from skfedriem.datasets import make_federated_pca
from skfedriem.metrics import pca_optimality_gap, subspace_overlap

n_features, n_clients = 20, 5
settings = dict(solver="riemannian", n_rounds=50, local_steps=5, batch_size=100, lr=1.0, clip=0.1)


def pooled_subspace(X, p):
    return np.linalg.eigh(X.T @ X)[1][:, -p:].T


# %%
# Utility against ε
# -----------------
X, groups = make_federated_pca(n_clients=n_clients, n_samples_per_client=1000, n_features=n_features,
                               n_components=2, random_state=0)
best = pooled_subspace(X, 2)
epsilons = [0.25, 0.5, 1.0, 2.0, 4.0]
overlap = {eps: [subspace_overlap(FederatedPCA(n_components=2, eps=eps, **settings).fit(X, groups=groups)
                                  .components_, best) for _ in range(2)] for eps in epsilons}
non_private = subspace_overlap(FederatedPCA(n_components=2, eps=None, random_state=0, **settings)
                               .fit(X, groups=groups).components_, best)
for eps in epsilons:
    print(f"eps = {eps:<5} overlap {np.mean(overlap[eps]):.3f}")
print(f"non-private  overlap {non_private:.3f}")

# %%
# Privacy cost against the intrinsic dimension
# --------------------------------------------
costs, errors = {}, {}
for p in (1, 3, 6):
    Xp, gp = make_federated_pca(n_clients=n_clients, n_samples_per_client=1000, n_features=n_features,
                                n_components=p, random_state=1)
    clean = pca_optimality_gap(FederatedPCA(n_components=p, eps=None, random_state=0, **settings)
                               .fit(Xp, groups=gp).components_, Xp)
    noisy = [pca_optimality_gap(FederatedPCA(n_components=p, eps=1.0, **settings).fit(Xp, groups=gp).components_, Xp)
             for _ in range(4)]
    d_m = p * (n_features - p)
    costs[d_m], errors[d_m] = np.mean(noisy) - clean, np.std(noisy) / 2
    print(f"p = {p}  d_M = {d_m:3d}  privacy cost {costs[d_m]:.2e} ± {errors[d_m]:.1e}")

fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
left.plot(epsilons, [np.mean(overlap[e]) for e in epsilons], "o-", label="private")
left.axhline(non_private, color="grey", ls="--", label="non-private")
left.set(xscale="log", xlabel="ε (δ = 1e-5)", ylabel="overlap with the pooled subspace", ylim=(0, 1.05))
left.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
left.minorticks_off()
left.legend()
right.errorbar(list(costs), list(costs.values()), yerr=list(errors.values()), fmt="o-", capsize=3)
right.set(xlabel="intrinsic dimension $d_M = p(d-p)$", ylabel="privacy cost (gap)", title="ε = 1")
fig.tight_layout()
