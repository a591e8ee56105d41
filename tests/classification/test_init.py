"""``init=``: starting a private fit from a model trained on public records."""

import numpy as np
import pytest
import torch
from sklearn.base import clone

from skfedriem import FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem.datasets import make_spd_classification


pytestmark = [pytest.mark.filterwarnings("ignore:batch_size=64 is larger"),
              pytest.mark.filterwarnings("ignore:init. the weights")]


@pytest.fixture(scope="module")
def public_and_private():
    """One population: 4 public subjects and 3 private ones, few records each."""
    X, y, groups = make_spd_classification(7, 24, 6, n_classes=2, class_sep=0.6, noise=0.5, random_state=3)
    public = groups < 4
    return (X[public], y[public], groups[public]), (X[~public], y[~public], groups[~public])


@pytest.fixture(scope="module")
def pretrained(public_and_private):
    (X, y, groups), _ = public_and_private
    return FederatedSPDNetClassifier(eps=None, dims=(3,), n_rounds=60, random_state=0).fit(X, y, groups=groups)


def test_a_fitted_classifier_its_module_or_its_state_dict_start_the_fit(pretrained, public_and_private):
    _, (X, y, groups) = public_and_private
    for init in (pretrained, pretrained.module_, pretrained.module_.state_dict()):
        clf = FederatedSPDNetClassifier(eps=None, dims=(3,), n_rounds=1, lr=1e-12, init=init, random_state=1)
        clf.fit(X, y, groups=groups)
        for name, value in pretrained.module_.state_dict().items():
            assert torch.allclose(clf.module_.state_dict()[name], value, atol=1e-6), name
    assert not any(p is q for p, q in zip(clf.module_.parameters(), pretrained.module_.parameters()))


def test_public_pretraining_helps_the_private_fit(pretrained, public_and_private):
    public, (X, y, groups) = public_and_private
    Xt, yt = public[0][::2], public[1][::2]  # unseen by the private fits; same population
    scores = {}
    for label, init in (("scratch", None), ("pretrained", pretrained.module_)):
        runs = [FederatedSPDNetClassifier(eps=1.0, dims=(3,), init=init, random_state=seed)
                .fit(X, y, groups=groups) for seed in range(2)]
        assert all(0 < r.epsilon_ <= 1.0 for r in runs)  # the public start is charged nothing
        scores[label] = np.mean([r.score(Xt, yt) for r in runs])
    assert scores["pretrained"] > scores["scratch"] + 0.2, scores  # measured: 0.91 against 0.50


def test_init_that_does_not_fit_the_model_is_refused(pretrained, public_and_private):
    _, (X, y, groups) = public_and_private
    make = lambda **kw: FederatedSPDNetClassifier(eps=None, n_rounds=1, random_state=0, **kw)  # noqa: E731
    with pytest.raises(ValueError, match=r"'init' .*unfitted FederatedSPDNetClassifier.*clone"):
        make(dims=(3,), init=clone(pretrained)).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match=r"'init' .*shape \(6, 3\).*\(6, 4\)"):
        make(dims=(4,), init=pretrained).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match=r"'init' .*fitted on classes \[0, 1\].*\[0, 1, 2\]"):
        make(dims=(3,), init=pretrained, classes=[0, 1, 2]).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match=r"'init' .*missing"):
        make(dims=(3,), init={"unrelated.weight": torch.zeros(2)}).fit(X, y, groups=groups)
    off = {k: v.clone() for k, v in pretrained.module_.state_dict().items()}
    stiefel = next(k for k, v in off.items() if v.shape == (6, 3))
    off[stiefel] *= 1.5
    with pytest.raises(ValueError, match=rf"'init' .*{stiefel!r} off the model's manifold"):
        make(dims=(3,), init=off).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="'init' parameter"):
        make(init="model.pt").fit(X, y, groups=groups)
    itself = make(dims=(3,))
    with pytest.raises(ValueError, match="'init' .*the estimator itself.*warm_start"):
        itself.set_params(init=itself).fit(X, y, groups=groups)


def test_a_fitted_init_warns_that_its_own_privacy_loss_is_not_counted(pretrained, public_and_private):
    _, (X, y, groups) = public_and_private
    clf = FederatedSPDNetClassifier(eps=1.0, dims=(3,), n_rounds=2, init=pretrained, random_state=0)
    with pytest.warns(UserWarning, match=r"treated as public; its own privacy loss \(epsilon_=inf\).*warm_start"):
        clf.fit(X, y, groups=groups)
    assert clf.epsilon_ <= 1.0  # the warning is the whole story: the start is not charged


