"""The one place where skfedriem touches private scikit-learn API.

scikit-learn's parameter-validation machinery (``Interval``, ``StrOptions``,
``validate_params``) gives the error text our users already know from sklearn
("The 'eps' parameter of calibrate_mu0 must be a float in the range (0, inf).
Got -1 instead."). It lives in a private module, so every import of it goes
through here: when sklearn moves it, only this file changes.
"""

from sklearn.utils._param_validation import (  # noqa: F401
    Interval,
    InvalidParameterError,
    StrOptions,
    validate_params,
)

__all__ = ["Interval", "InvalidParameterError", "StrOptions", "validate_params"]

from sklearn.utils._param_validation import validate_parameter_constraints  # noqa: E402


def validate_estimator_params(estimator) -> None:
    """Check ``estimator.get_params()`` against its ``_parameter_constraints``."""
    validate_parameter_constraints(
        estimator._parameter_constraints, estimator.get_params(deep=False), caller_name=type(estimator).__name__
    )


__all__ += ["validate_estimator_params"]
