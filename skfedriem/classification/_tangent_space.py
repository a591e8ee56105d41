"""FederatedTangentSpaceClassifier: logistic regression on tangent vectors at a public point, trained privately."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from numpy.typing import ArrayLike
import torch
from sklearn.utils.validation import check_array

from .._utils.compat import StrOptions
from .._utils.spd import check_spd
from ..federated import FederatedTrainer
from ..federated.plan import mean_step_noise
from ..models import TangentMean, TangentSpaceLogistic, reference_from_mean
from ._base import DTYPES, FederatedClassifier
from .planning import ClassifierSchedule

__all__ = ["REFERENCE_CLIP", "REFERENCE_NOISE_LIMIT", "REFERENCE_SHARE", "FederatedTangentSpaceClassifier", "shrunk_mean"]

#: ``reference="mean"`` in a private fit: the share of ``eps`` its release of the clients' mean may spend (the
#: rounds take what is left, composed with it).
REFERENCE_SHARE = 0.2
#: The clip of each trial's tangent vector at the identity in that release, in units of √n_channels: on the real
#: PhysionetMI trials (64 channels, trace-normalised OAS covariances) the norms have median 23.9 and maximum 30.1
#: (3.8 √64), so 4 √n clips almost none of them.
REFERENCE_CLIP = 4.0
#: ``reference="auto"`` in a private fit: the largest planned noise norm √d σ̄ of the released mean, in units of
#: √n_channels, at which it is released (above it, the identity). Real EEG's mean sits 2.7 √n (9 motor channels: 8.1)
#: to 3.0 √n (64: 23.6) from the identity (``benchmarks/results/tangent_offset.json``); half of REFERENCE_CLIP keeps a
#: release that can find it. Not tuned by a kept grid: its cells are in ``benchmarks/results/real_planning.json``
#: (at ε = 1 every private fit there is skipped or at chance).
REFERENCE_NOISE_LIMIT = 2.0


def shrunk_mean(released: np.ndarray, noise_std: float) -> np.ndarray:
    """The positive-part James–Stein estimate (1 − (d − 2) σ² / ‖m̂‖²)₊ m̂ of a mean released with noise std σ.

    Post-processing of the release with its public σ per coordinate (the plan's,
    :func:`~skfedriem.federated.plan.mean_step_noise`). In d ≥ 3 coordinates it is closer to the true mean than
    m̂ itself, in expected squared error, whatever that mean is (James and Stein, 1961; the positive part
    improves on it again). Where the noise's norm √d σ outweighs the mean (features already centred at the identity,
    or a small ε), it shrinks the reference back to the identity, the private default's; where the mean stands
    out (real EEG: 8.1 on 9 motor channels, against a spread of 2.1, ``benchmarks/tangent_offset.py``) it keeps it.

    Parameters
    ----------
    released : ndarray of shape (d,)
    noise_std : float

    Returns
    -------
    ndarray of shape (d,)

    Examples
    --------
    >>> shrunk_mean(np.array([3.0, 4.0, 0.0, 0.0]), 1.0)    # ‖m̂‖² = 25, (d − 2) σ² = 2
    array([2.76, 3.68, 0.  , 0.  ])
    >>> shrunk_mean(np.array([1.0, 0.5, 0.0, 0.0]), 1.0)    # ‖m̂‖² = 1.25 < 2: noise, as far as anyone can tell
    array([0., 0., 0., 0.])
    """
    squared = float(released @ released)
    if squared == 0.0:
        return released
    return max(0.0, 1.0 - (released.size - 2) * noise_std**2 / squared) * released


def _release_noise_std(release: FederatedTrainer) -> float:
    """σ̄, the noise std per coordinate of the released mean (one step at learning rate 1 of every client).

    With distributed noise every one of the K clients adds a share sized so that K − t of them carry the noise
    the plan certifies: the sum carries K / (K − t) times that variance (and the rounding's, left out).
    """
    plan = release.plan_
    std = mean_step_noise(plan, release.clients_per_round(len(plan.local_steps)))
    if plan.encoding is not None and plan.encoding.clients > plan.encoding.colluders:
        std *= math.sqrt(plan.encoding.clients / (plan.encoding.clients - plan.encoding.colluders))
    return std


def _own_losses(losses: torch.Tensor, *targets: torch.Tensor) -> torch.Tensor:
    """TangentMean's forward already returns each record's loss (the mean of the trials takes no label)."""
    return losses


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

    pyRiemann's ``TangentSpace`` takes the tangent space at the mean of the
    training matrices; a mean computed from the records would make every
    trial's features depend on every other trial. With ``reference="mean"``
    the clients release their mean in a round of its own, before the
    training rounds: each client's mean of its trials' tangent vectors at the
    identity (log-Euclidean), the server averaging the clients' means with
    equal weights (with clients of very different sizes this is not the
    pooled trials' mean), clipped at :data:`REFERENCE_CLIP` √n_channels
    per trial and noised by the same private step as every round
    (:class:`~skfedriem.models.TangentMean`), at a :data:`REFERENCE_SHARE` of
    ``eps``; the training rounds take what is left, and ``epsilon_`` composes
    both. The released mean is shrunk towards the identity by the
    positive-part James–Stein rule (:func:`shrunk_mean`: post-processing with
    the release's public noise std), so that a release that is mostly noise
    leaves the reference near the identity.

    The default ``"auto"`` takes that mean without privacy (``eps=None``:
    exact, and it costs nothing a non-private fit does not already spend),
    where it brings the classifier to pyRiemann's ``TangentSpace() →
    LogisticRegression()`` on the real PhysionetMI trials (0.723 against 0.704
    on held-out thirds, 0.493 at the identity: ``benchmarks/physionet_real.py``).
    In a private fit ``"auto"`` releases it too, unless the release's planned
    noise norm (√d σ̄ over the d features, from public quantities only) exceeds
    :data:`REFERENCE_NOISE_LIMIT` √n_channels, where it would bury the offset
    real EEG has from the identity; then the reference is the identity and
    the rounds take all of ``eps``. Real EEG's tangent vectors at the identity
    sit far from it (their mean's norm 8.1 on 9 motor channels and 23.6 on 64,
    against a spread of 2.1 and 8.9 around it: ``benchmarks/tangent_offset.py``), which makes the logistic
    regression ill-conditioned: at the identity every private fit of the 24 real
    PhysioNet subjects stayed at chance with the planned step; at the released
    mean the planned defaults beat every cell of the identity's (η, T) grid on
    24 × 1, 8 × 3 and 4 × 6 sites at ε = 4, 10 and 20, and came within 0.02 of
    the best cell of both grids (``benchmarks/results/real_planning.json``). The synthetic federations of
    :func:`~skfedriem.datasets.make_spd_classification` are centred at the
    identity by construction: there the released mean is mostly noise, which
    the shrinkage removes, and the release's share composes with the rounds
    to little (20 synthetic clients of 40 trials, 4 seeds: 0.639 / 0.784 /
    0.836 at ε = 1 / 4 / 10 with today's defaults, against 0.640 / 0.792 /
    0.825, 3 seeds, at the identity and η = 0.1).
    ``reference=None`` keeps the identity and all of ``eps``. ``"auto"`` is
    the identity under ``eps="budget"`` and in a trainer made outside ``fit``
    (a deployment): no release is planned there. A mean of *public*
    matrices (other subjects, another session) can be passed as
    ``reference`` instead, at no cost.

    Its planned schedule (``"auto"``) is plain SGD at a constant step: 0.1
    without privacy; in a private fit with local noise the noise-walk rule
    of :mod:`~skfedriem.classification.planning`, never below 0.1 (larger
    steps at larger ε or more clients a round). 0.1 was the best of the
    settings ``benchmarks/classifier_planning.py`` tried, or within 0.01 of
    it, on many small clients (ε = 1, 4, 10) and on BNCI-size clients (ε = 1,
    10); Adam, which normalises a gradient that is mostly noise, did worse
    at ε = 1.

    Parameters
    ----------
    reference : array-like of shape (n_channels, n_channels), {"auto", "mean"} or None, default="auto"
        The reference point of the tangent space. ``"mean"``: the clients'
        log-Euclidean mean, released and charged before the rounds (see
        above; not with ``eps="budget"``, nor in a deployment). ``"auto"``:
        ``"mean"``, unless its planned noise would bury it or the rounds'
        ``accounting`` is not ``"rfedproj"`` (then, and under
        ``eps="budget"`` and in a deployment, the identity). An array:
        a public SPD matrix (trace-normalised like the trials), charged
        nothing. None: the identity.
    [federation parameters]

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
        Number of channels C of the input matrices.
    module_ : TangentSpaceLogistic
        The trained model (outputs logits).
    reference_ : ndarray of shape (n_channels, n_channels)
        The (trace-normalised) reference point the features are taken at:
        with the clients' mean, post-processing of its release, which
        ``ledger_`` charges.
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

    reference: ArrayLike | str | None = "auto"

    _parameter_constraints: dict = {"reference": ["array-like", StrOptions({"auto", "mean"}), None]}
    schedule = ClassifierSchedule(
        name="tangent", batch_size=64, optimizer="sgd", optimizer_without_privacy="sgd", adam_lr=1e-2, sgd_lr=0.1,
        sgd_lr_reason="the grid's best or within 0.01 of it on small and on BNCI-size clients at every ε it ran",
        sgd_lr_floor=0.1,
        sgd_lr_floor_reason="at the clients' released mean, the rule's steps came within 0.02 of the best cell of an "
                            "(η, T) grid on the 24 real PhysioNet subjects at ε = 4, 10, 20 (24 × 1, 8 × 3, 4 × 6 "
                            "sites; benchmarks/results/real_planning.json); the floor is the constant step that was the "
                            "synthetic grid's best (benchmarks/results/classifier_planning.json)",
        distributed_sgd_lr=1.0,
        distributed_sgd_lr_reason="with distributed noise and full batches, the best of 0.5, 1 and 2 on the 24 real "
                                  "PhysioNet subjects (one client each, ε = 10, 3 seeds: 0.64 at T = 300, against "
                                  "0.61 at 0.5 and 0.60 at 2)")
    _model_parameters = ("reference", "dtype", "classes")

    def _released_mean(self) -> bool:
        """Whether ``fit`` may release the clients' mean before the rounds (``"auto"``: unless an ε search)."""
        if not isinstance(self.reference, str):
            return False
        return self.reference == "mean" or self.eps != "budget"

    def _release_trainer(self, input_shape, client_sizes, seeds):
        """The clients' mean (``reference="mean"``, or ``"auto"`` unless its planned noise would bury it): one round
        of :class:`~skfedriem.models.TangentMean`, planned and charged with the rounds by ``fit``."""
        if not self._released_mean():
            return None
        if self.eps == "budget":
            raise ValueError("reference='mean' with eps='budget' is not supported: the budget's share is planned for "
                             "the rounds alone. Pass a public reference, or reference=None for the identity.")
        if self.reference == "auto" and self.eps is not None and self.accounting != "rfedproj":
            return None  # the rounds' accountant composes no release of the paper's accounting: the identity
        n = int(input_shape[0])
        module = TangentMean(n, dtype=DTYPES[self.dtype])
        settings = dataclasses.replace(
            self._settings(input_shape, client_sizes, None),
            eps=None if self.eps is None else REFERENCE_SHARE * self.eps, clip=REFERENCE_CLIP * math.sqrt(n),
            n_rounds=1, local_steps=1, local_epochs=1.0, batch_size=None, lr=1.0, lr_schedule="constant",
            optimizer="sgd", aggregation="projavg", clients_per_round=None, sampling="fixed", accounting="rfedproj")
        # the clients' secret streams of this release are their own, apart from the rounds' (a seeded run's too)
        client_seed = None if seeds.clients is None else np.random.SeedSequence(
            seeds.clients.entropy, spawn_key=(*seeds.clients.spawn_key, 2**32 - 1))
        release = FederatedTrainer(module, _own_losses, settings, seed_sequence=seeds.server.spawn(1)[0],
                                   client_seed=client_seed, run_name=f"{self!r} reference")
        if self.reference == "auto" and self.eps is not None:
            release.pricing.plan(list(client_sizes), list(range(len(client_sizes))))
            noise_norm = math.sqrt(module.mean.weight.numel()) * _release_noise_std(release)
            if noise_norm > REFERENCE_NOISE_LIMIT * math.sqrt(n):
                return None  # public quantities only: the identity, and the rounds take all of eps
        return release

    def _use_release(self, release, trainer) -> None:
        mean = release.module.mean.weight.detach()[0].double().numpy()
        noise_std = _release_noise_std(release)
        n_channels = release.module.features.reference.shape[0]
        reference = reference_from_mean(shrunk_mean(mean, noise_std), n_channels)
        trainer.module.at_reference(torch.from_numpy(reference))

    def make_trainer(self, input_shape, *, spent=None, **options):
        """:meth:`~skfedriem.base.FederatedEstimatorMixin.make_trainer`; with the clients' mean as reference
        (``reference="mean"``, or ``"auto"`` without privacy) only inside ``fit``, which releases it."""
        exact_or_asked = isinstance(self.reference, str) and (
            self.reference == "mean" or (self.reference == "auto" and self.eps is None))
        if exact_or_asked and not self._warm() and spent is None:
            raise ValueError(f"{type(self).__name__}(reference={self.reference!r}, eps={self.eps!r}) takes the "
                             "clients' mean, which fit releases and charges before the rounds; a trainer made on "
                             "its own (a deployment, a loop of your own) has no such release: pass the public "
                             "reference's values, or reference=None for the identity.")
        return super().make_trainer(input_shape, spent=spent, **options)

    def _check_inputs(self, X: np.ndarray, name: str = "X") -> np.ndarray:
        return check_spd(X, name=name, trace_normalised=True)

    def _set_model_attributes(self, module, classes) -> None:
        super()._set_model_attributes(module, classes)
        self.reference_ = module.features.reference.detach().double().numpy().copy()

    def _build_module(self, input_shape, n_classes, generator, dtype):
        # zero-initialised, like scikit-learn's LogisticRegression: the generator has nothing to draw
        reference = None
        if isinstance(self.reference, str):  # the identity; with the clients' mean, fit sets it once released
            reference = None
        elif self.reference is not None:
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
