"""FederatedSPDNetClassifier: SPDNet on covariance matrices, trained across clients with record-level DP."""

from __future__ import annotations

from numbers import Real

import numpy as np

from .._utils.compat import Interval
from ..models import SPDNet
from ._reference import CovarianceClassifier
from .planning import ClassifierSchedule

__all__ = ["FederatedSPDNetClassifier"]


class FederatedSPDNetClassifier(CovarianceClassifier):
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

    Centre: every input is first whitened by a reference point R,
    X ↦ R^{-1/2} X R^{-1/2} (:class:`~skfedriem.models.recentring.Recentre`),
    so that the BiMap sees each trial's difference from the federation's
    common part rather than that part (real EEG covariances share one that
    dwarfs the class signal). By default R is the clients' log-Euclidean
    mean, released privately before the rounds exactly as
    :class:`FederatedTangentSpaceClassifier` releases its reference point
    (a :data:`~skfedriem.classification.REFERENCE_SHARE` of ``eps``, charged
    and composed with the rounds in ``epsilon_``, shrunk by the noise it
    carries; skipped where that noise would bury it). On the 24 real
    PhysioNet subjects this is what makes the private SPDNet learn as the
    tangent model does (user guide, "EEG").

    Parameters
    ----------
    dims : tuple of int or None, default=None
        Output size of each BiMap layer (one BiRe block per entry);
        non-increasing and at most n_channels. None: one block of
        min(16, n_channels), the paper's size where the data allow it.
    reeig_eps : float, default=1e-4
        ReEig floor ε_R (on trace-normalised matrices), in (0, 1): their
        eigenvalues average 1, so a floor at or above 1 flattens every
        spectrum to the identity and nothing is learnt.
    reference : array-like of shape (n_channels, n_channels), {"auto", "mean"} or None, default="auto"
        The point R the inputs are whitened by, as
        :class:`FederatedTangentSpaceClassifier`'s ``reference``: ``"mean"``
        the clients' log-Euclidean mean, released and charged before the
        rounds; ``"auto"`` that mean (exact without privacy), unless its
        planned noise would bury it or the rounds' ``accounting`` is not
        ``"rfedproj"`` (then, under ``eps="budget"`` and in a deployment, no
        whitening), and with ``init`` the public start's own point; an
        array, a public SPD matrix, charged nothing; None, no whitening (the
        paper's SPDNet).
    recentre : {"client"} or None, default=None
        ``"client"``: every client's trials re-centred on its own privately
        released mean before the rounds, and at prediction (``groups=``), as
        :class:`FederatedTangentSpaceClassifier`'s ``recentre`` (user guide,
        "Personalised models"); the inputs then sit around the identity, where
        the BiMap reads them.
    [federation parameters]

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
        Number of channels C of the input matrices.
    module_ : SPDNet
        The trained network (outputs logits).
    reference_ : ndarray of shape (n_channels, n_channels)
        The (trace-normalised) point the inputs are whitened by (the identity:
        none): with the clients' mean, post-processing of its release, which
        ``ledger_`` charges.
    personal_means_ : dict
        With ``recentre="client"``: each client's released mean
        (trace-normalised; post-processing of its charged release), by client
        label. A client whose mean lay within its unit is absent.
    [fitted privacy attributes]

    Examples
    --------
    >>> from skfedriem.datasets import make_spd_classification
    >>> X, y, groups = make_spd_classification(n_clients=3, n_matrices_per_client=60, n_channels=6,
    ...                                        random_state=0)
    >>> clf = FederatedSPDNetClassifier(eps=10.0, dims=(4,), n_rounds=5, batch_size=16).fit(X, y, groups=groups)
    >>> clf.predict(X[:3]).shape, clf.epsilon_ <= 10.0
    ((3,), True)
    """

    dims: tuple[int, ...] | None = None
    reeig_eps: float = 1e-4

    _parameter_constraints: dict = {
        "dims": [tuple, list, None],
        "reeig_eps": [Interval(Real, 0, 1, closed="neither")],
    }
    schedule = ClassifierSchedule(
        name="spdnet", batch_size=64, optimizer="sgd", optimizer_without_privacy="adam", adam_lr=1e-2)
    _model_parameters = ("dims", "reeig_eps", "reference", "recentre", "dtype", "classes")

    def _build_module(self, input_shape, n_classes, generator, dtype):
        dims = (min(16, input_shape[0]),) if self.dims is None else _checked_dims(self.dims, input_shape[0])
        return self._build_checked(lambda reference: SPDNet(input_shape[0], n_classes, dims, self.reeig_eps,
                                                            reference=reference, generator=generator, dtype=dtype),
                                   input_shape)


def _checked_dims(dims, n_channels: int) -> tuple[int, ...]:
    """``dims`` as a tuple of ints; ValueError for a float, bool or non-positive size (no silent truncation)."""
    sizes = tuple(dims)
    bad = [d for d in sizes if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 1]
    if not sizes or bad:
        raise ValueError(f"The 'dims' parameter must be a non-empty tuple of positive ints (each BiMap's output size, "
                         f"at most n_channels={n_channels}). Got {dims!r} instead.")
    return tuple(int(d) for d in sizes)
