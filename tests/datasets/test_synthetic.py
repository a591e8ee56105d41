import numpy as np

from skfedriem.datasets import make_spd_classification


def test_spd_classification_shapes_balance_and_definiteness():
    X, y, groups = make_spd_classification(4, 25, 5, n_classes=3, scale=1e-10, random_state=0)
    assert X.shape == (100, 5, 5) and y.shape == groups.shape == (100,)
    np.testing.assert_array_equal(X, X.transpose(0, 2, 1))
    assert (np.linalg.eigvalsh(X) > 0).all() and np.abs(X).max() < 1e-8
    for client in range(4):
        assert np.bincount(y[groups == client]).tolist() in ([9, 8, 8], [8, 9, 8], [8, 8, 9])


def test_spd_classification_signal_and_determinism():
    X, y, _ = make_spd_classification(1, 200, 4, class_sep=3.0, noise=0.2, heterogeneity=0.0, random_state=1)
    logs = np.array([np.linalg.eigvalsh(x) for x in X])
    gap = np.abs(logs[y == 0].mean(0) - logs[y == 1].mean(0)).max()
    assert gap > 5 * logs[y == 0].std(0).max() / np.sqrt(100)  # the classes differ
    again, _, _ = make_spd_classification(1, 200, 4, class_sep=3.0, noise=0.2, heterogeneity=0.0, random_state=1)
    np.testing.assert_array_equal(X, again)
    flat, yf, _ = make_spd_classification(1, 200, 4, class_sep=0.0, random_state=1)
    np.testing.assert_allclose(np.linalg.eigvalsh(flat[yf == 0]).mean(0), np.linalg.eigvalsh(flat[yf == 1]).mean(0),
                               rtol=0.3)
