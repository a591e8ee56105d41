"""FederatedEEGNetClassifier: the Euclidean baseline (EEGNet on raw trials, FedAvg), same private protocol."""

from __future__ import annotations

from numbers import Integral

import numpy as np

from .._utils.compat import Interval, StrOptions
from ..models import EEGNet
from ._base import FederatedClassifier
from .planning import ClassifierSchedule

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
    F1, D, F2 : int, default=8, 2, 16
        EEGNet-F1,D with F2 pointwise filters.
    kernel_length : int, default=64
        Temporal kernel length in samples (half the sampling rate).
    normalization : {"group", "layer"} or None, default="layer"
        What normalises each trial's feature maps between the layers, on
        that trial alone (the per-record stand-in for EEGNet's batch
        normalisation): group normalisation, layer normalisation, or nothing
        (the paper's private EEGNet). See :class:`~skfedriem.models.EEGNet`.
    per_channel_scaling : bool, default=False
        Centre and scale each channel of a trial by its own standard deviation,
        instead of the whole trial by one.
    [federation parameters]

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
        Number of channels of the input trials.
    module_ : EEGNet
        The trained network (outputs logits).
    [fitted privacy attributes]

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X, y = 1e-5 * rng.standard_normal((60, 4, 64)), np.arange(60) % 2
    >>> clf = FederatedEEGNetClassifier(eps=10.0, F1=2, D=1, F2=2, kernel_length=8, n_rounds=2).fit(X, y)
    >>> clf.predict(X[:3]).shape
    (3,)
    """

    F1: int = 8
    D: int = 2
    F2: int = 16
    kernel_length: int = 64
    normalization: str | None = "layer"
    per_channel_scaling: bool = False

    _parameter_constraints: dict = {
        "normalization": [StrOptions({"group", "layer"}), None],
        "per_channel_scaling": ["boolean"],
        "F1": [Interval(Integral, 1, None, closed="left")],
        "D": [Interval(Integral, 1, None, closed="left")],
        "F2": [Interval(Integral, 1, None, closed="left")],
        "kernel_length": [Interval(Integral, 1, None, closed="left")],
    }
    schedule = ClassifierSchedule(
        name="eegnet", batch_size=16, optimizer="sgd", optimizer_without_privacy="adam", adam_lr=3e-3)
    _model_parameters = ("F1", "D", "F2", "kernel_length", "normalization", "per_channel_scaling", "dtype", "classes")

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
                      kernel_length=self.kernel_length, normalization=self.normalization,
                      per_channel=self.per_channel_scaling, generator=generator, dtype=dtype)
