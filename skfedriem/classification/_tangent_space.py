"""FederatedTangentSpaceClassifier: logistic regression on tangent vectors at a public point, trained privately."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.utils.validation import check_array

from .._spd import check_spd
from ..base import federated_parameters
from ..models import TangentSpaceLogistic
from ._base import FederatedClassifier

__all__ = ["FederatedTangentSpaceClassifier"]


@federated_parameters({})
class FederatedTangentSpaceClassifier(FederatedClassifier):
    """Tangent space + logistic regression of covariance matrices, trained by the same private protocol.

    The pipeline a pyRiemann user reaches for first
    (``make_pipeline(Covariances(), TangentSpace(), LogisticRegression())``),
    made record-level private across clients: each trial is divided by its
    own trace / n_channels, mapped to the tangent space at a *public*
    reference point by pyRiemann's ``tangent_space`` (the identity by default,
    where the map is the matrix logarithm), and a multinomial logistic
    regression on the tangent vectors is trained by the same private local
    steps, aggregation and accountant as :class:`FederatedSPDNetClassifier`
    (every parameter is Euclidean, so every aggregation is FedAvg).

    Unlike pyRiemann's ``TangentSpace``, the reference point is not the mean
    of the training matrices: a mean would make every trial's features depend
    on every other trial, which record-level privacy forbids. Pass a mean of
    *public* matrices (other subjects, another session released for it) as
    ``reference``.

    Its planned schedule (``"auto"``: plain SGD at a constant 0.1) is the best
    of the settings ``benchmarks/classifier_planning.py`` tried, or within 0.01
    of it, on many small clients (ε = 1, 4, 10) and on BNCI-size clients
    (ε = 1, 10); Adam, which normalises a gradient that is mostly noise, did
    worse at ε = 1.

    Parameters
    ----------
    reference : array-like of shape (n_channels, n_channels) or None, default=None
        The public SPD reference point (trace-normalised like the trials).
        None: the identity.
    [federation parameters]

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
        Number of channels C of the input matrices.
    module_ : TangentSpaceLogistic
        The trained model (outputs logits).
    [fitted privacy attributes]

    See Also
    --------
    FederatedSPDNetClassifier : a network on the manifold itself.

    Examples
    --------
    >>> from skfedriem.datasets import make_spd_classification
    >>> X, y, groups = make_spd_classification(n_clients=3, n_matrices_per_client=60, n_channels=6,
    ...                                        random_state=0)
    >>> clf = FederatedTangentSpaceClassifier(eps=10.0, n_rounds=5, batch_size=16).fit(X, y, groups=groups)
    >>> clf.predict(X[:3]).shape, clf.epsilon_ <= 10.0
    ((3,), True)
    """

    _parameter_constraints: dict = {"reference": ["array-like", None]}
    _plan_kind = "tangent"
    _model_parameters = ("reference", "dtype", "classes")

    def __init__(self, *, reference=None, **shared) -> None:
        self.reference = reference
        super().__init__(**shared)

    def _check_inputs(self, X: np.ndarray, name: str = "X") -> np.ndarray:
        return check_spd(X, name=name)

    def _build_module(self, input_shape, n_classes, generator, dtype):
        # zero-initialised, like scikit-learn's LogisticRegression: the generator has nothing to draw
        reference = None
        if self.reference is not None:
            reference = check_array(self.reference, dtype=np.float64, input_name="reference")
            if reference.shape != tuple(input_shape):
                raise ValueError(f"The 'reference' parameter must have shape {tuple(input_shape)} like the trials. "
                                 f"Got {reference.shape} instead.")
            check_spd(reference[None], name="reference")
            reference = torch.from_numpy(reference)
        try:
            return TangentSpaceLogistic(input_shape[0], n_classes, reference, dtype=dtype)
        except ValueError as error:  # the model's own check, in its dtype
            raise ValueError(f"The 'reference' parameter of {type(self).__name__} is not usable in dtype="
                             f"{self.dtype!r}: {error}") from None
