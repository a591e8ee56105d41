"""Moved and renamed public names keep working, with a FutureWarning that names the new spelling."""

import importlib
import sys

import pytest

from skfedriem import FederatedEEGNetClassifier, FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem.classification import planning
from skfedriem.decomposition import planning as pca_planning
from skfedriem.flower.deployment.run_config import ESTIMATORS, register_deployable


@pytest.mark.parametrize("old, new", [("skfedriem.classifier_planning", planning),
                                      ("skfedriem.pca_planning", pca_planning)])
def test_a_moved_planning_module_still_imports_and_says_where_it_went(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(FutureWarning, match=f"moved to {new.__name__}"):
        module = importlib.import_module(old)
    for name in new.__all__:
        assert getattr(module, name) is getattr(new, name)


def test_the_per_model_tables_of_earlier_versions_are_read_from_the_schedules():
    sys.modules.pop("skfedriem.classifier_planning", None)
    with pytest.warns(FutureWarning):
        old = importlib.import_module("skfedriem.classifier_planning")
    assert old.ADAM_LR["eegnet"] == FederatedEEGNetClassifier.schedule.adam_lr == 3e-3
    assert old.PLANNED_OPTIMIZER["spdnet"] == "sgd" and old.NON_PRIVATE_OPTIMIZER["spdnet"] == "adam"
    assert old.DEFAULT_BATCH == {"eegnet": 16, "spdnet": 64, "tangent": 64}
    assert old.TANGENT_LR == FederatedTangentSpaceClassifier.schedule.sgd_lr == 0.1
    with pytest.raises(AttributeError):
        old.NO_SUCH_TABLE


def test_register_deployable_takes_name_and_kind_with_a_warning():
    with pytest.warns(FutureWarning, match="register_deployable\\(name=...\\)"):
        register_deployable(FederatedSPDNetClassifier, kind="spdnet", force=True)
    assert ESTIMATORS.get("spdnet") is FederatedSPDNetClassifier
    with pytest.raises(TypeError, match="'name'"):
        register_deployable(FederatedSPDNetClassifier)



def test_the_parameters_decorator_of_earlier_versions_still_builds_an_estimator_with_a_warning():
    """Both forms it took: a subclass changing a default, and an ``__init__(self, *, own, **shared)``."""
    import inspect

    from sklearn.base import clone

    from skfedriem.base import federated_parameters

    with pytest.warns(FutureWarning, match="federated_parameters is deprecated"):
        @federated_parameters({"eps": 1.0})
        class Tuned(FederatedSPDNetClassifier):
            pass

    assert Tuned().eps == 1.0 and clone(Tuned(dims=(3,))).get_params()["dims"] == (3,)
    assert FederatedSPDNetClassifier().eps == 10.0

    with pytest.warns(FutureWarning, match="federated_parameters is deprecated"):
        @federated_parameters({"n_rounds": 7})
        class OwnInit(FederatedSPDNetClassifier):
            """An old-style classifier.

            Parameters
            ----------
            depth : int, default=2
            [federation parameters]
            """

            def __init__(self, *, depth=2, **shared):
                self.depth = depth
                super().__init__(**shared)

    est = OwnInit(depth=3, eps=2.0)
    assert (est.depth, est.eps, est.n_rounds) == (3, 2.0, 7)
    assert {"depth", "eps", "n_rounds", "dims"} <= set(inspect.signature(OwnInit).parameters)
    assert clone(est).get_params()["depth"] == 3 and "n_rounds : int or \"auto\", default=7" in OwnInit.__doc__


def test_the_estimator_parameters_table_of_earlier_versions_is_read_from_the_declarations():
    import skfedriem.base as base

    with pytest.warns(FutureWarning, match="ESTIMATOR_PARAMETERS is deprecated"):
        table = base.ESTIMATOR_PARAMETERS
    assert table["n_clients"].type == "int or None" and "budget" in table["eps"].values


def test_an_old_style_init_keeps_its_positional_parameters_and_its_defaults():
    """An ``__init__(self, n_components=3, *, beta, **shared)`` is adopted as it was: positional, its own default."""
    import inspect

    from sklearn.base import clone

    from skfedriem import FederatedPCA

    with pytest.warns(FutureWarning, match=r"__init__\(\.\.\., \*\*shared\) is deprecated"):
        class OldPCA(FederatedPCA):
            def __init__(self, n_components=3, *, beta=0.1, **shared):
                self.beta = beta
                super().__init__(n_components, **shared)

    est = OldPCA(4, beta=0.2, eps=0.5)
    assert (est.n_components, est.beta, est.eps) == (4, 0.2, 0.5)
    assert inspect.signature(OldPCA).parameters["n_components"].default == 3 and OldPCA().n_components == 3
    assert clone(est).get_params()["beta"] == 0.2 and clone(est).eps == 0.5


def test_a_subclass_of_an_old_style_classifier_keeps_its_parents_init():
    """Its parent's hand-written ``__init__`` still runs (it set ``depth``), with the subclass's own parameters."""
    from sklearn.base import clone

    with pytest.warns(FutureWarning):
        class Old(FederatedSPDNetClassifier):
            def __init__(self, *, depth=2, **shared):
                self.depth = depth
                super().__init__(**shared)

    class Child(Old):
        eps: float = 5.0
        width: int = 7

    child = Child(depth=4, width=9)
    assert (child.depth, child.eps, child.width) == (4, 5.0, 9)
    assert {"depth", "width", "eps"} <= set(child.get_params()) and clone(child).depth == 4
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        Child(colour=1)
