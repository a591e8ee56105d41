"""Warnings that point at the caller's line, not at skfedriem's (whatever depth the library warns from)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

__all__ = ["warn_user"]

_PACKAGE = str(Path(__file__).resolve().parents[1])  # skfedriem/, not this folder
_FIT_CONTEXT = str(Path("sklearn") / "base.py")  # where scikit-learn's _fit_context wraps an estimator's fit


def _inside(code) -> bool:
    """Whether a frame of ``code`` is skfedriem's, or scikit-learn's ``_fit_context`` wrapper around our ``fit``."""
    path = str(Path(code.co_filename).resolve())
    return path.startswith(_PACKAGE) or (path.endswith(_FIT_CONTEXT) and code.co_name == "wrapper")


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` with the stack level of the first frame outside skfedriem (the caller's ``fit``).

    Parameters
    ----------
    message : str
    category : type of Warning, default=UserWarning
    """
    level, frame = 2, sys._getframe(1)  # level 1 is this function, 2 its caller
    while frame is not None and _inside(frame.f_code):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, category, stacklevel=level)
