"""
The accountant: ε against rounds, fixed-size and Poisson batches, and PriRFed's accounting
==========================================================================================

For one noise level, how much privacy does each round spend? skfedriem certifies the whole
run's composition of subsampled Gaussian steps (:func:`~skfedriem.privacy.epsilon_spent`):
``sampling="fixed"`` (the paper's theorem, batches of exactly B) or ``sampling="poisson"``.
PriRFed accounts each round separately and combines rounds with the advanced composition
theorem (:func:`~skfedriem.baselines.prirfed_epsilon`), which grows much faster: at equal
(ε, δ) it needs 5 to 6 times more noise.

Setting: q = B/m⋆ = 0.1, τ = 10 steps per round, noise multiplier σB/(2C) = 5 (μ0 = 0.2),
δ = 1e-5.
"""

import matplotlib.pyplot as plt
import numpy as np

from skfedriem.baselines import prirfed_epsilon
from skfedriem.privacy import epsilon_spent

mu0, q, tau, delta = 0.2, 0.1, 10, 1e-5
rounds = np.unique(np.geomspace(1, 200, 12).astype(int))
curves = {
    "ours, fixed-size batches": [epsilon_spent(mu0, q, r * tau, delta, "fixed") for r in rounds],
    "ours, Poisson batches": [epsilon_spent(mu0, q, r * tau, delta, "poisson") for r in rounds],
    "PriRFed's accounting": [prirfed_epsilon(mu0, delta, q, tau, int(r)) for r in rounds],
}
for name, eps in curves.items():
    print(f"{name:26} after 200 rounds: eps = {eps[-1]:.2f}")

fig, ax = plt.subplots(figsize=(5.5, 3.6))
for name, eps in curves.items():
    ax.plot(rounds, eps, "o-", label=name, markersize=3)
ax.set(xlabel="rounds T (τ = 10 steps each)", ylabel="certified ε at δ = 1e-5", xscale="log", yscale="log")
ax.legend()
fig.tight_layout()
