"""FederatedSPDNetClassifier: SPDNet on covariance matrices, trained across clients with record-level DP."""

from __future__ import annotations

from numbers import Real

import numpy as np

from .._compat import Interval
from .._spd import check_spd
from ..models import SPDNet
from ._base import FederatedClassifier

__all__ = ["FederatedSPDNetClassifier"]


class FederatedSPDNetClassifier(FederatedClassifier):
    """SPDNet classifier of covariance matrices, trained by DP-RFedProj across clients.

    Each client (a hospital, a lab, a subject...) keeps its trials; the server
    only sees the iterates. Every client runs private local steps (per-trial
    gradients projected to the tangent space, clipped, averaged, plus Gaussian
    noise, projected to the tangent space), the server averages the submissions with the
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
    dims : tuple of int or None, default=None
        Output size of each BiMap layer (one BiRe block per entry);
        non-increasing and at most n_channels. None: one block of
        min(16, n_channels), the paper's size where the data allow it.
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
    accounting : str or RunAccounting, default="rfedproj"
        A registered accounting method: the whole-run accounting of the
        paper, or ``"prirfed"``, PriRFed's per-round accounting and advanced
        composition (a baseline, with ``sampling="poisson"``; about 5x more
        noise at equal ε).
    classes : array-like of shape (n_classes,) or None, default=None
        The public label set. None: the labels found in ``y``, which treats
        the set of labels present in the clients' trials as public (replacing
        one trial could remove a class, and the network's output width with
        it). Set it for a private fit whose label set is known beforehand.
    n_clients : int, default=3
        When ``fit`` gets no ``groups``: the number of clients of a random
        split by trial position (not by label).
    dtype : {"float32", "float64"}, default="float32"
        Precision of the network; inputs are validated in it (a trial that
        overflows float32 is refused by index).
    random_state : int, RandomState instance or None, default=None
        None: the initial weights, the client split and the client selection
        use fresh OS entropy, and every client's batches and noise 128 bits of
        its own. An int (or RandomState) seeds everything, for reproducible
        experiments: anyone who knows it can replay the noise, so such a run
        is not private against them (a :class:`~skfedriem.exceptions.SeededNoiseWarning` says so).
    secure_mode : bool, default=False
        Batches and noise from the OS's cryptographically secure generator,
        with Gaussian sampling hardened against floating-point attacks
        (:class:`~skfedriem.privacy.SecureRandomness`); needs ``random_state=None``.
    privacy_budget : PrivacyBudget, optional
        A total budget shared by every fit on the same trials (grid search,
        cross-validation): the fit is charged before training and refused if
        the composition would exceed it.
    client_timings : bool, default=False
        Add ``round_seconds`` and ``submission_seconds`` to ``history_``: a
        non-private diagnostic (they time work on the clients' trials).
    warm_start : bool, default=False
        Continue from the fitted network (same channels and classes): the new
        rounds are calibrated to ``eps`` on their own, and ``epsilon_``
        composes every round run so far on the same trials, as does ``history_``.
    backend : {"local", "flower"}, default="local"
        ``"local"`` runs the clients in this process; ``"flower"`` runs the
        same protocol on Flower's simulation engine (one virtual SuperNode
        per client; same seeds, so the same model and ε). Needs
        ``pip install "skfedriem[flower]"``.
    n_jobs : int, default=None
        Worker processes running a round's clients at the same time
        (scikit-learn's convention: None is 1, -1 every CPU; at most one per
        client of a round). The model and ε do not depend on it. Every job
        computes with one thread (torch and BLAS) while fitting, which keeps
        tiny-matrix work fast on a busy machine; ``n_jobs`` is the knob for
        more cores. ``backend="local"`` only.
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
        Per round: ``round``, ``epsilon`` spent so far, ``lr``, ``clients``,
        ``replied``, ``aggregation_seconds`` (all post-processing of what the
        server sees); ``valid_loss`` and ``valid_accuracy`` when ``fit`` got
        ``validation_data`` (data the server holds; never the training trials);
        ``round_seconds`` and ``submission_seconds`` with ``client_timings``.
    ledger_ : PrivacyAccountant
        Every private step charged (all fits of a warm start).

    Examples
    --------
    >>> from skfedriem.datasets import make_spd_classification
    >>> X, y, groups = make_spd_classification(n_clients=3, n_matrices_per_client=60, n_channels=6,
    ...                                        random_state=0)
    >>> clf = FederatedSPDNetClassifier(eps=10.0, dims=(4,), n_rounds=5, batch_size=16).fit(X, y, groups=groups)
    >>> clf.predict(X[:3]).shape, clf.epsilon_ <= 10.0
    ((3,), True)
    """

    _parameter_constraints: dict = {
        **FederatedClassifier._parameter_constraints,
        "dims": [tuple, list, None],
        "reeig_eps": [Interval(Real, 0, None, closed="neither")],
    }

    def __init__(
        self,
        *,
        eps=10.0,
        delta=1e-5,
        clip=1.0,
        dims=None,
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
        return check_spd(X, name=name)

    def _build_module(self, input_shape, n_classes, generator, dtype):
        dims = (min(16, input_shape[0]),) if self.dims is None else tuple(self.dims)
        return SPDNet(input_shape[0], n_classes, dims, self.reeig_eps, generator=generator, dtype=dtype)
