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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.metrics import accuracy_score
from sklearn.preprocessing import LabelEncoder
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted

from .._utils.compat import HasMethods, StrOptions, _fit_context
from .._utils.user_warnings import warn_user
from ..base import FederatedEstimatorMixin, parameter, setting
from ..federated.instructions import iterate_tolerance
from ..federated.pricing import model_dimension
from ..privacy.accounting.accounting_methods import RunAccounting
from ..manifolds import manifold_of
from ..privacy.per_record.per_sample import trainable_parameters
from .planning import (PLANNED, SCHEDULES, ClassifierSchedule, plan_classifier_run, planned_optimizer,
                       warn_if_saturating, warn_if_unlearnable)

__all__ = ["FederatedClassifier"]

DTYPES = {"float32": torch.float32, "float64": torch.float64}
_NUMPY_DTYPES = {"float32": np.float32, "float64": np.float64}
_PREDICT_CHUNK = 1024


#: The target of a record a deployed site keeps but trains on nothing (a label outside the run's classes).
IGNORED_TARGET = -100


def per_record_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each record (no reduction), the loss every client minimises; 0 for an ignored target."""
    return F.cross_entropy(logits, target, reduction="none", ignore_index=IGNORED_TARGET)


@contextmanager
def _linear_algebra_in_words(dtype: str) -> Iterator[None]:
    """torch's ``LinAlgError`` (an eigendecomposition that failed to converge) as a ValueError with a remedy."""
    try:
        yield
    except torch.linalg.LinAlgError as error:
        raise ValueError(f"An eigendecomposition failed in {dtype} ({error}). The matrices are too ill-conditioned "
                         "for this precision: use dtype='float64', or regularise the covariance estimator "
                         "(e.g. Covariances('oas')).") from error


def _check_label_types(labels: np.ndarray, name: str) -> None:
    """ValueError when ``labels`` mix strings with numbers (numpy cannot sort them: no label set)."""
    if labels.dtype != object:
        return
    kinds = {isinstance(label, str) for label in labels.ravel()}
    if len(kinds) > 1:
        strings = next(label for label in labels.ravel() if isinstance(label, str))
        other = next(label for label in labels.ravel() if not isinstance(label, str))
        raise ValueError(f"{name} mixes strings and other labels (e.g. {strings!r} and {other!r}): they have no "
                         f"common order, so no label set. Convert them to one type, e.g. {name}.astype(str).")


def _label_kind(labels: np.ndarray) -> str:
    """'bool', 'number', 'string' or 'other': what kind of value a label array holds."""
    if labels.dtype.kind == "b":
        return "bool"
    if labels.dtype.kind in "iuf":
        return "number"
    if labels.dtype.kind in "US":
        return "string"
    values = labels.ravel().tolist()
    for kind, types in (("bool", (bool, np.bool_)), ("string", str)):
        if values and all(isinstance(v, types) for v in values):
            return kind
    if values and all(isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_))
                      for v in values):
        return "number"
    return "other"


def _check_same_kind(classes: np.ndarray, labels, what: str, name: str) -> None:
    """ValueError when ``labels`` are of another kind than ``classes`` (bools against numbers match by equality,
    True == 1, and predict would return the classes' type)."""
    labels = np.asarray(labels)
    if labels.size and _label_kind(classes) != _label_kind(labels):
        raise ValueError(f"{what} lists {_label_kind(classes)} labels but {name} holds {_label_kind(labels)} labels "
                         f"(e.g. {labels.ravel()[0]!r}); they would be matched by equality (True == 1) and predict "
                         f"would return the classes' type. Got classes={classes.tolist()!r}; give {name} in the "
                         "classes' type.")


