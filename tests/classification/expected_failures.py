"""sklearn checks the 3-D-input classifiers cannot pass, each with its reason."""

# Every check below first fits on a 2-D feature matrix (n_samples, n_features).
# These estimators take 3-D input (SPD matrices or raw trials): a 2-D
# array is rejected with a ValueError, so these checks cannot apply. Their
# intent is re-checked on 3-D input in test_spdnet.py and test_eegnet.py (test_sklearn_contract_*).
_NEEDS_2D = "fits on a 2-D feature matrix; the estimator takes 3-D trials (SPD (n, C, C) or raw (n, C, T))"
EXPECTED_FAILED = {
    name: _NEEDS_2D
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
EXPECTED_FAILED["check_positive_only_tag_during_fit"] = (
    "passes a 2-D matrix of positive values and expects a fit; 2-D input is rejected whatever its sign"
)
EXPECTED_FAILED["check_fit2d_1feature"] = (
    "expects the error for a (n, 1) matrix to mention '1 feature(s)'; ours says X must be 3-D"
)
