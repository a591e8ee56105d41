"""The ClientApp called directly with Flower messages (no engine): what it sends, what it keeps."""

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from skfedriem.decomposition import identity_loss
from skfedriem.federated.client import ClientState, RoundInstructions, run_client_round
from skfedriem.flower import ClientSetup, make_client_app
from skfedriem.flower._client_app import _MU0_CEILING, PrivacyBudgetExceeded
from skfedriem.flower._protocol import decode_arrays, encode_arrays, encode_instructions
from skfedriem.models import PCAProjector
from skfedriem.privacy import PrivacyAccountant
from skfedriem.privacy.accounting import DISCRETIZATION


@pytest.fixture(autouse=True)
def task_identity():
    """Messages are stamped with the running task's identity, which Flower's runtimes set."""
    saved = TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def setup(max_epsilon=None):
    X = torch.from_numpy(np.random.default_rng(0).normal(size=(50, 6)) / 3)
    module = PCAProjector(6, 2, "grassmann", generator=torch.Generator().manual_seed(0))
    client = ClientSetup("site-a", (X,), module, identity_loss, np.random.SeedSequence(7), max_epsilon=max_epsilon)
    return client, make_client_app(lambda context: client)


def train_message(theta, **kw):
    settings = dict(lr=0.1, local_steps=3, batch_size=10, clip=1.0, noise_std=0.05, sampling="fixed",
                    aggregation="rlavg")
    settings.update(kw)
    content = RecordDict({"theta": encode_arrays(theta), "instructions": encode_instructions(RoundInstructions(**settings))})
    return Message(content, dst_node_id=1, message_type="train"), RoundInstructions(**settings)


def context():
    return Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})


def theta_of(module):
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def test_query_reports_only_name_and_size():
    _, app = setup()
    reply = app(Message(RecordDict(), dst_node_id=1, message_type="query"), context())
    assert dict(reply.content["client"]) == {"name": "site-a", "n_records": 50}


def test_train_reply_is_the_submission_of_the_engine_round_and_state_stays_on_the_site():
    client, app = setup()
    theta = theta_of(client.module)
    ctx = context()
    msg, instructions = train_message(theta)
    reply = app(msg, ctx)
    assert set(reply.content.keys()) == {"submission", "metrics"}
    assert set(reply.content["metrics"].keys()) == {"submission_seconds"}
    # the same round run directly by the engine's client code, from the same seed
    copy = PCAProjector(6, 2, "grassmann")
    expected, _ = run_client_round(copy, theta, client.data, ClientState.from_seed(np.random.SeedSequence(7)),
                                   instructions, loss_fn=identity_loss)
    got = decode_arrays(reply.content["submission"])
    for name in expected:
        assert torch.equal(got[name], expected[name])
    assert "skfedriem" in ctx.state.config_records  # streams continue next round, from the site's context
    second = decode_arrays(app(train_message(theta)[0], ctx).content["submission"])
    assert not all(torch.equal(second[n], got[n]) for n in got)  # fresh batches and noise, not a replay


def test_site_budget_refuses_noiseless_and_over_budget_rounds():
    client, app = setup(max_epsilon=3.0)
    theta = theta_of(client.module)
    with pytest.raises(PrivacyBudgetExceeded, match="without noise"):
        app(train_message(theta, noise_std=0.0)[0], context())
    with pytest.raises(PrivacyBudgetExceeded, match="mu0 = 2e\\+03 > 10"):
        app(train_message(theta, noise_std=1e-4)[0], context())
    with pytest.raises(PrivacyBudgetExceeded, match="would reach .* > max-epsilon=3"):
        app(train_message(theta, noise_std=0.1)[0], context())  # mu0 = 2: about 14 in one round
    ctx = context()
    rounds = 0
    with pytest.raises(PrivacyBudgetExceeded, match="would reach"):
        for rounds in range(1, 100):
            app(train_message(theta, noise_std=0.5, local_steps=5)[0], ctx)  # mu0 = 0.4, q = 0.2
    assert 1 < rounds < 99  # some rounds ran, then the ledger stopped the site
    assert "ledger" in ctx.state.config_records["skfedriem"]  # kept with the streams, on the site


@pytest.mark.parametrize("sampling, floor", [("fixed", 75.0), ("poisson", 22.0)])
def test_rounds_above_the_mu0_ceiling_are_meaningless_privacy(sampling, floor):
    """What the ceiling's comment states: one step at mu0 = 10, q = 0.01 already costs a large epsilon."""
    ledger = PrivacyAccountant()
    ledger.step(mu0=_MU0_CEILING, sample_rate=0.01, num_steps=1, sampling=sampling)
    assert ledger.get_epsilon(1e-5, discretization=10 * DISCRETIZATION) > floor
