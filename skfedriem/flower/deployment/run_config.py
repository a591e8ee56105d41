"""From Flower's run and node configurations to estimators and site records (shared by every deployment app).

Run configuration (``--run-config``, public, the same for the server and every
site): the estimator's parameters, spelled with dashes (``n-rounds`` or
``rounds``, ``batch-size``, ``dims = "16"``, ``eps = "none"`` for a
non-private run, ``seed`` for ``random_state``, 0 for "all" in
``clients-per-round`` and for "one local epoch" in ``local-steps``), plus the
deployment's own keys (:data:`DEPLOYMENT_KEYS`).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_array

from ..._utils.compat import validate_estimator_params
from ..._utils.registry import Registry
from ...base import FederatedEstimatorMixin
from ...classification import FederatedEEGNetClassifier, FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from ...decomposition import FederatedPCA

__all__ = ["DEPLOYMENT_KEYS", "ESTIMATORS", "classes_from_run_config", "estimator_from_run_config", "register_deployable",
           "load_site_records", "load_site_subjects"]

#: The estimators a deployment can train, by the kind its Flower App project names (:func:`register_deployable`).
ESTIMATORS: Registry[type] = Registry("estimator kind")


def register_deployable(estimator: type[BaseEstimator], *, name: str | None = None, force: bool = False,
                        kind: str | None = None) -> type[BaseEstimator]:
    """Make an estimator class deployable as ``name`` (its Flower App project's apps are ``server_apps[name]``...).

    Parameters
    ----------
    estimator : type
        A federated estimator class (:class:`~skfedriem.base.FederatedEstimatorMixin`).
    name : str
        The estimator kind a Flower App project names.
    force : bool, default=False
        Replace a class already registered under that name.
    kind : str, optional
        Deprecated spelling of ``name`` (removed in 0.3).

    Returns
    -------
    estimator : type
        The same class.
    """
    if not (isinstance(estimator, type) and issubclass(estimator, FederatedEstimatorMixin)):
        raise TypeError(f"register_deployable needs a federated estimator class. Got {estimator!r}.")
    if kind is not None:
        warnings.warn("register_deployable(kind=...) is now register_deployable(name=...); kind= is removed in 0.3.",
                      FutureWarning, stacklevel=2)
        if name is not None and name != kind:
            raise ValueError(f"register_deployable got name={name!r} and kind={kind!r}: pass name= only.")
        name = kind
    if name is None:
        raise TypeError("register_deployable() needs the keyword argument 'name'.")
    return ESTIMATORS.register(estimator, name=name, force=force)


register_deployable(FederatedPCA, name="pca")
register_deployable(FederatedSPDNetClassifier, name="spdnet")
register_deployable(FederatedEEGNetClassifier, name="eegnet")
register_deployable(FederatedTangentSpaceClassifier, name="tangent")

#: Run-configuration keys of the deployment itself, not estimator parameters.
DEPLOYMENT_KEYS = {"n-clients", "output", "round-timeout", "resume", "classes", "validation-path"}

_ALIASES = {"rounds": "n_rounds", "seed": "random_state"}
_NONE_IF_ZERO = {"clients_per_round", "local_steps", "records_per_subject"}


def _convert(name: str, value):
    if name == "eps" and isinstance(value, str) and value.lower() in ("none", "inf"):
        return None
    if name == "random_state" and value == "":  # no seed: the public seeds are fresh OS entropy
        return None
    if name == "colluders" and value == "":  # ⌈K / 10⌉ (0 is a value of its own: no colluder)
        return None
    if name in _NONE_IF_ZERO and value == 0:
        return None
    if name == "reference" and isinstance(value, str):  # "": the identity; a mode; else the matrix, row by row
        if value.strip() in ("auto", "mean"):
            return value.strip()
        return _matrix_from_text(value) if value.strip() else None
    if name == "normalization" and value == "":  # EEGNet with nothing between its layers
        return None
    if name == "dims" and isinstance(value, str):  # "" keeps the estimator's default
        return tuple(int(d) for d in value.replace(" ", "").split(",") if d) or None
    return value


def _matrix_from_text(text: str) -> np.ndarray:
    # The run config carries the reference point's values, never a path: a path would have every site load a file
    # the server names from its own disk (a matrix computed from its records, say) into the features.
    values = np.array([float(v) for v in text.replace(",", " ").split()])
    size = int(round(np.sqrt(values.size)))
    if size * size != values.size:
        raise ValueError(f"{values.size} values do not make a square matrix")
    return values.reshape(size, size)


def estimator_from_run_config(kind: str, config) -> BaseEstimator:
    """A validated, unfitted estimator of ``kind`` from a Flower run configuration.

    Parameters
    ----------
    kind : {"pca", "spdnet", "eegnet", "tangent"}
        Which estimator.
    config : mapping
        The run configuration (``pyproject.toml``'s ``[tool.flwr.app.config]``,
        with ``flwr run --run-config`` overrides); dashes and case are ignored.

    Returns
    -------
    BaseEstimator

    Raises
    ------
    ValueError
        Naming an unknown key or a bad value.
    """
    cls = ESTIMATORS.get(kind)
    names = {name.lower(): name for name in cls().get_params()}
    params = {}
    for key, value in dict(config).items():
        if key in DEPLOYMENT_KEYS:
            continue
        lowered = key.replace("-", "_").lower()
        name = names.get(_ALIASES.get(lowered, lowered))
        if name is None:
            raise ValueError(f"Run config {key!r} is not a parameter of {cls.__name__} nor a deployment setting "
                             f"({sorted(DEPLOYMENT_KEYS)}).")
        try:
            params[name] = _convert(name, value)
        except (TypeError, ValueError):
            raise ValueError(f"Run config {key!r} = {value!r} is not valid.") from None
    if "classes" in names and str(config.get("classes", "")).strip():
        params["classes"] = tuple(classes_from_run_config(config).tolist())  # public, set by the run
    est = cls(**params)
    validate_estimator_params(est)
    return est


def classes_from_run_config(config) -> np.ndarray:
    """The federation's classes from ``classes = "left,right"`` (integers when every name is one).

    Parameters
    ----------
    config : mapping
        The run configuration.

    Returns
    -------
    ndarray

    Examples
    --------
    >>> classes_from_run_config({"classes": "0, 1"})
    array([0, 1])
    """
    names = [c.strip() for c in str(config.get("classes", "")).split(",") if c.strip()]
    if len(names) < 2:
        raise ValueError(f"A classifier deployment needs the run config 'classes' (at least 2, comma-separated, "
                         f"public). Got {config.get('classes')!r}.")
    try:
        return np.array([int(c) for c in names])
    except ValueError:
        return np.array(names)


def load_site_subjects(path: str | Path, key: str, n_records: int) -> np.ndarray:
    """Each of a site's records' subject: the array ``key`` of its ``.npz`` (node setting ``subject-key``).

    Parameters
    ----------
    path : str or Path
        The site's ``.npz`` file.
    key : str
        The array holding one subject label per record (e.g. MOABB's ``meta.subject``).
    n_records : int
        The file's number of records.

    Returns
    -------
    ndarray of int64
        Each record's subject code, 0 to n_subjects − 1.
    """
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"subject-key names an array of the site's .npz file; data-path {str(path)!r} is not one.")
    with np.load(path, allow_pickle=False) as archive:
        if key not in archive.files:
            raise ValueError(f"{path} has no array {key!r} (subject-key); it holds {archive.files}.")
        labels = archive[key]
    if labels.shape != (n_records,):
        raise ValueError(f"{path}: {key} must hold one subject per record, shape ({n_records},). Got {labels.shape}.")
    # labels that compare as themselves: integers, strings, booleans, finite floats (a NaN is not equal to itself,
    # and a structured, complex or date label could split one person into several subjects)
    if labels.dtype.kind not in "iuUSbf" or (labels.dtype.kind == "f" and not np.isfinite(labels).all()):
        raise ValueError(f"{path}: {key} must hold integer, string or finite float labels. Got dtype {labels.dtype}"
                         + (" with NaN or inf." if labels.dtype.kind == "f" else "."))
    return np.unique(labels, return_inverse=True)[1].astype(np.int64)


def load_site_records(path: str | Path, *, targets: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """A site's records: ``(X, y)`` from a ``.npz`` (arrays ``X`` and ``y``), or ``X`` from ``.npy``/``.csv``.

    Classifier sites need ``.npz`` files with labels, e.g. from MOABB::

        X, y, _ = skfedriem.datasets.load_moabb(dataset, paradigm, subjects=[3])
        np.savez("site-c.npz", X=pyriemann.estimation.Covariances("oas").fit_transform(X), y=y)

    (SPDNet takes the covariance matrices; EEGNet the raw trials ``X``.)

    Parameters
    ----------
    path : str or Path
        The file.
    targets : bool
        Whether labels are needed.

    Returns
    -------
    X : ndarray
    y : ndarray or None
    """
    path = Path(path)
    y = None
    if path.suffix == ".npz":
        required = ["X", "y"] if targets else ["X"]
        with np.load(path, allow_pickle=False) as archive:
            if any(name not in archive.files for name in required):
                raise ValueError(f"{path} must hold arrays named {required}; it holds {archive.files}.")
            X = archive["X"]
            y = archive["y"] if targets else None
    elif path.suffix == ".npy" and not targets:
        X = np.load(path, allow_pickle=False)
    elif path.suffix == ".csv" and not targets:
        X = np.loadtxt(path, delimiter=",", ndmin=2)
    else:
        kinds = ".npz (X, y)" if targets else ".npy, .csv or .npz"
        raise ValueError(f"The 'data-path' node setting must name a {kinds} file. Got {str(path)!r}.")
    # non-finite records are the estimator's to leave out (prepare_records(site=True)), not a reason to fail
    X = check_array(X, dtype=np.float64, allow_nd=True, ensure_min_samples=2, ensure_all_finite=False,
                    input_name=f"data-path {path}")
    if y is not None and y.shape != (len(X),):
        raise ValueError(f"{path}: y must have one label per record, shape ({len(X)},). Got {y.shape}.")
    return X, y
