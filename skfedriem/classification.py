"""FederatedSPDNetClassifier: SPDNet on covariance matrices, trained across clients with record-level DP.

Why not skorch's ``NeuralNetClassifier``: its training loop is one centralised
dataset iterated by a DataLoader, epoch by epoch; ours is T rounds of private
local steps on each client's own records followed by a manifold aggregation
(:class:`~skfedriem.federated.FederatedTrainer`). Overriding skorch's
``fit_loop``, ``get_iterator`` and ``train_step`` would leave only its
parameter routing in use, so the estimator is a plain scikit-learn estimator
over the engine; the model's hyper-parameters (``dims``, ``reeig_eps``) are
ordinary estimator parameters that ``GridSearchCV`` can tune.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ._clients import client_indices
from ._compat import Interval, StrOptions, validate_estimator_params
from ._spd import check_spd
from .federated import AGGREGATIONS, FederatedTrainer
from .models import SPDNet

__all__ = ["FederatedSPDNetClassifier"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}
_PREDICT_CHUNK = 4096


def _per_record_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, target, reduction="none")


class FederatedSPDNetClassifier(ClassifierMixin, BaseEstimator):
    """SPDNet classifier of covariance matrices, trained by DP-RFedProj across clients.

    Each client (a hospital, a lab, a subject...) keeps its trials; the server
    only sees the iterates. Every client runs private local steps (per-trial
    gradients projected to the tangent space, clipped, averaged, plus tangent
    Gaussian noise: SPEC §3), the server averages the submissions with the
    chosen manifold aggregation (the BiMap weights live on the Stiefel
    manifold, the linear layer is Euclidean and averaged), and the noise is
    calibrated so the whole run is (eps, delta)-DP with respect to replacing
    one trial of any client (Pautrel et al., 2026).

    Scale: every input matrix is divided by its own trace / n_channels inside
    the model (EEG covariances in V² sit far below the ReEig floor). No
    statistic is shared across trials, so this costs no privacy.

    Parameters
    ----------
    eps : float or None, default=10.0
        Target ε of the whole run; None trains without clipping and noise.
    delta : float, default=1e-5
        Target δ, in (0, 1); keep it well below 1 / (trials of the smallest client).
    clip : float, default=1.0
        Per-trial gradient clip norm C (over all parameters together).
    dims : tuple of int, default=(16,)
        Output size of each BiMap layer (one BiRe block per entry);
        non-increasing and at most n_channels.
    reeig_eps : float, default=1e-4
        ReEig floor ε_R (on trace-normalised matrices).
    n_rounds : int, default=200
        T, the number of communication rounds.
    local_epochs : float, default=1
        Local work per round: τ_i = ceil(local_epochs m_i / B) steps for a
        client of m_i trials. Each step draws a fresh uniform batch.
    local_steps : int or None, default=None
        When set, every client takes exactly this many steps per round and
        ``local_epochs`` is not used.
    batch_size : int, default=64
        B; clamped to the smallest client with a warning.
    clients_per_round : int or None, default=None
        k clients drawn per round without replacement; all when None.
    aggregation : {"projavg", "rlavg", "retavg", "kfavg"}, default="projavg"
    optimizer : {"sgd", "adam"}, default="adam"
        Local optimiser, fresh at each round.
    lr : float, default=1e-2
    lr_schedule : {"cosine", "constant"}, default="cosine"
        Learning rate as a function of the round.
    sampling : {"fixed", "poisson"}, default="fixed"
        Batches of exactly B trials, or Poisson sampling at rate B / m_i.
    n_clients : int, default=3
        When ``fit`` gets no ``groups``: the number of clients of a stratified
        random split.
    dtype : {"float32", "float64"}, default="float32"
        Precision of the network.
    random_state : int, RandomState instance or None, default=None
        Seeds the initial weights, the client split, client selection, batches
        and noise.
    verbose : int, default=0
        > 0 shows a progress bar over rounds.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
        Number of channels C of the input matrices.
    module_ : SPDNet
        The trained network (outputs logits).
    epsilon_ : float
        Certified ε of the run, an upper bound (inf when non-private).
    delta_ : float
    mu0_ : float or None
        Per-step Gaussian-DP parameter 2C / (Bσ).
    noise_std_ : float
        σ of each ambient noise coordinate.
    batch_size_ : int
        B after clamping.
    history_ : list of dict
        Per round: ``round``, ``epsilon`` spent so far, ``lr``, ``clients``;
        ``valid_loss`` and ``valid_accuracy`` when ``fit`` got
        ``validation_data`` (data the server holds; never the training trials).

    Examples
    --------
    >>> from skfedriem.datasets import make_spd_classification
    >>> X, y, groups = make_spd_classification(n_clients=3, n_matrices_per_client=60, n_channels=6,
    ...                                        random_state=0)
    >>> clf = FederatedSPDNetClassifier(eps=10.0, dims=(4,), n_rounds=5, batch_size=16,
    ...                                 random_state=0).fit(X, y, groups=groups)
    >>> clf.predict(X[:3]).shape, clf.epsilon_ <= 10.0
    ((3,), True)
    """

    _parameter_constraints: dict = {
        "eps": [Interval(Real, 0, None, closed="neither"), None],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "clip": [Interval(Real, 0, None, closed="neither")],
        "dims": [tuple, list],
        "reeig_eps": [Interval(Real, 0, None, closed="neither")],
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
        "n_clients": [Interval(Integral, 1, None, closed="left")],
        "dtype": [StrOptions(set(_DTYPES))],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        *,
        eps=10.0,
        delta=1e-5,
        clip=1.0,
        dims=(16,),
        reeig_eps=1e-4,
        n_rounds=200,
        local_epochs=1,
        local_steps=None,
        batch_size=64,
        clients_per_round=None,
        aggregation="projavg",
        optimizer="adam",
        lr=1e-2,
        lr_schedule="cosine",
        sampling="fixed",
        n_clients=3,
        dtype="float32",
        random_state=None,
        verbose=0,
    ):
        self.eps = eps
        self.delta = delta
        self.clip = clip
        self.dims = dims
        self.reeig_eps = reeig_eps
        self.n_rounds = n_rounds
        self.local_epochs = local_epochs
        self.local_steps = local_steps
        self.batch_size = batch_size
        self.clients_per_round = clients_per_round
        self.aggregation = aggregation
        self.optimizer = optimizer
        self.lr = lr
        self.lr_schedule = lr_schedule
        self.sampling = sampling
        self.n_clients = n_clients
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    def fit(self, X, y, groups=None, validation_data=None):
        """Train SPDNet across the clients' trials.

        Parameters
        ----------
        X : array-like of shape (n_matrices, n_channels, n_channels)
            SPD matrices (e.g. ``pyriemann.estimation.Covariances``); matrix
            i belongs to client ``groups[i]`` and is only used in that client's
            local steps.
        y : array-like of shape (n_matrices,)
            Class labels of any type.
        groups : array-like of shape (n_matrices,), optional
            The client of each matrix (e.g. subject or site). None: a
            stratified random split into ``n_clients`` clients.
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
                f"FederatedSPDNetClassifier needs at least 2 classes in y; got only {encoder.classes_.tolist()!r}."
            )
        check_spd(X)
        self.classes_ = encoder.classes_
        codes = encoder.transform(y)
        dtype = _DTYPES[self.dtype]
        seed = np.random.SeedSequence(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        init_seq, split_seq, train_seq = seed.spawn(3)
        indices, names = client_indices(
            len(X), groups, n_clients=self.n_clients, rng=np.random.default_rng(split_seq), stratify=codes
        )
        init_gen = torch.Generator().manual_seed(int(init_seq.generate_state(1)[0]))
        module = SPDNet(
            X.shape[1], len(self.classes_), tuple(self.dims), self.reeig_eps, generator=init_gen, dtype=dtype
        )
        monitor = None
        if validation_data is not None:
            monitor = self._validation_monitor(validation_data, encoder, dtype)
        inputs = torch.as_tensor(X, dtype=dtype)
        targets = torch.as_tensor(codes, dtype=torch.long)
        local = {"local_steps": self.local_steps} if self.local_steps is not None else {
            "local_epochs": self.local_epochs
        }
        trainer = FederatedTrainer(
            module,
            _per_record_cross_entropy,
            n_rounds=self.n_rounds,
            batch_size=self.batch_size,
            clients_per_round=self.clients_per_round,
            eps=self.eps,
            delta=self.delta,
            clip=self.clip,
            sampling=self.sampling,
            aggregation=self.aggregation,
            optimizer=self.optimizer,
            lr=self.lr,
            lr_schedule=self.lr_schedule,
            seed_sequence=train_seq,
            monitor=monitor,
            verbose=self.verbose,
            **local,
        ).fit([(inputs[idx], targets[idx]) for idx in indices], client_names=names)
        self.module_ = module.eval()
        self.epsilon_ = trainer.epsilon_
        self.delta_ = self.delta
        self.mu0_ = trainer.plan_.mu0
        self.noise_std_ = trainer.plan_.noise_std
        self.batch_size_ = trainer.plan_.batch_size
        self.history_ = trainer.history_
        return self

    def _validation_monitor(self, validation_data, encoder: LabelEncoder, dtype: torch.dtype):
        try:
            X_valid, y_valid = validation_data
        except (TypeError, ValueError):
            raise TypeError(
                "The 'validation_data' parameter must be a pair (X_valid, y_valid). "
                f"Got {type(validation_data).__name__} instead."
            ) from None
        X_valid = check_spd(validate_data(self, X_valid, allow_nd=True, dtype=np.float64, reset=False),
                            name="X_valid")
        y_valid = np.asarray(y_valid)
        if y_valid.shape != (len(X_valid),):
            raise ValueError(f"y_valid must have shape ({len(X_valid)},). Got {y_valid.shape} instead.")
        unknown = np.setdiff1d(y_valid, encoder.classes_)
        if unknown.size:
            raise ValueError(f"y_valid holds labels absent from y: {unknown.tolist()!r}.")
        inputs = torch.as_tensor(X_valid, dtype=dtype)
        targets = torch.as_tensor(encoder.transform(y_valid), dtype=torch.long)

        def monitor(module: torch.nn.Module) -> dict:
            with torch.no_grad():
                logits = module(inputs)
            return {
                "valid_loss": float(F.cross_entropy(logits, targets)),
                "valid_accuracy": float((logits.argmax(1) == targets).double().mean()),
            }

        return monitor

    def _logits(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = check_spd(validate_data(self, X, allow_nd=True, dtype=np.float64, reset=False))
        inputs = torch.as_tensor(X, dtype=_DTYPES[self.dtype])
        with torch.no_grad():
            chunks = [self.module_(inputs[i : i + _PREDICT_CHUNK]) for i in range(0, len(inputs), _PREDICT_CHUNK)]
        return torch.cat(chunks).double().numpy()

    def decision_function(self, X):
        """Logits of each class.

        Parameters
        ----------
        X : array-like of shape (n_matrices, n_channels, n_channels)

        Returns
        -------
        scores : ndarray of shape (n_matrices, n_classes), or (n_matrices,) for two classes
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
        X : array-like of shape (n_matrices, n_channels, n_channels)

        Returns
        -------
        proba : ndarray of shape (n_matrices, n_classes)
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
        """Most probable class of each matrix.

        Parameters
        ----------
        X : array-like of shape (n_matrices, n_channels, n_channels)

        Returns
        -------
        y : ndarray of shape (n_matrices,)
        """
        logits = self._logits(X)
        return self.classes_[logits.argmax(axis=1)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        tags.input_tags.allow_nan = False
        tags.non_deterministic = False
        return tags
