"""A client checks the θ_t it receives before it touches its records."""

import math

import numpy as np
import pytest
import torch

from skfedriem.exceptions import InvalidIterateError
from skfedriem.federated.client import ClientState
from skfedriem.privacy.mechanisms.units import PrivacyUnit
from skfedriem.federated.client_round import run_client_round
from skfedriem.federated.instructions import RoundInstructions, check_iterate
from skfedriem.models import SPDNet

from ..privacy.models import StiefelNet, cross_entropy, make_data

INSTRUCTIONS = RoundInstructions(lr=0.1, local_steps=2, batch_size=5, clip=1.0, noise_std=0.5, sampling="fixed",
                                 aggregation="projavg")


def theta_of(module):
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def run(theta, module=None):
    module = StiefelNet() if module is None else module
    return run_client_round(module, theta, make_data(20), ClientState.fresh(np.random.SeedSequence(0)), INSTRUCTIONS,
                            loss_fn=cross_entropy)


def test_an_honest_theta_passes_and_float32_rounding_is_tolerated():
    net = SPDNet(6, 2, dims=(3,), generator=torch.Generator().manual_seed(0), dtype=torch.float32)
    theta = theta_of(net)
    name = next(n for n, p in net.named_parameters() if hasattr(p, "manifold"))
    theta[name] = theta[name] * (1 + 1e-6)  # what a float32 server's projection leaves
    checked = check_iterate(net, theta)
    assert all(checked[n].dtype == torch.float32 for n in checked)


@pytest.mark.parametrize("tamper, reason", [
    (lambda t: t.update(W=t["W"] * math.sqrt(0.99)), "not a point of Stiefel"),
    (lambda t: t["head.bias"].__setitem__(0, float("nan")), "NaN or inf"),
    (lambda t: t.update(W=t["W"][:, :2]), "has shape"),
    (lambda t: t.update(W=t["W"][:1]), "has shape"),  # would broadcast under copy_
    (lambda t: t.pop("head.bias"), "missing"),
    (lambda t: t.update(extra=torch.zeros(1)), "unexpected"),
])
def test_a_bad_theta_is_refused_before_any_step(tamper, reason):
    model = StiefelNet()
    theta = theta_of(model)
    tamper(theta)
    before = theta_of(model)
    with pytest.raises(InvalidIterateError, match=reason):
        run(theta, model)
    for name, value in before.items():  # the client's working copy was not touched
        assert torch.equal(value, dict(model.named_parameters())[name].detach())


def test_the_round_runs_from_the_checked_theta():
    theta = theta_of(StiefelNet())
    submission, _ = run(theta)
    W = submission["W"]
    assert float((W.T @ W - torch.eye(3, dtype=W.dtype)).abs().max()) < 1e-10


class _Direction(torch.nn.Module):
    """A Euclidean weight whose per-record gradient is the record itself."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))

    def forward(self, x):
        return x @ self.w


@pytest.mark.parametrize("trials", [1, 200])
def test_a_subject_level_round_moves_the_model_by_one_clipped_mean_per_subject(trials):
    """The whole round, as a client runs it: a subject of 1 or 200 extreme trials moves one step (noise 0, q = 1,
    SGD at rate 1) by at most C / B over the B subjects; clipping its trials one by one would move it 200-fold."""
    X = torch.cat([torch.tensor([[1e6, 0.0, 0.0]]).repeat(trials, 1), torch.zeros(3, 3, dtype=torch.float64)])
    subjects = torch.tensor([0] * trials + [1, 1, 1])
    instructions = RoundInstructions(lr=1.0, local_steps=1, batch_size=2, clip=1.0, noise_std=0.0, sampling="fixed",
                                     aggregation="projavg", privacy_unit="subject")
    module = _Direction()
    submission, _ = run_client_round(module, {"w": torch.zeros(3, dtype=torch.float64)}, (X, subjects),
                                     ClientState.fresh(np.random.SeedSequence(0)), instructions,
                                     loss_fn=lambda out: out, unit=PrivacyUnit("subject"))
    assert torch.allclose(submission["w"], torch.tensor([-0.5, 0.0, 0.0], dtype=torch.float64))
