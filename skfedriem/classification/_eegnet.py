"""FederatedEEGNetClassifier: the Euclidean baseline (EEGNet on raw trials, FedAvg), same private protocol."""

from __future__ import annotations

from numbers import Integral

import numpy as np

from .._compat import Interval
from ..models import EEGNet
from ._base import FederatedClassifier

__all__ = ["FederatedEEGNetClassifier"]


class FederatedEEGNetClassifier(FederatedClassifier):
    """EEGNet on raw EEG trials, trained across clients with record-level (ε, δ)-DP.

    The baseline of Pautrel et al. (2026): the same private local step,
    accountant and protocol as :class:`FederatedSPDNetClassifier`, but every
    parameter is Euclidean, so every aggregation rule is FedAvg. EEGNet
    (Lawhern et al., 2018) without batch normalisation or dropout (see
    :class:`skfedriem.models.EEGNet`); each trial is scaled by its own standard
    deviation inside the model.

    Parameters
    ----------
    eps : float or None, default=10.0
    delta : float, default=1e-5
    clip : float, default=1.0
    F1, D, F2 : int, default=8, 2, 16
        EEGNet-F1,D with F2 pointwise filters.
    kernel_length : int, default=64
        Temporal kernel length in samples (half the sampling rate).
    n_rounds : int, default=200
    local_epochs : float, default=1
    local_steps : int or None, default=None
    batch_size : int, default=16
    clients_per_round : int or None, default=None
    aggregation : {"projavg", "rlavg", "retavg", "kfavg"}, default="projavg"
        All reduce to FedAvg here (no manifold parameter).
    optimizer : {"sgd", "adam"}, default="adam"
    lr : float, default=1e-3
    lr_schedule : {"cosine", "constant"}, default="cosine"
    sampling : {"fixed", "poisson"}, default="fixed"
    accounting : {"rfedproj", "prirfed"}, default="rfedproj"
    classes : array-like of shape (n_classes,) or None, default=None
        The public label set. None: the labels found in ``y``, which treats
        the set of labels present in the clients' trials as public (replacing
        one trial could remove a class, and the network's output width with
        it). Set it for a private fit whose label set is known beforehand.
    n_clients : int, default=3
    dtype : {"float32", "float64"}, default="float32"
    random_state : int, RandomState instance or None, default=None
        None: fresh OS entropy, and each client's batches and noise are
        private. An int seeds everything (reproducible): anyone who knows it
        can remove the noise (a :class:`~skfedriem.exceptions.SeededNoiseWarning` says so).
    secure_mode : bool, default=False
        Batches and noise from the OS's cryptographically secure generator,
        hardened against floating-point attacks; needs ``random_state=None``.
    privacy_budget : PrivacyBudget, optional
        A total budget shared by every fit on the same trials; a fit that would
        exceed it is refused before training.
    client_timings : bool, default=False
        Add ``round_seconds`` and ``submission_seconds`` to ``history_`` (not private).
    warm_start : bool, default=False
        Continue from the fitted network; ``epsilon_`` composes every round run so far.
    backend : {"local", "flower"}, default="local"
    n_jobs : int, default=None
        Worker processes running a round's clients at the same time
        (scikit-learn's convention: None is 1, -1 every CPU; at most one per
        client of a round). The model and ε do not depend on it. Every job
        computes with one thread (torch and BLAS) while fitting, which keeps
        tiny-matrix work fast on a busy machine; ``n_jobs`` is the knob for
        more cores. ``backend="local"`` only.
    verbose : int, default=0

    Attributes
    ----------
    classes_, n_features_in_ (channels), module_ (EEGNet), epsilon_, delta_, mu0_,
    noise_std_, batch_size_, history_, ledger_ : as for :class:`FederatedSPDNetClassifier`.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X, y = 1e-5 * rng.standard_normal((60, 4, 64)), np.arange(60) % 2
    >>> clf = FederatedEEGNetClassifier(eps=10.0, F1=2, D=1, F2=2, kernel_length=8, n_rounds=2).fit(X, y)
    >>> clf.predict(X[:3]).shape
    (3,)
    """

    _parameter_constraints: dict = {
        **FederatedClassifier._parameter_constraints,
        "F1": [Interval(Integral, 1, None, closed="left")],
        "D": [Interval(Integral, 1, None, closed="left")],
        "F2": [Interval(Integral, 1, None, closed="left")],
        "kernel_length": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        *,
        eps=10.0,
        delta=1e-5,
        clip=1.0,
        F1=8,
        D=2,
        F2=16,
        kernel_length=64,
        n_rounds=200,
        local_epochs=1,
        local_steps=None,
        batch_size=16,
        clients_per_round=None,
        aggregation="projavg",
        optimizer="adam",
        lr=1e-3,
        lr_schedule="cosine",
        sampling="fixed",
        accounting="rfedproj",
        classes=None,
        n_clients=3,
        dtype="float32",
        random_state=None,
        secure_mode=False,
        privacy_budget=None,
        client_timings=False,
        warm_start=False,
        backend="local",
        n_jobs=None,
        verbose=0,
    ):
        self._store_parameters(locals())

    def _check_inputs(self, X: np.ndarray, name: str = "X") -> np.ndarray:
        if X.ndim != 3:
            raise ValueError(f"{name} must hold raw trials, shape (n_trials, n_channels, n_times). "
                             f"Got shape {X.shape} instead.")
        if X.shape[2] < 32:
            raise ValueError(f"{name} must have n_times >= 32 samples for EEGNet's pooling. Got {X.shape[2]}.")
        return X

    def _build_module(self, input_shape, n_classes, generator, dtype):
        n_channels, n_times = input_shape
        return EEGNet(n_channels, n_times, n_classes, F1=self.F1, D=self.D, F2=self.F2,
                      kernel_length=self.kernel_length, generator=generator, dtype=dtype)
