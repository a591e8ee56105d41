"""Every registry takes its entries one way: ``register_*(obj, name=..., force=False)``."""

import functools
import inspect

import pytest
import torch

from skfedriem.federated import AGGREGATIONS, Aggregation, register_aggregation, register_backend, register_optimizer
from skfedriem.flower.deployment.run_config import register_deployable
from skfedriem.privacy import register_accounting
from skfedriem.privacy.accounting.accounting_methods import ACCOUNTINGS, WholeRunAccounting


@pytest.mark.parametrize("register", [register_aggregation, register_accounting, register_optimizer,
                                      register_backend, register_deployable])
def test_every_register_function_takes_name_and_force_by_keyword(register):
    parameters = inspect.signature(register).parameters
    assert parameters["name"].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters["force"].kind is inspect.Parameter.KEYWORD_ONLY and parameters["force"].default is False


def test_a_named_object_is_registered_under_its_own_name():
    """Clients look an aggregation rule up by the name the server sends: another name would find another rule."""
    rule = Aggregation("test_named_rule", lambda M, t, x: x, lambda M, t, m: M.proj(m))
    with pytest.raises(ValueError, match="own name 'test_named_rule'; got name='other'"):
        register_aggregation(rule, name="other")
    assert "other" not in AGGREGATIONS.names()
    assert register_aggregation(rule, name="test_named_rule") is AGGREGATIONS.get("test_named_rule")
    method = WholeRunAccounting()
    with pytest.raises(ValueError, match="own name"):
        register_accounting(method, name="test_renamed")
    assert "test_renamed" not in ACCOUNTINGS.names()
    assert register_optimizer(functools.partial(torch.optim.SGD), name="test_plain_sgd", force=True) is not None
