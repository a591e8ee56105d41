"""The progress bar over a fit's rounds: shown by default when someone is watching and the fit lasts."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from tqdm.auto import tqdm

__all__ = ["PROGRESS_DELAY_S", "round_progress", "verbosity"]

#: With ``verbose="auto"``, a fit's bar appears once it has run this many seconds.
PROGRESS_DELAY_S = 5.0


def verbosity(verbose: int | str) -> int:
    """``verbose`` as a level: ``"auto"`` is 1 where someone is watching (a terminal or a notebook), else 0."""
    if verbose == "auto":
        return int(_watched())
    return int(verbose)


def round_progress(rounds: Iterable[int], verbose: int | str) -> Iterable[int]:
    """``rounds`` under a tqdm bar on stderr: always when ``verbose > 0``, never at 0, and with ``"auto"`` only
    where someone is watching and only after :data:`PROGRESS_DELAY_S` seconds (short fits stay quiet).

    Parameters
    ----------
    rounds : iterable of int
    verbose : int or "auto"

    Returns
    -------
    iterable of int
    """
    delay = PROGRESS_DELAY_S if verbose == "auto" else 0.0
    return tqdm(rounds, disable=verbosity(verbose) <= 0, delay=delay, desc="rounds", unit="round")


def _watched() -> bool:
    # a terminal, or an IPython kernel (Jupyter): the places a person reads stderr as it is written; tests,
    # pipes and logs are neither
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty()) or "ipykernel" in sys.modules
