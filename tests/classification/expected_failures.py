"""sklearn checks the 3-D-input classifiers cannot pass, each with its reason, and the error that shows it.

Every check below first fits on a 2-D feature matrix (n_samples, n_features).
These estimators take 3-D input (SPD matrices or raw trials): a 2-D array is
rejected with a ValueError, so these checks cannot apply. Their intent is
re-checked on 3-D input in test_spdnet.py and test_eegnet.py
(test_sklearn_contract_*). Each excused check is run all the same
(:func:`run_check`): it must fail, and fail for the stated reason.
"""

import re

import pytest

#: The estimators' own refusal of 2-D input, the failure every excuse below rests on.
REFUSES_2D = r"must be a stack of square matrices|must hold raw trials"
_NEEDS_2D = "fits on a 2-D feature matrix; the estimator takes 3-D trials (SPD (n, C, C) or raw (n, C, T))"

#: check name -> (reason, what the failure must say).
EXCUSED = {
    name: (_NEEDS_2D, REFUSES_2D)
    for name in [
        "check_fit_score_takes_y", "check_estimators_overwrite_params", "check_dont_overwrite_parameters",
        "check_estimators_fit_returns_self", "check_readonly_memmap_input", "check_n_features_in_after_fitting",
        "check_estimators_dtypes", "check_dtype_object", "check_pipeline_consistency", "check_estimators_nan_inf",
        "check_estimators_pickle", "check_f_contiguous_array_estimator", "check_classifier_data_not_an_array",
        "check_classifiers_classes", "check_classifiers_train", "check_supervised_y_2d",
        "check_decision_proba_consistency", "check_methods_sample_order_invariance",
        "check_methods_subset_invariance", "check_dict_unchanged", "check_fit_idempotent",
        "check_fit_check_is_fitted", "check_n_features_in", "check_fit2d_predict1d",
    ]
}
EXCUSED["check_positive_only_tag_during_fit"] = (
    "passes a 2-D matrix of positive values and expects a fit; 2-D input is rejected whatever its sign", REFUSES_2D)
EXCUSED["check_fit2d_1feature"] = (
    "expects the error for a (n, 1) matrix to mention '1 feature(s)'; ours says X must be 3-D",
    REFUSES_2D)


def check_name(check) -> str:
    """The name of a check from ``parametrize_with_checks`` (a partial, possibly nested)."""
    while hasattr(check, "func"):
        check = check.func
    return check.__name__


def run_check(estimator, check) -> None:
    """Run ``check``; an excused one must fail, with an error that says why (a check that passes is reported)."""
    name = check_name(check)
    if name not in EXCUSED:
        check(estimator)
        return
    reason, shows = EXCUSED[name]
    with pytest.raises(Exception) as failure:
        check(estimator)
    chain, error = [], failure.value
    while error is not None:  # sklearn may re-raise the estimator's error as the cause of its own
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    assert re.search(shows, "\n".join(chain)), f"{name} failed, but not because {reason}: {chain}"
