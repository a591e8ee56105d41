"""Warnings and errors of skfedriem's privacy machinery (each subclasses the matching builtin)."""

from __future__ import annotations

__all__ = ["InvalidInstructionsError", "InvalidIterateError", "NoiseSwampsSignalWarning", "OneByOneClientsWarning",
           "PositionalClientsWarning", "PrivacyBudgetExceeded", "SaturatingStepWarning", "SeededNoiseWarning"]


class SeededNoiseWarning(UserWarning):
    """A private run whose clients' batches and noise come from a known seed.

    An int (or ``RandomState``) ``random_state`` makes a run bit-reproducible,
    which experiments need; but anyone who knows the seed (it is in
    ``get_params()`` and in the pickle) can regenerate every batch and every
    noise draw, subtract the noise from what the server saw, and read the
    clipped gradients of the records. Such a run is not private against them.
    Use ``random_state=None`` (the default) for a private run. Filter it in
    tests with ``warnings.filterwarnings("ignore", category=SeededNoiseWarning)``.
    """


class PositionalClientsWarning(UserWarning):
    """A fit without ``groups``: its clients are a random split of the records by position, not their sites.

    Passing ``groups=`` by habit to ``cross_val_score`` or ``GridSearchCV`` (for
    a ``GroupKFold``) does not reach the estimator unless scikit-learn's
    metadata routing is on (``sklearn.set_config(enable_metadata_routing=True)``
    and ``set_fit_request(groups=True)``): the fit then trains a federation
    that is not the user's, with plausible scores.
    """


class NoiseSwampsSignalWarning(UserWarning):
    """A private fit whose noise exceeds, in every direction, the most its clipped gradients can add up to.

    With σ the noise std of each step's mean, C the clip and T τ steps in the
    whole run, the clipped means summed along any direction reach at most
    T τ C while the summed noise has std σ √(T τ) there: when σ > √(T τ) C the
    fit is a random walk (:func:`skfedriem.federated.noise_swamps_signal`).

    Also a classifier whose plan's signal-to-noise over its d coordinates,
    √(T τ) C / (σ̄ √d), is below what real EEG learnt at
    (:func:`skfedriem.federated.signal_to_noise`): the warning names the
    remedies that worked there.
    """


class SaturatingStepWarning(UserWarning):
    """A classifier's step per round so large that its outputs will saturate (e.g. ``lr=1e6``).

    See :func:`~skfedriem.classification.planning.warn_if_saturating`.
    """


class OneByOneClientsWarning(UserWarning):
    """``lockstep=True`` asked for, but the model's simulated clients run one by one: a layer declares no stacking.

    The fit, its noise and its ε are the same; only slower. The warning names
    the layer (or the hooks, or the tied parameter) once per process; declare
    the layer's :class:`~skfedriem.privacy.ModelCapabilities` (or
    :func:`~skfedriem.privacy.register_capabilities` for a class one cannot
    edit) to run its clients in lockstep.
    """


class PrivacyBudgetExceeded(RuntimeError):
    """A release refused, before it happens, because it would exceed a privacy budget.

    Raised by :class:`skfedriem.privacy.PrivacyBudget` before a fit trains and
    by a Flower site's ledger before it takes a round.
    """


class InvalidIterateError(ValueError):
    """A client refuses the model the server sent: wrong names or shapes, not finite, or off its manifold."""


class InvalidInstructionsError(ValueError):
    """A client refuses the round's instructions: a batch size, step count, clip, noise or sampling it cannot run as stated.

    Raised by :class:`~skfedriem.privacy.StepPlan` before any record is
    touched, so that what a client charges is always what it runs.
    """
