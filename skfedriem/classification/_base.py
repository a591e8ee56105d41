"""What every federated private classifier shares: validation, the call into the engine, prediction.

Why not skorch's ``NeuralNetClassifier``: its training loop is one centralised
dataset iterated by a DataLoader, epoch by epoch; ours is T rounds of private
local steps on each client's own records followed by a manifold aggregation
(:class:`~skfedriem.federated.FederatedTrainer`). Overriding skorch's
``fit_loop``, ``get_iterator`` and ``train_step`` would leave only its
parameter routing in use, so the estimators are plain scikit-learn estimators
over the engine; the model's hyper-parameters are ordinary estimator
parameters that ``GridSearchCV`` can tune.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from numbers import Integral, Real

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted

from .._compat import Interval, StrOptions, validate_estimator_params
from .._estimator import FederatedEstimatorMixin
from ..privacy.accountings import RunAccounting

__all__ = ["FederatedClassifier"]

DTYPES = {"float32": torch.float32, "float64": torch.float64}
_NUMPY_DTYPES = {"float32": np.float32, "float64": np.float64}
_PREDICT_CHUNK = 1024


#: The target of a record a deployed site keeps but trains on nothing (a label outside the run's classes).
IGNORED_TARGET = -100


def per_record_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each record (no reduction), the loss every client minimises; 0 for an ignored target."""
    return F.cross_entropy(logits, target, reduction="none", ignore_index=IGNORED_TARGET)


