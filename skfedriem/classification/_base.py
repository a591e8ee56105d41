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
from sklearn.utils.validation import check_is_fitted, validate_data

from .._clients import client_indices
from .._compat import Interval, StrOptions, validate_estimator_params
from .._seeding import run_seeds
from ..federated import AGGREGATIONS, FederatedTrainer
from ..federated.plan import ACCOUNTINGS
from ..privacy import PrivacyBudget

__all__ = ["FederatedClassifier"]

DTYPES = {"float32": torch.float32, "float64": torch.float64}
_NUMPY_DTYPES = {"float32": np.float32, "float64": np.float64}
_PREDICT_CHUNK = 1024


def per_record_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each record (no reduction), the loss every client minimises."""
    return F.cross_entropy(logits, target, reduction="none")


def _forward_in_chunks(module: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([module(inputs[i : i + _PREDICT_CHUNK]) for i in range(0, len(inputs), _PREDICT_CHUNK)])


class FederatedClassifier(ClassifierMixin, BaseEstimator, metaclass=ABCMeta):
    """Base of the federated private classifiers; subclasses say what X is and which network to train.

    Subclasses define ``__init__`` (all parameters, keyword-only),
    :meth:`_check_inputs` and :meth:`_build_module`.
    """

    _parameter_constraints: dict = {
        "eps": [Interval(Real, 0, None, closed="neither"), None],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "clip": [Interval(Real, 0, None, closed="neither")],
        "n_rounds": [Interval(Integral, 1, None, closed="left")],
        "local_epochs": [Interval(Real, 0, None, closed="neither")],
        "local_steps": [Interval(Integral, 1, None, closed="left"), None],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "clients_per_round": [Interval(Integral, 1, None, closed="left"), None],
        "aggregation": [StrOptions(set(AGGREGATIONS))],
        "optimizer": [StrOptions({"sgd", "adam"})],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "lr_schedule": [StrOptions({"cosine", "constant"})],
        "sampling": [StrOptions({"fixed", "poisson"})],
        "accounting": [StrOptions(set(ACCOUNTINGS))],
        "n_clients": [Interval(Integral, 1, None, closed="left")],
        "dtype": [StrOptions(set(DTYPES))],
        "random_state": ["random_state"],
        "secure_mode": ["boolean"],
        "privacy_budget": [PrivacyBudget, None],
        "client_timings": ["boolean"],
        "verbose": ["verbose"],
        "backend": [StrOptions({"local", "flower"})],
    }

    @abstractmethod
    def _check_inputs(self, X: np.ndarray, name: str = "X") -> np.ndarray:
        """Model-specific checks of a validated array, finite in the model's dtype; returns it."""

    @abstractmethod
    def _build_module(self, input_shape: tuple[int, ...], n_classes: int, generator: torch.Generator,
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
        X, y = validate_data(self, X, y, allow_nd=True, dtype=np.float64, ensure_min_samples=2)
        check_classification_targets(y)
        encoder = LabelEncoder().fit(y)
        if len(encoder.classes_) < 2:
            raise ValueError(
                f"{type(self).__name__} needs at least 2 classes in y; got only {encoder.classes_.tolist()!r}."
            )
        X = self._validated_trials(X)
        self.classes_ = encoder.classes_
        codes = encoder.transform(y)
        dtype = DTYPES[self.dtype]
        seeds = run_seeds(self.random_state, private=self.eps is not None, secure_mode=self.secure_mode,
                          owner=type(self).__name__)
        indices, names = client_indices(len(X), groups, n_clients=self.n_clients,
                                        rng=np.random.default_rng(seeds.split))
        init_gen = torch.Generator().manual_seed(int(seeds.init.generate_state(1)[0]))
        module = self._build_module(X.shape[1:], len(self.classes_), init_gen, dtype)
        monitor = None
        if validation_data is not None:
            monitor = self._validation_monitor(validation_data, encoder, dtype)
        inputs = torch.from_numpy(np.ascontiguousarray(X))
        targets = torch.as_tensor(codes, dtype=torch.long)
        local = {"local_steps": self.local_steps} if self.local_steps is not None else {
            "local_epochs": self.local_epochs
        }
        trainer = FederatedTrainer(
            module,
            per_record_cross_entropy,
            n_rounds=self.n_rounds,
            batch_size=self.batch_size,
            clients_per_round=self.clients_per_round,
            eps=self.eps,
            delta=self.delta,
            clip=self.clip,
            sampling=self.sampling,
            accounting=self.accounting,
            aggregation=self.aggregation,
            optimizer=self.optimizer,
            lr=self.lr,
            lr_schedule=self.lr_schedule,
            seed_sequence=seeds.server,
            client_seed=seeds.clients,
            secure_mode=self.secure_mode,
            privacy_budget=self.privacy_budget,
            run_name=repr(self),
            client_timings=self.client_timings,
            monitor=monitor,
            verbose=self.verbose,
            **local,
        ).fit([(inputs[idx], targets[idx]) for idx in indices], client_names=names,
              backend=self.backend)
        self.module_ = module.eval()
        for name, value in trainer.fitted_attributes().items():
            setattr(self, name, value)
        return self

    def _validation_monitor(self, validation_data, encoder: LabelEncoder, dtype: torch.dtype):
        try:
            X_valid, y_valid = validation_data
        except (TypeError, ValueError):
            raise TypeError(
                "The 'validation_data' parameter must be a pair (X_valid, y_valid). "
                f"Got {type(validation_data).__name__} instead."
            ) from None
        X_valid = self._validated_trials(validate_data(self, X_valid, allow_nd=True, dtype=np.float64, reset=False),
                                         name="X_valid")
        y_valid = np.asarray(y_valid)
        if y_valid.shape != (len(X_valid),):
            raise ValueError(f"y_valid must have shape ({len(X_valid)},). Got {y_valid.shape} instead.")
        unknown = np.setdiff1d(y_valid, encoder.classes_)
        if unknown.size:
            raise ValueError(f"y_valid holds labels absent from y: {unknown.tolist()!r}.")
        inputs = torch.from_numpy(np.ascontiguousarray(X_valid))
        targets = torch.as_tensor(encoder.transform(y_valid), dtype=torch.long)

        def monitor(module: torch.nn.Module) -> dict:
            logits = _forward_in_chunks(module, inputs)
            return {
                "valid_loss": float(F.cross_entropy(logits, targets)),
                "valid_accuracy": float((logits.argmax(1) == targets).double().mean()),
            }

        return monitor

    def _validated_trials(self, X: np.ndarray, name: str = "X") -> np.ndarray:
        """X (validated, float64) in the model's dtype, finite there, after the model's own checks.

        Validation happens at the dtype the network computes in: a trial that is
        finite in float64 but overflows float32 is refused here, by index, rather
        than reaching the network as inf.
        """
        cast = X.astype(_NUMPY_DTYPES[self.dtype], copy=False)
        bad = np.flatnonzero(~np.isfinite(cast.reshape(len(cast), -1)).all(axis=1))
        if bad.size:
            raise ValueError(
                f"{name}[{bad[0]}] is not finite in {self.dtype} (|values| up to {np.abs(X[bad[0]]).max():.3g}; "
                f"{self.dtype} holds at most {np.finfo(cast.dtype).max:.3g}). {bad.size} of {len(X)} trials are "
                "affected: rescale the data, or use dtype='float64'."
            )
        return self._check_inputs(cast, name=name)

    def _logits(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = self._validated_trials(validate_data(self, X, allow_nd=True, dtype=np.float64, reset=False))
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
