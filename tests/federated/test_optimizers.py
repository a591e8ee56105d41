import functools

import pytest
import torch

from skfedriem.federated import OPTIMIZERS, OptimizerEntry, is_elementwise, register_optimizer
from skfedriem.federated.optimizers import make_optimizer, resolve_optimizer


def test_an_optimizer_is_registered_with_whether_it_is_elementwise():
    factory = functools.partial(torch.optim.SGD, momentum=0.5)
    register_optimizer(factory, name="test_momentum", force=True)
    entry = OPTIMIZERS.get("test_momentum")
    assert isinstance(entry, OptimizerEntry) and entry.factory is factory and not entry.elementwise
    assert not is_elementwise("test_momentum") and not is_elementwise(factory)
    register_optimizer(factory, name="test_momentum", force=True, elementwise=True)
    assert is_elementwise("test_momentum") and is_elementwise(factory)
    assert is_elementwise("sgd") and is_elementwise("adam") and not is_elementwise(lambda params, lr: None)


def test_a_name_resolves_to_its_factory_and_an_unknown_one_is_named():
    assert resolve_optimizer("sgd") is OPTIMIZERS.get("sgd").factory
    optimizer = make_optimizer("sgd", [torch.nn.Parameter(torch.zeros(2))], 0.1)
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["lr"] == 0.1
    with pytest.raises(ValueError, match="'optimizer' parameter must be one of"):
        resolve_optimizer("lbfgs-typo")
    with pytest.raises(TypeError, match="callable factory"):
        register_optimizer("sgd", name="not_a_factory")
