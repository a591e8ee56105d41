"""Every public function and class documents its parameters and return value (numpydoc PR01, RT01).

Estimators, accountants and budgets also carry a runnable example (EX01),
which the doctest run executes.
"""

import importlib
import importlib.util
import inspect
import typing
from pathlib import Path

import pytest

validate = pytest.importorskip("numpydoc.validate").validate

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("make_api", ROOT / "docs" / "make_api.py")
make_api = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_api)

#: Modules whose every public name needs an example.
EXAMPLE_MODULES = {"skfedriem"}
#: Other names that need one: what users call to account and budget.
EXAMPLE_NAMES = {"skfedriem.privacy.PrivacyAccountant", "skfedriem.privacy.PrivacyBudget",
                 "skfedriem.privacy.RunAccounting", "skfedriem.privacy.WholeRunAccounting",
                 "skfedriem.privacy.calibrate_mu0", "skfedriem.privacy.epsilon_spent",
                 "skfedriem.baselines.PriRFedAccounting", "skfedriem.baselines.prirfed_epsilon"}


def _documented_objects():
    for _, module_name, _, names in make_api.api_names():
        module = importlib.import_module(module_name)
        for name in names:
            obj = getattr(module, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                yield f"{module_name}.{name}", obj


def _signature_is_foreign(obj) -> bool:
    """A class whose constructor is another library's (nn.Module, torch.optim) or a Protocol: nothing of ours to list."""
    if not inspect.isclass(obj):
        return False
    if getattr(obj, "_is_protocol", False) and typing.Protocol in obj.__mro__:
        return True
    init_owner = next(klass for klass in obj.__mro__ if "__init__" in vars(klass))
    return not init_owner.__module__.startswith("skfedriem")


OBJECTS = dict(_documented_objects())


@pytest.mark.parametrize("qualname", sorted(OBJECTS))
def test_public_docstring_is_complete(qualname):
    obj = OBJECTS[qualname]
    required = {"GL08", "SS01", "RT01"}
    if not _signature_is_foreign(obj):
        required.add("PR01")
    if qualname.rpartition(".")[0] in EXAMPLE_MODULES or qualname in EXAMPLE_NAMES:
        required.add("EX01")
    errors = [(code, message) for code, message in validate(qualname)["errors"] if code in required]
    assert not errors, "\n".join(f"{code}: {message}" for code, message in errors)


def test_the_check_catches_an_undocumented_parameter(monkeypatch):
    """The test can fail: a parameter missing from the docstring is reported."""
    from skfedriem.federated import pricing

    def lr_at_round(lr, schedule, round_, n_rounds, warmup):
        return lr

    lr_at_round.__doc__ = pricing.lr_at_round.__doc__
    monkeypatch.setattr(pricing, "lr_at_round", lr_at_round)
    errors = dict(validate("skfedriem.federated.pricing.lr_at_round")["errors"])
    assert "PR01" in errors and "warmup" in errors["PR01"]