def _forward_in_chunks(module: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([module(inputs[i : i + _PREDICT_CHUNK]) for i in range(0, len(inputs), _PREDICT_CHUNK)])


class FederatedClassifier(FederatedEstimatorMixin, ClassifierMixin, BaseEstimator, metaclass=ABCMeta):
    """Base of the federated private classifiers; subclasses say what X is and which network to train.

    Subclasses define ``__init__`` (all parameters, keyword-only, stored with
    ``self._store_parameters(locals())``), :meth:`_check_inputs` and :meth:`_build_module`.
    """

    _parameter_constraints: dict = {
        **FederatedEstimatorMixin._federation_constraints,
        "local_epochs": [Interval(Real, 0, None, closed="neither")],
        "local_steps": [Interval(Integral, 1, None, closed="left"), None],
        "lr_schedule": [StrOptions({"cosine", "constant"})],
        "accounting": [str, RunAccounting],
        "dtype": [StrOptions(set(DTYPES))],
        "classes": ["array-like", None],
    }

    @abstractmethod
    def _check_inputs(self, X: np.ndarray, name: str = "X") -> np.ndarray:
        """Model-specific checks of a validated array, finite in the model's dtype; returns it."""

    @abstractmethod
    def _build_module(self, input_shape: tuple[int, ...], n_classes: int, generator: torch.Generator | None,
                      dtype: torch.dtype) -> torch.nn.Module:
        """The untrained network (data-independent initialisation from ``generator``)."""

    def fit(self, X, y, groups=None, validation_data=None):
        """Train the network across the clients' trials.

        Parameters
        ----------
        X : array-like of shape (n_trials, ...)
            Trial i belongs to client ``groups[i]`` and is only used in that
            client's local steps (see the subclass for the trial's shape).
        y : array-like of shape (n_trials,)
            Class labels of any type.
        groups : array-like of shape (n_trials,), optional
            The client of each trial (e.g. subject or site). None: a random
            split into ``n_clients`` clients by trial position only (never by
            label: a split that depended on the labels would let one record
            move others between clients).
        validation_data : tuple (X_valid, y_valid), optional
            Held-out trials the server holds; ``history_`` reports loss and
            accuracy on them after every round. Training trials passed here
            would make ``history_`` a non-private diagnostic.

        Returns
        -------
        self
        """
        validate_estimator_params(self)
        warm = self._warm()
        X, y = self._validate(X, y, allow_nd=True, ensure_min_samples=2, reset=not warm)
        check_classification_targets(y)
        classes = self.classes_ if warm and self.classes is None else self._label_set(y)
        records = self.prepare_records(X, y, classes=classes)
        held_out = None
        if validation_data is not None:
            held_out = self._validation_records(validation_data, classes)
        return self._fit_federated(records, X.shape[1:], groups, classes=classes, held_out=held_out)

    def _label_set(self, y: np.ndarray) -> np.ndarray:
        """The public label set: ``classes`` when given, else the labels of ``y`` (which makes them public)."""
        if self.classes is None:
            classes = np.unique(y)
            if len(classes) < 2:
                raise ValueError(f"{type(self).__name__} needs at least 2 classes in y; got only "
                                 f"{classes.tolist()!r}. Pass the public label set as classes=.")
            return classes
        given = np.asarray(self.classes)
        classes = np.unique(given)
        if given.ndim != 1 or len(classes) != len(given) or len(classes) < 2:
            raise ValueError(f"The 'classes' parameter of {type(self).__name__} must list at least 2 distinct "
                             f"labels. Got {self.classes!r} instead.")
        return classes

    def _validation_records(self, validation_data, classes) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            X_valid, y_valid = validation_data
        except (TypeError, ValueError):
            raise TypeError(
                "The 'validation_data' parameter must be a pair (X_valid, y_valid). "
                f"Got {type(validation_data).__name__} instead."
            ) from None
        X_valid = self._validate(X_valid, name="X_valid", allow_nd=True, reset=False)
        y_valid = np.asarray(y_valid)
        if y_valid.shape != (len(X_valid),):
            raise ValueError(f"y_valid must have shape ({len(X_valid)},). Got {y_valid.shape} instead.")
        return self.prepare_records(X_valid, y_valid, classes=classes)

    # hooks of FederatedEstimatorMixin
    def _check_records(self, X: np.ndarray, name: str = "X") -> np.ndarray:
        """X in the model's dtype, finite there, after the model's own checks.

        Validation happens at the dtype the network computes in: a trial that is
        finite in float64 but overflows float32 is refused here, by index, rather
        than reaching the network as inf.
        """
        X = check_array(X, allow_nd=True, dtype=np.float64, input_name=name)
        cast = X.astype(_NUMPY_DTYPES[self.dtype], copy=False)
        bad = np.flatnonzero(~np.isfinite(cast.reshape(len(cast), -1)).all(axis=1))
        if bad.size:
            raise ValueError(
                f"{name}[{bad[0]}] is not finite in {self.dtype} (|values| up to {np.abs(X[bad[0]]).max():.3g}; "
                f"{self.dtype} holds at most {np.finfo(cast.dtype).max:.3g}). {bad.size} of {len(X)} trials are "
                "affected: rescale the data, or use dtype='float64'."
            )
        return self._check_inputs(cast, name=name)

    def _encode_targets(self, y, classes, *, ignore_unknown: bool = False) -> torch.Tensor:
        classes = np.asarray(classes)
        y = np.asarray(y)
        known = np.isin(y, classes)
        if not known.all() and not ignore_unknown:
            raise ValueError(f"y holds labels outside the classes {classes.tolist()!r}: "
                             f"{np.unique(y[~known]).tolist()!r}.")
        codes = np.full(len(y), IGNORED_TARGET, dtype=np.int64)
        codes[known] = LabelEncoder().fit(classes).transform(y[known])
        return torch.as_tensor(codes)

    def _model(self, input_shape, classes, generator):
        module = self._build_module(input_shape, len(classes), generator, DTYPES[self.dtype])
        return module, per_record_cross_entropy

    def _trainer_options(self) -> dict:
        local = ({"local_steps": self.local_steps} if self.local_steps is not None
                 else {"local_epochs": self.local_epochs})
        return {"lr_schedule": self.lr_schedule, "accounting": self.accounting, **local}

    def _monitor(self, validation: tuple[torch.Tensor, torch.Tensor], classes):
        inputs, targets = validation

        def monitor(module: torch.nn.Module) -> dict:
            logits = _forward_in_chunks(module, inputs)
            return {
                "valid_loss": float(F.cross_entropy(logits, targets)),
                "valid_accuracy": float((logits.argmax(1) == targets).double().mean()),
            }

        return monitor

    def _set_model_attributes(self, module, classes) -> None:
        self.module_ = module.eval()
        self.classes_ = np.asarray(classes)

    def _logits(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = self._check_records(self._validate(X, allow_nd=True, reset=False))
        return _forward_in_chunks(self.module_, torch.from_numpy(np.ascontiguousarray(X))).double().numpy()

    def decision_function(self, X):
        """Logits of each class.

        Parameters
        ----------
        X : array-like of shape (n_trials, ...)

        Returns
        -------
        scores : ndarray of shape (n_trials, n_classes), or (n_trials,) for two classes
            For two classes, the logit difference (positive means ``classes_[1]``).
        """
        logits = self._logits(X)
        if len(self.classes_) == 2:
            return logits[:, 1] - logits[:, 0]
        return logits

    def predict_proba(self, X):
        """Class probabilities (softmax of the logits).

        Parameters
        ----------
        X : array-like of shape (n_trials, ...)

        Returns
        -------
        proba : ndarray of shape (n_trials, n_classes)
        """
        logits = self._logits(X)
        logits -= logits.max(axis=1, keepdims=True)
        proba = np.exp(logits)
        return proba / proba.sum(axis=1, keepdims=True)

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`, computed stably."""
        logits = self._logits(X)
        logits -= logits.max(axis=1, keepdims=True)
        return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))

    def predict(self, X):
        """Most probable class of each trial.

        Parameters
        ----------
        X : array-like of shape (n_trials, ...)

        Returns
        -------
        y : ndarray of shape (n_trials,)
        """
        logits = self._logits(X)
        return self.classes_[logits.argmax(axis=1)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        tags.input_tags.allow_nan = False
        return tags