def test_the_tangent_space_start_must_share_its_reference(public_and_private):
    (X, y, groups), (Xp, yp, gp) = public_and_private
    reference = np.mean(X, axis=0)
    public = FederatedTangentSpaceClassifier(eps=None, n_rounds=20, reference=reference, random_state=0)
    public.fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="'init' .*another 'features.reference'"):
        FederatedTangentSpaceClassifier(eps=1.0, init=public, reference=None, random_state=0).fit(Xp, yp, groups=gp)
    with pytest.raises(ValueError, match="reference='mean' with init= is not supported"):
        FederatedTangentSpaceClassifier(eps=1.0, init=public, reference="mean", random_state=0).fit(Xp, yp, groups=gp)
    adopted = FederatedTangentSpaceClassifier(eps=1.0, init=public, random_state=0).fit(Xp, yp, groups=gp)
    np.testing.assert_allclose(adopted.reference_, public.reference_, rtol=1e-6)  # "auto": the start's point
    explicit = FederatedTangentSpaceClassifier(eps=1.0, init=public, reference=public.reference_, random_state=0)
    assert adopted.ledger_.steps == explicit.fit(Xp, yp, groups=gp).ledger_.steps  # the rounds alone: no release
    weights_only = {k: v for k, v in public.module_.state_dict().items() if k != "features.reference"}
    with pytest.raises(ValueError, match="'init' .*has no 'features.reference'"):
        FederatedTangentSpaceClassifier(eps=1.0, init=weights_only, random_state=0).fit(Xp, yp, groups=gp)
    in_float64 = FederatedTangentSpaceClassifier(eps=None, n_rounds=2, reference=reference, dtype="float64",
                                                 random_state=0).fit(X, y, groups=groups)
    FederatedTangentSpaceClassifier(eps=None, n_rounds=1, init=in_float64.module_, reference=reference,
                                    random_state=0).fit(Xp, yp, groups=gp)  # the same point in another dtype
    ok = FederatedTangentSpaceClassifier(eps=1.0, init=public, reference=reference, random_state=0)
    assert 0 < ok.fit(Xp, yp, groups=gp).epsilon_ <= 1.0


def test_warm_start_continues_its_own_model_not_init(pretrained, public_and_private):
    _, (X, y, groups) = public_and_private
    clf = FederatedSPDNetClassifier(eps=None, dims=(3,), n_rounds=2, random_state=0, warm_start=True).fit(
        X, y, groups=groups)
    before = {k: v.clone() for k, v in clf.module_.state_dict().items()}
    clf.set_params(init=pretrained, lr=1e-12).fit(X, y, groups=groups)
    for name, value in before.items():
        assert torch.allclose(clf.module_.state_dict()[name], value, atol=1e-6)


@pytest.mark.parametrize("kind", ["module", "state dict"])
def test_a_module_or_state_dict_init_warns_that_its_origin_cannot_be_traced(pretrained, public_and_private, kind):
    """Only a fitted estimator warned: a private fit's module_ passed on its own was silently taken as public."""
    _, (X, y, groups) = public_and_private
    init = pretrained.module_ if kind == "module" else pretrained.module_.state_dict()
    clf = FederatedSPDNetClassifier(eps=None, dims=(3,), n_rounds=1, init=init, random_state=1)
    with pytest.warns(UserWarning, match="cannot tell where a module's or a state dict's weights come from"):
        clf.fit(X, y, groups=groups)


def test_a_fitted_scikit_learn_model_is_named_for_what_it_lacks(public_and_private):
    """It was called 'unfitted'."""
    from sklearn.linear_model import LogisticRegression

    _, (X, y, groups) = public_and_private
    fitted = LogisticRegression().fit(X.reshape(len(X), -1), y)
    with pytest.raises(ValueError, match="is a LogisticRegression, which has no network to start from"):
        FederatedSPDNetClassifier(dims=(3,), n_rounds=1, init=fitted).fit(X, y, groups=groups)


def test_a_warm_start_does_not_warn_about_the_init_it_ignores(pretrained, public_and_private):
    import warnings

    _, (X, y, groups) = public_and_private
    clf = FederatedSPDNetClassifier(eps=None, dims=(3,), n_rounds=1, init=pretrained.module_, warm_start=True,
                                    random_state=1).fit(X, y, groups=groups)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(X, y, groups=groups)  # continues its own model: init is not used
    assert not [w for w in caught if "init:" in str(w.message)]
