"""Where an estimator's randomness comes from (shared by every estimator).

Public choices (initial point, client split, client selection) flow from
``random_state``. The clients' secret randomness (batches and noise) comes
from the same seed only when ``random_state`` is an int or a RandomState:
that makes a run bit-reproducible, and replayable by anyone who knows the
seed, which :class:`~skfedriem.exceptions.SeededNoiseWarning` says. With
``random_state=None`` every client draws 128 bits of fresh OS entropy that
nothing derives from and nothing stores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._utils.user_warnings import warn_user
from .exceptions import SeededNoiseWarning

__all__ = ["RunSeeds", "run_seeds"]


@dataclass(frozen=True)
class RunSeeds:
    """The seed sequences of one fit.

    Attributes
    ----------
    init, split, server : numpy.random.SeedSequence
        Public: initial point, client split, client selection.
    clients : numpy.random.SeedSequence or None
        Parent of the clients' secret seeds; None for fresh OS entropy per client.
    """

    init: np.random.SeedSequence
    split: np.random.SeedSequence
    server: np.random.SeedSequence
    clients: np.random.SeedSequence | None


def run_seeds(random_state, *, private: bool, secure_mode: bool, owner: str) -> RunSeeds:
    """The seeds of a fit of ``owner`` (an estimator's name) from its ``random_state``.

    Raises a ValueError for ``secure_mode`` with a seed, and warns
    (SeededNoiseWarning) when a private run's noise is seeded.
    """
    if random_state is None:
        init, split, server = np.random.SeedSequence().spawn(3)
        return RunSeeds(init, split, server, None)
    if secure_mode:
        raise ValueError(
            f"secure_mode=True draws the clients' batches and noise from the OS's secure generator and refuses a "
            f"seed: set random_state=None. Got random_state={random_state!r} for {owner}."
        )
    if private:
        warn_user(
            f"{owner} is seeded (random_state={random_state!r}): the run is reproducible, and anyone who knows the "
            "seed can regenerate the clients' batches and noise and remove the noise. It is not private against "
            "them. Use random_state=None for a private run.",
            SeededNoiseWarning,
        )
    if isinstance(random_state, np.random.RandomState):
        root = np.random.SeedSequence(random_state.randint(0, 2**32, size=4, dtype=np.uint64).tolist())
    else:
        root = np.random.SeedSequence(int(random_state))
    init, split, server, clients = root.spawn(4)
    return RunSeeds(init, split, server, clients)
