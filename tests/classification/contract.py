"""The scikit-learn contract the excused checks test (they need 2-D input), re-checked on SPD matrices."""

import pickle
from collections.abc import Callable

import numpy as np
import pytest
import sklearn
from sklearn.base import BaseEstimator, clone


def check_contract_on_spd_input(make: Callable[[], BaseEstimator], X, y, groups) -> None:
    """What the excused sklearn checks test, on valid SPD input; ``make()`` returns a fresh estimator."""
    clf = make()
    params = clf.get_params()
    assert clf.fit(X, y, groups=groups) is clf  # fit returns self
    assert clf.get_params() == params  # parameters not overwritten
    pred = clf.predict(X)
    # idempotent fit, sample-order and subset invariance of predictions
    np.testing.assert_array_equal(clone(clf).fit(X, y, groups=groups).predict(X), pred)
    order = np.random.default_rng(0).permutation(len(X))
    np.testing.assert_array_equal(clf.predict(X[order]), pred[order])
    np.testing.assert_array_equal(clf.predict(X[::-1]), pred[::-1])  # negative strides
    np.testing.assert_array_equal(clf.predict(X[:7]), pred[:7])
    # dtypes, lists, read-only and Fortran-ordered input
    np.testing.assert_array_equal(clf.predict(X.astype(np.float32)), clf.predict(X.astype(np.float32).astype(float)))
    np.testing.assert_array_equal(clf.predict(X.tolist()), pred)
    frozen = X.copy()
    frozen.setflags(write=False)
    np.testing.assert_array_equal(clf.predict(np.asfortranarray(frozen)), pred)
    # labels of any type; y as a column vector warns like sklearn
    names = np.array(["a", "b", "c"])[y]
    assert set(make().fit(X, names, groups=groups).predict(X)) <= set(names)
    with pytest.warns(sklearn.exceptions.DataConversionWarning):
        make().fit(X, y[:, None], groups=groups)
    # pickle round trip
    again = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(again.predict(X), pred)
    # wrong number of channels at predict
    with pytest.raises(ValueError, match="features"):
        clf.predict(X[:, :5, :5])
