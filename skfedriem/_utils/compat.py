"""The one place where skfedriem touches private API of its dependencies (scikit-learn, dp-accounting).

scikit-learn's parameter-validation machinery (``Interval``, ``StrOptions``,
``validate_params``, ``_fit_context``) gives the error text our users already
know from sklearn ("The 'eps' parameter of calibrate_mu0 must be a float in the
range (0, inf). Got -1 instead."). dp-accounting's privacy-loss distributions
keep their probability mass functions in private attributes, which the
vectorised ε of ``history_`` reads (:func:`dense_pmfs`). Both live in private
modules, so every use goes through here: when they move, only this file
changes, and ``tests/test_compat.py`` checks the versions it was written for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.base import _fit_context
from sklearn.utils._param_validation import (
    HasMethods,
    InvalidParameterError,
    StrOptions,
    validate_parameter_constraints,
    validate_params,
)
from sklearn.utils._param_validation import Interval as _Interval

__all__ = ["DP_ACCOUNTING_VERSIONS", "DensePMF", "HasMethods", "Interval", "InvalidParameterError", "StrOptions", "_fit_context",
           "dense_pmfs", "infinity_mass", "validate_estimator_params", "validate_parameter_constraints", "validate_params"]

#: The dp-accounting releases whose PMF internals :func:`dense_pmfs` reads (pyproject.toml pins the same range).
DP_ACCOUNTING_VERSIONS = (">=0.4", "<0.7")


class Interval(_Interval):
    """scikit-learn's ``Interval``, refusing booleans: ``n_rounds=True`` is not one round, nor ``eps=True`` ε = 1.

    scikit-learn's own accepts them (``bool`` is an ``Integral``), so a flag passed
    to the wrong parameter would run silently. It also refuses numbers that are
    neither Python's nor numpy's (scikit-learn's check crashes on a
    ``fractions.Fraction`` with numpy's ``TypeError``) and integers beyond any
    float (``clip=10**400`` passed, then ``fit`` overflowed).
    """

    def is_satisfied_by(self, val) -> bool:
        if isinstance(val, (bool, np.bool_)) or not isinstance(val, (int, float, np.integer, np.floating)):
            return False
        try:
            float(val)
        except OverflowError:
            return False
        return super().is_satisfied_by(val)


def validate_estimator_params(estimator) -> None:
    """Check ``estimator.get_params()`` against its ``_parameter_constraints`` (scikit-learn's ``_validate_params``)."""
    estimator._validate_params()


@dataclass(frozen=True)
class DensePMF:
    """One direction of a privacy-loss distribution: mass at losses ``(lower_loss + i) · discretization``.

    Parameters
    ----------
    probs : ndarray
        Mass of each loss, increasing losses.
    lower_loss : int
        Index of the smallest loss.
    discretization : float
        Grid step of the losses.
    infinity_mass : float
        Mass at infinite loss.
    """

    probs: np.ndarray
    lower_loss: int
    discretization: float
    infinity_mass: float


def dense_pmfs(pld) -> list[DensePMF]:
    """The dense PMFs of a dp-accounting ``PrivacyLossDistribution``: one if symmetric, else remove then add.

    Parameters
    ----------
    pld : dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution

    Returns
    -------
    list of DensePMF
    """
    pmfs = [pld._pmf_remove] if pld._symmetric else [pld._pmf_remove, pld._pmf_add]
    out = []
    for pmf in pmfs:
        dense = pmf.to_dense_pmf()
        out.append(DensePMF(np.asarray(dense._probs), int(dense._lower_loss), float(dense._discretization),
                            float(dense._infinity_mass)))
    return out


def infinity_mass(pld) -> float:
    """The mass a dp-accounting ``PrivacyLossDistribution`` puts at infinite loss (the larger direction's): no ε
    holds at a δ below it.

    Parameters
    ----------
    pld : dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution

    Returns
    -------
    float
    """
    pmfs = [pld._pmf_remove] if pld._symmetric else [pld._pmf_remove, pld._pmf_add]
    return max(float(pmf._infinity_mass) for pmf in pmfs)