def _forward_in_chunks(module: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([module(inputs[i : i + _PREDICT_CHUNK]) for i in range(0, len(inputs), _PREDICT_CHUNK)])


class FederatedClassifier(FederatedEstimatorMixin, ClassifierMixin, BaseEstimator, metaclass=ABCMeta):
    """Base of the federated private classifiers; subclasses say what X is and which network to train.

    Subclasses declare their own parameters as annotated class attributes
    (every parameter here is theirs too, documented on each), say what
    ``schedule`` the planner follows, and implement :meth:`_check_inputs` and
    :meth:`_build_module`.

    Parameters
    ----------
    [federation parameters]
    """

    eps: float | str | None = 10.0
    n_rounds: int | str = setting("n_rounds", "auto", values=PLANNED["n_rounds"])
    batch_size: int | str | None = setting("batch_size", "auto", values=PLANNED["batch_size"])
    optimizer: str | Callable = setting("optimizer", "auto", values=PLANNED["optimizer"])
    lr: float | str = setting("lr", "auto", values=PLANNED["lr"])
    local_epochs: float | str = setting("local_epochs", "auto", values=PLANNED["local_epochs"])
    lr_schedule: str | Callable = setting("lr_schedule", "auto", values=PLANNED["lr_schedule"])
    accounting: str | RunAccounting = setting("accounting")
    clip_quantile: float = setting("clip_quantile")
    classes: ArrayLike | None = parameter(
        None, "array-like of shape (n_classes,) or None",
        "The public label set. None: the labels found in ``y``, which treats the set of labels present in the "
        "clients' trials as public (replacing one trial could remove a class, and the network's output width "
        "with it). Set it for a private fit whose label set is known beforehand.", ["array-like", None])
    init: object = parameter(
        None, "fitted classifier, torch.nn.Module, state dict or None",
        "A model trained on *public* records (other subjects, another dataset) to start from: a fitted "
        "classifier of the same architecture, its ``module_``, or a ``state_dict()``. Its weights (and a "
        "covariance classifier's reference point, which ``reference=\"auto\"`` then keeps) are "
        "public (nothing is charged for them); the private rounds fine-tune them, and ``epsilon_`` covers "
        "those rounds only: a fitted classifier's own privacy loss is not included, and a module's or state "
        "dict's origin cannot be traced (a warning says so in both cases); if the weights were trained on any "
        "of these clients' records, continue that fit with ``warm_start`` or count both fits in one "
        "``PrivacyBudget``. The trained blocks must have this model's names and shapes (and lie on its "
        "manifolds); a fitted classifier's ``classes_`` must be this fit's. Inside ``GridSearchCV`` or "
        "``cross_val_score``, pass ``fitted.module_``: scikit-learn's ``clone`` unfits estimator-valued "
        "parameters. None: the model's own data-independent initialisation. Not used when ``warm_start`` "
        "continues a fitted model.",
        [None, Mapping, torch.nn.Module, HasMethods(["fit", "predict"])])
    dtype: str = parameter(
        "float32", '{"float32", "float64"}', "Precision of the network; inputs are validated in it (a trial that "
        "overflows or underflows float32 is refused by index).", [StrOptions(set(DTYPES))])

    #: What :func:`~skfedriem.classification.planning.plan_classifier` knows of this model (declared by each
    #: model's class, which registers it under its name).
    schedule: ClassVar[ClassifierSchedule]

    # groups= at prediction re-centres a client's trials (recentre="client"): a router passes it only where asked
    # (set_predict_request(groups=True), ...), so cross_val_score(params={"groups": ...}) runs as before
    __metadata_request__predict = {"groups": False}
    __metadata_request__predict_proba = {"groups": False}
    __metadata_request__predict_log_proba = {"groups": False}
    __metadata_request__decision_function = {"groups": False}
    __metadata_request__score = {"groups": False}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        schedule = cls.__dict__.get("schedule")
        if schedule is None:
            return
        if schedule.name in SCHEDULES.names() and SCHEDULES.get(schedule.name) != schedule:
            raise ValueError(f"{cls.__name__}.schedule is named {schedule.name!r}, the name of another model's "
                             f"schedule ({SCHEDULES.get(schedule.name)!r}): give the model a name of its own.")
        SCHEDULES.register(schedule, name=schedule.name, force=True)

    @abstractmethod
    def _check_inputs(self, X: np.ndarray, name: str = "X") -> np.ndarray:
        """Model-specific checks of a validated array, finite in the model's dtype; returns it."""

    @abstractmethod
    def _build_module(self, input_shape: tuple[int, ...], n_classes: int, generator: torch.Generator | None,
                      dtype: torch.dtype) -> torch.nn.Module:
        """The untrained network (data-independent initialisation from ``generator``)."""

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, groups=None, validation_data=None, subjects=None):
        """Train the network across the clients' trials.

        Parameters
        ----------
        X : array-like of shape (n_trials, ...)
            Trial i belongs to client ``groups[i]`` and is only used in that
            client's local steps (see the subclass for the trial's shape).
        y : array-like of shape (n_trials,)
            Class labels of any type.
        groups : array-like of shape (n_trials,), optional
            The client of each trial (e.g. subject or site). None: clients of
            whole subjects when ``subjects`` is given (``subject_clients``),
            else a random split into ``n_clients`` clients by trial position
            only (never by label: a split that depended on the labels would
            let one record move others between clients).
        validation_data : tuple (X_valid, y_valid), optional
            Held-out trials the server holds; ``history_`` reports loss and
            accuracy on them after every round. Training trials passed here
            would make ``history_`` a non-private diagnostic. With
            ``recentre="client"`` they are read as one new subject's
            trials (re-centred on their own mean).
        subjects : array-like of shape (n_trials,), optional
            The person each trial comes from (MOABB's ``meta.subject``;
            requested under metadata routing, so MOABB's
            ``CrossSubjectEvaluation`` passes it). Without ``groups`` it forms
            the clients from whole subjects (``subject_clients``). With
            ``privacy_unit="subject"`` each subject's trials must sit at one
            client; None there: each client is one subject.

        Returns
        -------
        self
        """
        warm = self._warm()
        X, y = self._validate(X, y, allow_nd=True, ensure_min_samples=2, reset=not warm)
        _check_label_types(y, "y")
        check_classification_targets(y)
        if warm and self.classes is None:
            classes = self.classes_
            _check_same_kind(classes, y, f"The fitted {type(self).__name__} (classes_)", "y")
        else:
            classes = self._label_set(y)
        records = self.prepare_records(X, y, classes=classes)
        held_out = None
        if validation_data is not None:
            held_out = self._validation_records(validation_data, classes, X.shape[1:])
        with _linear_algebra_in_words(self.dtype):
            return self._fit_federated(records, X.shape[1:], groups, subjects=subjects, classes=classes,
                                       held_out=held_out)

    def _label_set(self, y: np.ndarray) -> np.ndarray:
        """The public label set: ``classes`` when given, else the labels of ``y`` (which makes them public)."""
        if self.classes is None:
            classes = np.unique(y)
            if len(classes) < 2:
                raise ValueError(f"{type(self).__name__} needs at least 2 classes in y; got only "
                                 f"{classes.tolist()!r}. Pass the public label set as classes=.")
            return classes
        given = np.asarray(self.classes)
        _check_label_types(given, "classes")
        classes = np.unique(given)
        if given.ndim != 1 or len(classes) != len(given) or len(classes) < 2:
            raise ValueError(f"The 'classes' parameter of {type(self).__name__} must list at least 2 distinct "
                             f"labels. Got {self.classes!r} instead.")
        _check_same_kind(given, y, f"The 'classes' parameter of {type(self).__name__}", "y")
        return classes

    def _validation_records(self, validation_data, classes, shape: tuple[int, ...]
                            ) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            X_valid, y_valid = validation_data
        except (TypeError, ValueError):
            raise TypeError(
                "The 'validation_data' parameter must be a pair (X_valid, y_valid). "
                f"Got {type(validation_data).__name__} instead."
            ) from None
        if tuple(np.shape(X_valid)[1:]) != tuple(shape):
            raise ValueError(f"validation_data's X_valid holds records of shape {tuple(np.shape(X_valid)[1:])}; the "
                             f"training X holds {tuple(shape)} (the same channels, in the same order, are needed).")
        X_valid = self._validate(X_valid, name="X_valid", allow_nd=True, reset=False)
        y_valid = np.asarray(y_valid)
        if y_valid.shape != (len(X_valid),):
            raise ValueError(f"y_valid must have shape ({len(X_valid)},). Got {y_valid.shape} instead.")
        _check_same_kind(np.asarray(classes), y_valid, f"{type(self).__name__}'s label set", "y_valid")
        unknown = np.setdiff1d(np.unique(y_valid), np.asarray(classes))
        if unknown.size:
            raise ValueError(f"validation_data's y_valid holds labels outside the training classes "
                             f"{np.asarray(classes).tolist()}: {unknown.tolist()}.")
        # read as the model reads a new subject's trials (re-centred on their own mean, with recentre="client")
        X_valid = self._inputs_for(self._check_records(X_valid, name="X_valid"), None)
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
        flat, flat64 = cast.reshape(len(cast), -1), X.reshape(len(X), -1)
        bad = np.flatnonzero(~np.isfinite(flat).all(axis=1))
        if bad.size:
            raise ValueError(
                f"{name}[{bad[0]}] is not finite in {self.dtype} (|values| up to {np.abs(X[bad[0]]).max():.3g}; "
                f"{self.dtype} holds at most {np.finfo(cast.dtype).max:.3g}). {bad.size} of {len(X)} trials are "
                "affected: rescale the data, or use dtype='float64'."
            )
        tiny = np.finfo(cast.dtype).tiny
        lost = np.flatnonzero(((flat64 != 0) & (np.abs(flat) < tiny)).any(axis=1))
        if lost.size:
            raise ValueError(
                f"{name}[{lost[0]}] has values below the smallest normal {self.dtype} number ({tiny:.3g}; "
                f"|values| down to {np.abs(flat64[lost[0]][flat64[lost[0]] != 0]).min():.3g}): they lose their "
                f"precision or vanish in {self.dtype}. {lost.size} of {len(X)} trials are affected: rescale the "
                "data, or use dtype='float64'."
            )
        try:
            return self._check_inputs(cast, name=name)
        except ValueError:
            if cast.dtype != np.float64:
                self._check_inputs(X, name=name)  # fails too: the data's own fault, and its message says so
                raise ValueError(f"{name} passes this estimator's checks in float64 but not in {self.dtype}, "
                                 "where rounding changes it: use dtype='float64' (or rescale or regularise the "
                                 "data).") from None
            raise

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

    def _placeholder_record(self, shape: tuple[int, ...]) -> np.ndarray:
        # the identity for square records (an SPD input every layer computes with), zeros for raw trials
        return np.eye(shape[0]) if len(shape) == 2 and shape[0] == shape[1] else np.zeros(shape)

    def _without_weight(self, targets: torch.Tensor, invalid: np.ndarray) -> torch.Tensor:
        targets = targets.clone()
        targets[torch.from_numpy(invalid)] = IGNORED_TARGET
        return targets

    def _model(self, input_shape, classes, generator):
        module = self._build_module(input_shape, len(classes), generator, DTYPES[self.dtype])
        if self.init is not None and not self._warm():  # a warm start continues its own model
            self._start_from_init(module, classes)
        return module, per_record_cross_entropy

    def _init_state(self) -> Mapping | None:
        """The public start's state dict (``init`` a fitted classifier, a module or a state dict), or None when it has
        none to read (:meth:`_start_from_init` says why)."""
        source = self.init
        if isinstance(source, BaseEstimator):
            source = getattr(source, "module_", None)
        if isinstance(source, torch.nn.Module):
            return source.state_dict()
        return source if isinstance(source, Mapping) else None

    def _start_from_init(self, module: torch.nn.Module, classes) -> None:
        """Copy the public ``init`` weights into ``module``, or a ValueError saying why they do not fit it."""
        source, name = self.init, type(self).__name__
        if source is self:
            raise ValueError(f"The 'init' parameter of {name} is the estimator itself: continue a fit with "
                             "warm_start=True, which keeps its privacy ledger.")
        if isinstance(source, BaseEstimator):
            if not isinstance(source, FederatedClassifier):
                raise ValueError(f"The 'init' parameter of {name} is a {type(source).__name__}, which has no network "
                                 "to start from: pass a fitted skfedriem classifier of the same architecture, its "
                                 "module_, or module_.state_dict().")
            if getattr(source, "module_", None) is None:
                raise ValueError(f"The 'init' parameter of {name} is an unfitted {type(source).__name__} (note that "
                                 "scikit-learn's clone unfits estimator-valued parameters: pass init=fitted.module_ "
                                 "or fitted.module_.state_dict() inside GridSearchCV or cross_val_score).")
            if hasattr(source, "classes_") and not np.array_equal(np.asarray(source.classes_), np.asarray(classes)):
                raise ValueError(f"The 'init' parameter of {name} was fitted on classes "
                                 f"{np.asarray(source.classes_).tolist()!r}; this fit has classes "
                                 f"{np.asarray(classes).tolist()!r}. Pass classes= to match them.")
            if hasattr(source, "epsilon_"):
                warn_user(f"init: the weights (and any reference point) of the fitted {type(source).__name__} are "
                          "treated as public; its own "
                          f"privacy loss (epsilon_={source.epsilon_:.4g}) is not part of this fit's epsilon_. If it "
                          "was trained on any of these clients' records, continue it with warm_start=True (which "
                          "composes its ledger) or count both fits in one PrivacyBudget.")
            source = source.module_
        else:
            warn_user(f"init: the weights (and any reference point) of a {type(source).__name__} are treated as "
                      "public and nothing is charged "
                      "for them. skfedriem cannot tell where a module's or a state dict's weights come from: if they "
                      "were trained on any of these clients' records (a private fit's module_ included), their "
                      "privacy loss is not part of this fit's epsilon_; continue that fit with warm_start=True, or "
                      "count both fits in one PrivacyBudget.")
        state = source.state_dict() if isinstance(source, torch.nn.Module) else dict(source)
        params = trainable_parameters(module)
        known = set(params) | {n for n, _ in module.named_buffers()}
        missing, unexpected = sorted(set(params) - set(state)), sorted(set(state) - known)
        if missing or unexpected:
            raise ValueError(f"The 'init' parameter of {name} does not fit this model: it has blocks {sorted(state)}, "
                             f"the model {sorted(params)} (missing {missing}, unexpected {unexpected}).")
        with torch.no_grad():
            for block, param in params.items():
                value = torch.as_tensor(state[block]).detach().to(param.dtype)
                if tuple(value.shape) != tuple(param.shape):
                    raise ValueError(f"The 'init' parameter of {name} has {block!r} of shape {tuple(value.shape)}; "
                                     f"this model's is {tuple(param.shape)} (other channels, classes or sizes?).")
                ok, reason = manifold_of(param).check_point(value, atol=iterate_tolerance(param.dtype), explain=True)
                if not ok:
                    raise ValueError(f"The 'init' parameter of {name} has {block!r} off the model's manifold "
                                     f"{manifold_of(param)!r}: {reason}.")
                param.copy_(value)
        for block, buffer in module.named_buffers():
            if block not in state:
                raise ValueError(f"The 'init' parameter of {name} has no {block!r}: its weights cannot be checked "
                                 "against this model's (pass the public model's full state_dict()).")
            given = torch.as_tensor(state[block]).detach().double()
            resolution = 100 * torch.finfo(buffer.dtype).eps * float(buffer.abs().max())
            if given.shape != buffer.shape or not torch.allclose(given, buffer.double(), rtol=0, atol=resolution):
                raise ValueError(f"The 'init' parameter of {name} was built with another {block!r} than this model "
                                 f"(its weights only mean something with its own): set this estimator's {block!r} "
                                 "to the one the public model used.")

    def _plan_run(self, input_shape, clients, eps, *, diameter=2.0, dimension=0):
        """The run's complete settings and the server's plan of them, planned from public quantities
        (:func:`~skfedriem.classification.planning.plan_classifier_run`)."""
        if clients.sizes is None:
            raise ValueError(f"{type(self).__name__}.make_trainer needs client_sizes (the clients' public numbers "
                             "of records) to plan its 'auto' settings.")
        self._plan = plan_classifier_run(self.schedule, {**self.get_params(deep=False), "eps": eps},
                                         list(clients.sizes), diameter=diameter, client_names=clients.names,
                                         dimension=dimension)
        return self._plan.trainer_settings, self._plan.privacy

    def _warn_of_plan(self, trainer) -> None:
        warn_if_unlearnable(self._plan, model_dimension(trainer.module))
        warn_if_saturating(self._plan)

    def client_optimizer(self):
        return planned_optimizer(self.schedule, self.optimizer, private=self.eps is not None)

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
        self.plan_ = self._plan

    def _logits(self, X, groups=None) -> np.ndarray:
        check_is_fitted(self)
        X = self._check_records(self._validate(X, allow_nd=True, reset=False))
        if X.shape[1:] != self._input_shape:
            raise ValueError(f"{type(self).__name__} was fitted on trials of shape {self._input_shape}; X has trials "
                             f"of shape {X.shape[1:]}. Resample or crop them to the fitted shape.")
        X = self._inputs_for(X, groups)
        with _linear_algebra_in_words(self.dtype):
            return _forward_in_chunks(self.module_, torch.from_numpy(np.ascontiguousarray(X))).double().numpy()

    def _inputs_for(self, X: np.ndarray, groups) -> np.ndarray:
        """The trials as the model reads them, for the clients ``groups`` names (only personalised inputs read it:
        ValueError here, where it would not be used)."""
        if groups is not None:
            raise ValueError(f"{type(self).__name__}.predict got groups=, which only re-centred inputs read "
                             "(recentre='client' of the covariance classifiers): it would not be used. Drop it.")
        return X

    def decision_function(self, X, groups=None):
        """Logits of each class.

        Parameters
        ----------
        X : array-like of shape (n_trials, ...)
        groups : array-like of shape (n_trials,), optional
            The client (or new subject) of each trial, with ``recentre="client"``.

        Returns
        -------
        scores : ndarray of shape (n_trials, n_classes), or (n_trials,) for two classes
            For two classes, the logit difference (positive means ``classes_[1]``).
        """
        logits = self._logits(X, groups)
        if len(self.classes_) == 2:
            return logits[:, 1] - logits[:, 0]
        return logits

    def predict_proba(self, X, groups=None):
        """Class probabilities (softmax of the logits).

        Parameters
        ----------
        X : array-like of shape (n_trials, ...)
        groups : array-like of shape (n_trials,), optional
            The client (or new subject) of each trial, with ``recentre="client"``.

        Returns
        -------
        proba : ndarray of shape (n_trials, n_classes)
        """
        logits = self._logits(X, groups)
        logits -= logits.max(axis=1, keepdims=True)
        proba = np.exp(logits)
        return proba / proba.sum(axis=1, keepdims=True)

    def predict_log_proba(self, X, groups=None):
        """Logarithm of :meth:`predict_proba`, computed stably."""
        logits = self._logits(X, groups)
        logits -= logits.max(axis=1, keepdims=True)
        return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))

    def predict(self, X, groups=None):
        """Most probable class of each trial.

        Parameters
        ----------
        X : array-like of shape (n_trials, ...)
        groups : array-like of shape (n_trials,), optional
            The client (or new subject) of each trial, with ``recentre="client"``.

        Returns
        -------
        y : ndarray of shape (n_trials,)
        """
        logits = self._logits(X, groups)
        return self.classes_[logits.argmax(axis=1)]

    def score(self, X, y, sample_weight=None, groups=None):
        """Mean accuracy of :meth:`predict` on ``X`` against ``y``.

        Parameters
        ----------
        X : array-like of shape (n_trials, ...)
        y : array-like of shape (n_trials,)
        sample_weight : array-like of shape (n_trials,), optional
        groups : array-like of shape (n_trials,), optional
            The client (or new subject) of each trial, with ``recentre="client"``.

        Returns
        -------
        float
        """
        return float(accuracy_score(y, self.predict(X, groups=groups), sample_weight=sample_weight))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        tags.input_tags.allow_nan = False
        return tags
