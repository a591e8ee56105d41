"""FederatedTangentSpaceClassifier: logistic regression on tangent vectors at a public point, trained privately."""

from __future__ import annotations

from ..models import TangentSpaceLogistic
from ._reference import (REFERENCE_CLIP, REFERENCE_NOISE_LIMIT, REFERENCE_SHARE, CovarianceClassifier,
                         shrunk_mean)
from .planning import ClassifierSchedule

__all__ = ["REFERENCE_CLIP", "REFERENCE_NOISE_LIMIT", "REFERENCE_SHARE", "FederatedTangentSpaceClassifier", "shrunk_mean"]


class FederatedTangentSpaceClassifier(CovarianceClassifier):
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
        ``eps="budget"`` and in a deployment, the identity); with ``init``,
        the public start's own reference point (nothing is released). An
        array: a public SPD matrix (trace-normalised like the trials),
        charged nothing. None: the identity.
    recentre : {"client"} or None, default=None
        ``"client"``: personalised inputs, pyRiemann's ``TLCenter`` made
        private. Every client releases its own mean before the rounds (each
        trial's tangent vector at the reference point clipped to
        :data:`~skfedriem.classification.PERSONAL_CLIP` √n_channels, averaged,
        Gaussian noise at a :data:`~skfedriem.classification.PERSONAL_SHARE`
        of ``eps`` drawn by the client, shrunk by the noise it carries), and
        its trials are re-centred on it, X ↦ M^{-1/2} X M^{-1/2}, so that
        every client's trials sit around the identity, where the rounds then
        read them; the release is charged and composed with the rounds in
        ``epsilon_`` and ``local_epsilon_`` (under ``noise="distributed"``
        too: it never leaves the client, and is charged as if it did). With
        ``privacy_unit="subject"`` and one subject a client, the mean lies
        within the unit: exact, charged nothing, kept by no one. At
        prediction pass ``groups=``: a client's trials are re-centred on its
        released mean (``personal_means_``), a subject never seen on the
        Riemannian mean of its own trials (transductive, as pyRiemann's
        transfer pipelines do; ``groups=None``: all of X as one new subject).
        Not with ``eps="budget"``, ``init``, a warm start or in a deployment.
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
    personal_means_ : dict
        With ``recentre="client"``: each client's released mean
        (trace-normalised; post-processing of its charged release), by client
        label. A client whose mean lay within its unit is absent.
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
    _model_parameters = ("reference", "recentre", "dtype", "classes")

    def _build_module(self, input_shape, n_classes, generator, dtype):
        # zero-initialised, like scikit-learn's LogisticRegression: the generator has nothing to draw; the reference is
        # the identity until fit releases the clients' mean (or the public one given)
        return self._build_checked(lambda reference: TangentSpaceLogistic(input_shape[0], n_classes, reference,
                                                                          dtype=dtype), input_shape)
