"""The ClientApp called directly with Flower messages (no engine): what it sends, what it keeps."""

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from skfedriem.decomposition import identity_loss
from skfedriem.exceptions import InvalidIterateError
from skfedriem.federated.client import ClientRecipe, ClientState, RoundInstructions, run_client_round
from skfedriem.flower import ClientSetup, make_client_app
from skfedriem.flower._client_app import _MU0_CEILING, PrivacyBudgetExceeded
from skfedriem.flower._protocol import decode_arrays, encode_arrays, encode_instructions
from skfedriem.models import PCAProjector
from skfedriem.privacy import PrivacyAccountant, PrivacyBudget, private_gradient
from skfedriem.privacy.accounting import DISCRETIZATION


@pytest.fixture(autouse=True)
def task_identity():
    """Messages are stamped with the running task's identity, which Flower's runtimes set."""
    saved = TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def setup(max_epsilon=None, ledger_path=None, seed=7):
    """A site (a fresh process each call: new module, new app; only the ledger file survives)."""
    X = torch.from_numpy(np.random.default_rng(0).normal(size=(50, 6)) / 3)
    module = PCAProjector(6, 2, "grassmann", generator=torch.Generator().manual_seed(0))
    seed = None if seed is None else np.random.SeedSequence(seed)
    client = ClientSetup("site-a", (X,), ClientRecipe(module, identity_loss), seed=seed, max_epsilon=max_epsilon,
                         ledger_path=None if ledger_path is None else str(ledger_path))
    return client, make_client_app(lambda context: client)


def train_message(theta, **kw):
    settings = dict(lr=0.1, local_steps=3, batch_size=10, clip=1.0, noise_std=0.05, sampling="fixed",
                    aggregation="rlavg")
    settings.update(kw)
    content = RecordDict({"theta": encode_arrays(theta), "instructions": encode_instructions(RoundInstructions(**settings))})
    return Message(content, dst_node_id=1, message_type="train"), RoundInstructions(**settings)


def context(run_id=1):
    return Context(run_id=run_id, node_id=1, node_config={}, state=RecordDict(), run_config={})


def theta_of(module):
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def test_query_reports_only_name_and_size():
    _, app = setup()
    reply = app(Message(RecordDict(), dst_node_id=1, message_type="query"), context())
    assert dict(reply.content["client"]) == {"name": "site-a", "n_records": 50, "input_shape": [6]}


def test_train_reply_is_the_submission_of_the_engine_round_and_state_stays_on_the_site():
    client, app = setup()
    theta = theta_of(client.recipe.module)
    ctx = context()
    msg, instructions = train_message(theta)
    reply = app(msg, ctx)
    assert set(reply.content.keys()) == {"submission", "metrics"}
    assert set(reply.content["metrics"].keys()) == {"submission_seconds"}
    # the same round run directly by the engine's client code, from the same seed
    copy = PCAProjector(6, 2, "grassmann")
    expected, _ = run_client_round(copy, theta, client.data, ClientState.fresh(np.random.SeedSequence(7)),
                                   instructions, loss_fn=identity_loss)
    got = decode_arrays(reply.content["submission"])
    for name in expected:
        assert torch.equal(got[name], expected[name])
    assert "skfedriem" in ctx.state.config_records  # streams continue next round, from the site's context
    second = decode_arrays(app(train_message(theta)[0], ctx).content["submission"])
    assert not all(torch.equal(second[n], got[n]) for n in got)  # fresh batches and noise, not a replay


def test_site_budget_refuses_noiseless_and_over_budget_rounds(tmp_path):
    client, app = setup(max_epsilon=3.0, ledger_path=tmp_path / "ledger.json")
    theta = theta_of(client.recipe.module)
    with pytest.raises(PrivacyBudgetExceeded, match="without noise"):
        app(train_message(theta, noise_std=0.0)[0], context())
    with pytest.raises(PrivacyBudgetExceeded, match="mu0 = 2e\\+03 > 10"):
        app(train_message(theta, noise_std=1e-4)[0], context())
    with pytest.raises(PrivacyBudgetExceeded, match="would take the privacy budget to epsilon=.* > 3"):
        app(train_message(theta, noise_std=0.1)[0], context())  # mu0 = 2: about 14 in one round
    ctx = context()
    rounds = 0
    with pytest.raises(PrivacyBudgetExceeded, match="would take"):
        for rounds in range(1, 100):
            # mu0 = 0.4, q = 0.2; a new request each round (a repeated one would get its cached reply)
            app(train_message(theta, noise_std=0.5, local_steps=5, lr=0.1 + rounds)[0], ctx)
    assert 1 < rounds < 99  # some rounds ran, then the ledger stopped the site
    assert len(client.ledger().fits) == rounds - 1  # refused rounds are not recorded
    assert client.ledger().spent() <= 3.0


def test_max_epsilon_without_a_ledger_file_is_refused():
    with pytest.raises(ValueError, match="max-epsilon needs a ledger-path"):
        setup(max_epsilon=1.0)


