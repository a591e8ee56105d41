"""Warnings and errors of skfedriem's privacy machinery (each subclasses the matching builtin)."""

from __future__ import annotations

__all__ = ["InvalidInstructionsError", "InvalidIterateError", "PrivacyBudgetExceeded", "SeededNoiseWarning"]


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
