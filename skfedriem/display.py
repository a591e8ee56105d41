"""HistoryDisplay: a fitted federated estimator's ``history_`` as a figure, the scikit-learn way.

Like scikit-learn's ``LearningCurveDisplay``: build it with
:meth:`HistoryDisplay.from_estimator` (or :meth:`~HistoryDisplay.from_history`
for a deployment's ``result.json``), draw it with :meth:`~HistoryDisplay.plot`,
and find the figure, axes and lines in ``figure_``, ``axes_`` and ``lines_``.
Everything it draws is post-processing of what the server saw.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["HistoryDisplay"]

#: The held-out metrics ``history_`` may hold, and how to label them.
METRICS = {"valid_accuracy": "validation accuracy", "valid_loss": "validation loss",
           "optimality_gap": "optimality gap (reference data)"}


class HistoryDisplay:
    """The privacy spent, the held-out metrics and the participation of every round of a federated fit.

    Parameters
    ----------
    rounds : array-like of int
        The round numbers.
    epsilon : array-like of float
        The certified ε spent after each round (inf for a non-private fit).
    target_epsilon : float or None, default=None
        The ε the fit was calibrated to (drawn as a line).
    metrics : dict of str to array-like, default=None
        Held-out metrics per round (``valid_accuracy``, ``valid_loss``, ``optimality_gap``...).
    participation : array-like of float, default=None
        The fraction of the selected clients that replied, per round.
    estimator_name : str, default=None
        Used in the title.

    Attributes
    ----------
    figure_ : matplotlib.figure.Figure
    axes_ : ndarray of matplotlib Axes
        Privacy, metrics (one axis per metric) and participation, in that order.
    lines_ : dict of str to matplotlib artist
        What each series was drawn as (``"epsilon"``, ``"target_epsilon"``, each metric, ``"participation"``).

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from skfedriem import FederatedPCA
    >>> from skfedriem.datasets import make_federated_pca
    >>> X, groups = make_federated_pca(n_clients=3, n_samples_per_client=100, n_features=6, random_state=0)
    >>> pca = FederatedPCA(eps=2.0, solver="riemannian", n_rounds=5).fit(X, groups=groups, reference_X=X)
    >>> display = HistoryDisplay.from_estimator(pca)
    >>> sorted(display.lines_)
    ['epsilon', 'optimality_gap', 'participation', 'target_epsilon']
    """

    def __init__(self, *, rounds, epsilon, target_epsilon=None, metrics=None, participation=None,
                 estimator_name=None) -> None:
        self.rounds = np.asarray(rounds)
        self.epsilon = np.asarray(epsilon, dtype=float)
        self.target_epsilon = target_epsilon
        self.metrics = {name: np.asarray(values, dtype=float) for name, values in (metrics or {}).items()}
        self.participation = None if participation is None else np.asarray(participation, dtype=float)
        self.estimator_name = estimator_name

    @classmethod
    def from_history(cls, history: list[dict], *, target_epsilon: float | None = None, estimator_name=None,
                     ax=None) -> HistoryDisplay:
        """Build and draw the display of a ``history_`` list (a fitted estimator's, or a deployment's ``result.json``).

        Parameters
        ----------
        history : list of dict
        target_epsilon : float or None, default=None
        estimator_name : str, default=None
        ax : matplotlib Axes or sequence of them, optional
            Where to draw (see :meth:`plot`).

        Returns
        -------
        HistoryDisplay
        """
        if not history:
            raise ValueError("The history is empty: fit the estimator first (history_ has one entry per round).")
        metrics = {name: [h[name] for h in history] for name in METRICS if name in history[0]}
        participation = [len(h["replied"]) / max(1, len(h["clients"])) for h in history]
        display = cls(rounds=[h["round"] for h in history], epsilon=[h["epsilon"] for h in history],
                      target_epsilon=target_epsilon, metrics=metrics, participation=participation,
                      estimator_name=estimator_name)
        return display.plot(ax=ax)

    @classmethod
    def from_estimator(cls, estimator, *, ax=None) -> HistoryDisplay:
        """Build and draw the display of a fitted federated estimator's ``history_``.

        Parameters
        ----------
        estimator : fitted FederatedPCA, FederatedSPDNetClassifier, FederatedEEGNetClassifier...
            Or a fitted Pipeline ending in one (its last step is drawn).
        ax : matplotlib Axes or sequence of them, optional
            Where to draw (see :meth:`plot`).

        Returns
        -------
        HistoryDisplay
        """
        if not hasattr(estimator, "history_") and hasattr(estimator, "steps"):  # a Pipeline: its federated step
            estimator = estimator.steps[-1][1]
        if not hasattr(estimator, "history_"):
            raise ValueError(f"{type(estimator).__name__} is not fitted: HistoryDisplay draws its history_.")
        return cls.from_history(estimator.history_, target_epsilon=getattr(estimator, "eps", None),
                                estimator_name=type(estimator).__name__, ax=ax)

    def plot(self, ax=None) -> HistoryDisplay:
        """Draw ε per round (and its target), each held-out metric, and the participation.

        Parameters
        ----------
        ax : matplotlib Axes or sequence of them, optional
            One axis per panel (privacy, each metric, participation); a new
            figure by default.

        Returns
        -------
        self
        """
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

        panels = 2 + len(self.metrics) if self.participation is not None else 1 + len(self.metrics)
        if ax is None:
            # at most two panels a row: four in one row make a strip a page shrinks to a few hundred pixels high
            columns = min(panels, 2)
            rows = -(-panels // columns)
            figure, grid = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows), squeeze=False)
            axes = grid.ravel()[:panels]
            for spare in grid.ravel()[panels:]:
                spare.remove()
        else:
            axes = np.atleast_1d(ax)
            if len(axes) != panels:
                raise ValueError(f"HistoryDisplay.plot needs {panels} axes (privacy, {len(self.metrics)} metric(s), "
                                 f"participation). Got {len(axes)}.")
            figure = axes[0].figure
        self.lines_ = {}
        privacy = axes[0]
        if np.isfinite(self.epsilon).any():
            (self.lines_["epsilon"],) = privacy.plot(self.rounds, self.epsilon, marker=".", label="certified ε spent")
            if self.target_epsilon is not None and math.isfinite(self.target_epsilon):
                self.lines_["target_epsilon"] = privacy.axhline(self.target_epsilon, color="grey", ls="--",
                                                                label="target ε")
            privacy.legend(loc="lower right")
        else:
            privacy.text(0.5, 0.5, "not private (ε = inf)", ha="center", va="center", transform=privacy.transAxes)
        privacy.set(xlabel="round", ylabel="ε spent")
        for axis, (name, values) in zip(axes[1:], self.metrics.items()):
            (self.lines_[name],) = axis.plot(self.rounds, values, marker=".")
            axis.set(xlabel="round", ylabel=METRICS.get(name, name))
        if self.participation is not None:
            last = axes[-1]
            self.lines_["participation"] = last.bar(self.rounds, self.participation, color="tab:green")
            last.set(xlabel="round", ylabel="clients that replied / selected", ylim=(0, 1.05))
        for axis in axes:
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        if self.estimator_name:
            figure.suptitle(self.estimator_name)
        figure.tight_layout()
        self.figure_, self.axes_ = figure, np.asarray(axes)
        return self