def test_an_off_manifold_theta_gets_an_error_and_costs_nothing(tmp_path):
    client, app = setup(max_epsilon=3.0, ledger_path=tmp_path / "ledger.json")
    theta = theta_of(client.recipe.module)
    theta["weight"] = 0.99 * theta["weight"]
    with pytest.raises(InvalidIterateError, match="not a point of Grassmann"):
        app(train_message(theta)[0], context())
    assert client.ledger().fits == []


def _replay(app_for_run, theta, lr=1e-4):
    """A server runs the site twice from the same θ, with σ then 2σ, and computes 2·Sub₁ − Sub₂.

    With one full-batch step (the same batch in both runs) and a replayed noise
    draw ξ, 2(−η(ḡ + σξ)) − (−η(ḡ + 2σξ)) = −ηḡ: the clean gradient of the records.
    Returns the relative error of that estimate.
    """
    subs = []
    for run_id, sigma in ((1, 0.2), (2, 0.4)):
        client, app = app_for_run()
        TaskIdentity.run_id = run_id
        msg, _ = train_message(theta, noise_std=sigma, batch_size=50, local_steps=1, lr=lr)
        subs.append(decode_arrays(app(msg, context(run_id)).content["submission"])["weight"])
    clean = private_gradient(client.recipe.module, identity_loss, client.data, clip=1.0, noise_std=0.0, denominator=50)
    recovered = -(2 * subs[0] - subs[1]) / lr
    return float((recovered - clean["weight"]).norm() / clean["weight"].norm())


def test_budget_and_fresh_noise_hold_across_runs_and_restarts(tmp_path):
    ledger = tmp_path / "site-a.ledger.json"
    theta = theta_of(setup()[0].recipe.module)
    # two runs, the site restarted in between (a new process: only the ledger file remains)
    assert _replay(lambda: setup(max_epsilon=50.0, ledger_path=ledger, seed=None), theta) > 1.0
    fits = PrivacyBudget(50.0, path=ledger).fits
    assert [f["label"].split()[:2] for f in fits] == [["run", "1"], ["run", "2"]]
    # the ledger composes both runs, and a third run that would pass max-epsilon is refused
    spent = PrivacyBudget(np.inf, path=ledger, discretization=10 * DISCRETIZATION).spent()
    more = PrivacyAccountant()
    for f in fits:
        more.extend(PrivacyAccountant.from_state_dict({"history": f["steps"]}))
    more.step(mu0=2 / (50 * 0.2), sample_rate=1.0, num_steps=1)
    limit = (spent + more.get_epsilon(1e-5, discretization=10 * DISCRETIZATION)) / 2
    client, app = setup(max_epsilon=limit, ledger_path=ledger, seed=None)
    TaskIdentity.run_id = 3
    with pytest.raises(PrivacyBudgetExceeded):
        app(train_message(theta, noise_std=0.2, batch_size=50, local_steps=1)[0], context(3))


def test_the_replay_check_recovers_the_gradient_when_the_noise_repeats(tmp_path):
    """What the check above catches: a site whose noise is the same in every run (a fixed seed)."""
    theta = theta_of(setup()[0].recipe.module)
    assert _replay(lambda: setup(seed=7), theta) < 1e-2


@pytest.mark.parametrize("sampling, floor", [("fixed", 75.0), ("poisson", 22.0)])
def test_rounds_above_the_mu0_ceiling_are_meaningless_privacy(sampling, floor):
    """What the ceiling's comment states: one step at mu0 = 10, q = 0.01 already costs a large epsilon."""
    ledger = PrivacyAccountant()
    ledger.step(mu0=_MU0_CEILING, sample_rate=0.01, num_steps=1, sampling=sampling)
    assert ledger.get_epsilon(1e-5, discretization=10 * DISCRETIZATION) > floor


def test_a_repeated_request_gets_the_same_reply_and_costs_nothing(tmp_path):
    """A resumed server re-sends the round it crashed in: same answer, no second charge, no fresh noise."""
    ledger = tmp_path / "ledger.json"
    theta = theta_of(setup()[0].recipe.module)
    first = decode_arrays(setup(max_epsilon=5.0, ledger_path=ledger, seed=None)[1](
        train_message(theta, noise_std=0.5)[0], context(1)).content["submission"])
    TaskIdentity.run_id = 2
    client, app = setup(max_epsilon=5.0, ledger_path=ledger, seed=None)  # a new run, a restarted site
    again = decode_arrays(app(train_message(theta, noise_std=0.5)[0], context(2)).content["submission"])
    assert all(torch.equal(first[n], again[n]) for n in first)
    assert len(client.ledger().fits) == 1
    other = dict(theta)
    other["weight"] = theta["weight"].clone()
    other["weight"][0, 0] += 1e-12  # one bit off: a new request, a new release, charged
    fresh = decode_arrays(app(train_message(other, noise_std=0.5)[0], context(2)).content["submission"])
    assert not torch.equal(fresh["weight"], first["weight"]) and len(client.ledger().fits) == 2
