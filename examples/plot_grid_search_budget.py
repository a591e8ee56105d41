"""
Hyper-parameter search under a privacy budget
=============================================

Every ``fit`` on the same records is a release: a grid search over 3 learning rates with 3-fold
cross-validation fits 10 times (9 folds and the refit), and the privacy of all 10 composes. A
:class:`~skfedriem.privacy.PrivacyBudget` passed to the estimator is charged by every fit
(scikit-learn's clones share it), composes their privacy-loss distributions, which is much
tighter than adding their ε, and refuses, before training, a fit that would take it past its
total. Planned for the search's 10 fits (``n_fits=PrivacyBudget.n_fits_for(cv, grid)``), it gives
each fit with ``eps="budget"`` its share, so the refit, which gives you the model, is never the fit
refused; ``budget.summary()`` says what was spent and what is left. (The clients here are a random
split of the records by position, as ``fit`` warns: pass ``groups`` through metadata routing for
real sites.)
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.model_selection import GridSearchCV

from skfedriem import FederatedSPDNetClassifier
from skfedriem.datasets import make_spd_classification
from skfedriem.exceptions import PrivacyBudgetExceeded
from skfedriem.privacy import PrivacyAccountant, PrivacyBudget

X, y, _ = make_spd_classification(n_clients=3, n_matrices_per_client=80, n_channels=8, class_sep=1.0,
                                  random_state=0)
grid = {"lr": [3e-3, 1e-2, 3e-2]}
budget = PrivacyBudget(epsilon=25.0, delta=1e-5, n_fits=PrivacyBudget.n_fits_for(3, grid))  # 3 x 3 + 1 = 10
clf = FederatedSPDNetClassifier(eps="budget", n_rounds=10, batch_size=16, optimizer="adam", privacy_budget=budget)
search = GridSearchCV(clf, grid, cv=3).fit(X, y)
print(f"best lr {search.best_params_['lr']}, cv accuracy {search.best_score_:.3f}")
print(budget.summary())

# %%
# The ledger, fit by fit: replay it into a budget without a limit to see the total grow.
fits = budget.fits
alone = [f["epsilon"] for f in fits]
replay, running = PrivacyBudget(np.inf), []
for f in fits:
    replay.charge(PrivacyAccountant.from_state_dict({"history": f["steps"]}), label=f["label"])
    running.append(replay.spent())
print(f"{len(fits)} fits, each eps <= {max(alone):.2f}; composed {budget.spent():.2f}, summed {sum(alone):.2f}")

# %%
# The budget is used: one more fit, even a small one, is refused before it trains.
try:
    FederatedSPDNetClassifier(eps=1.0, n_rounds=10, batch_size=16, privacy_budget=budget).fit(X, y)
except PrivacyBudgetExceeded as refused:
    print("refused:", refused)

fig, ax = plt.subplots(figsize=(5.5, 3.6))
ax.plot(range(1, len(fits) + 1), np.cumsum(alone), "o-", label="sum of the fits' ε")
ax.plot(range(1, len(fits) + 1), running, "o-", label="composed (PrivacyBudget)")
ax.axhline(budget.epsilon, color="grey", ls="--", label="budget")
ax.set(xlabel="fits so far", ylabel="ε at δ = 1e-5")
ax.legend()
fig.tight_layout()
