"""The ClientApp called directly with Flower messages (no engine): what it sends, what it keeps, what it refuses."""

import math

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from skfedriem.decomposition import identity_loss
from skfedriem.federated.client import ClientRecipe, ClientState
from skfedriem.federated.client_round import run_client_round
from skfedriem.federated.instructions import RoundInstructions
from skfedriem.flower import ClientSetup, SiteGuard, make_client_app
from skfedriem.flower.protocol.client_app import _FAILED, _REFUSALS, DEFAULT_MAX_EPSILON, MU0_CEILING
from skfedriem.flower.protocol.messages import decode_arrays, encode_arrays, encode_instructions
from skfedriem.flower.deployment import apps
from skfedriem.flower.deployment.apps import client_apps
from skfedriem.exceptions import InvalidInstructionsError, InvalidIterateError, PrivacyBudgetExceeded
from skfedriem.models import PCAProjector
from skfedriem.privacy import PrivacyAccountant, PrivacyBudget, clipped_gradient_diameter, private_gradient
from skfedriem.privacy.accounting.subsampled_gaussian import DISCRETIZATION

REFUSED_THETA = _REFUSALS[InvalidIterateError]
REFUSED_INSTRUCTIONS = _REFUSALS[InvalidInstructionsError]
REFUSED_BY_LEDGER = _REFUSALS[PrivacyBudgetExceeded]


@pytest.fixture(autouse=True)
def task_identity():
    """Messages are stamped with the running task's identity, which Flower's runtimes set."""
    saved = TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def records():
    return torch.from_numpy(np.random.default_rng(0).normal(size=(50, 6)) / 3)


def setup(ledger_path=None, max_epsilon=DEFAULT_MAX_EPSILON, seed=7, timings=False):
    """A site (a fresh process each call: new module, new app; only the ledger file survives).

    With a ``ledger_path`` it is a deployed site (a SiteGuard); without, an in-process simulation client.
    """
    module = PCAProjector(6, 2, "grassmann", generator=torch.Generator().manual_seed(0))
    seed = None if seed is None else np.random.SeedSequence(seed)
    guard = None if ledger_path is None else SiteGuard(str(ledger_path), max_epsilon=max_epsilon)
    client = ClientSetup("site-a", (records(),), ClientRecipe(module, identity_loss), seed=seed, guard=guard,
                         timings=timings)
    return client, make_client_app(lambda context: client)


def train_message(theta, **kw):
    settings = dict(lr=0.1, local_steps=3, batch_size=10, clip=1.0, noise_std=0.5, sampling="fixed",
                    aggregation="rlavg")
    settings.update(kw)
    content = RecordDict({"theta": encode_arrays(theta), "instructions": encode_instructions(RoundInstructions(**settings))})
    return Message(content, dst_node_id=1, message_type="train"), RoundInstructions(**settings)


def context(run_id=1, node_config=None, run_config=None):
    return Context(run_id=run_id, node_id=1, node_config=node_config or {}, state=RecordDict(),
                   run_config=run_config or {})


def theta_of(module):
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def refusal(reply) -> str:
    assert reply.has_error() and not reply.has_content()
    return reply.error.reason


def charged_rounds(path) -> int:
    return len(PrivacyBudget(math.inf, path=path).fits) if path.exists() else 0


def test_query_reports_only_name_and_size():
    _, app = setup()
    reply = app(Message(RecordDict(), dst_node_id=1, message_type="query"), context())
    assert dict(reply.content["client"]) == {"name": "site-a", "n_records": 50, "input_shape": [6]}


def test_train_reply_is_the_submission_of_the_engine_round_and_state_stays_on_the_site(tmp_path):
    client, app = setup(tmp_path / "ledger.json")
    theta = theta_of(client.recipe.module)
    ctx = context()
    msg, instructions = train_message(theta)
    reply = app(msg, ctx)
    assert set(reply.content.keys()) == {"submission"}  # no timing of the work on the records
    # the same round run directly by the engine's client code, from the same seed
    copy = PCAProjector(6, 2, "grassmann")
    expected, _ = run_client_round(copy, theta, client.data, ClientState.fresh(np.random.SeedSequence(7)),
                                   instructions, loss_fn=identity_loss)
    got = decode_arrays(reply.content["submission"])
    for name in expected:
        assert torch.equal(got[name], expected[name])
    assert "skfedriem" in ctx.state.config_records  # streams continue next round, from the site's context
    second = decode_arrays(app(train_message(theta, lr=0.2)[0], ctx).content["submission"])
    assert not all(torch.equal(second[n], got[n]) for n in got)  # fresh batches and noise, not a replay


def test_a_site_sends_timings_only_when_it_opts_in(tmp_path):
    client, app = setup(tmp_path / "ledger.json", timings=True)
    reply = app(train_message(theta_of(client.recipe.module))[0], context())
    assert set(reply.content.keys()) == {"submission", "metrics"}
    assert set(reply.content["metrics"].keys()) == {"submission_seconds"}


@pytest.mark.parametrize("instructions, why", [
    ({"batch_size": 1.999}, REFUSED_INSTRUCTIONS),   # charged as 1.999, run as 1 before
    ({"batch_size": 0}, REFUSED_INSTRUCTIONS),
    ({"batch_size": 51}, REFUSED_INSTRUCTIONS),      # larger than the site
    ({"local_steps": 2.5}, REFUSED_INSTRUCTIONS),
    ({"clip": math.inf}, REFUSED_INSTRUCTIONS),      # noise without a bound on the sensitivity
    ({"clip": math.nan}, REFUSED_INSTRUCTIONS),
    ({"noise_std": math.inf}, REFUSED_INSTRUCTIONS),
    ({"sampling": "shuffle"}, REFUSED_INSTRUCTIONS),
    ({"noise_std": 0.0}, REFUSED_BY_LEDGER),         # no noise, whatever the budget
    ({"noise_std": 0.0, "clip": math.inf}, REFUSED_BY_LEDGER),
    ({"noise_std": 1e-3}, REFUSED_BY_LEDGER),        # mu0 = 200 > 10
    ({"local_steps": 10_001}, REFUSED_BY_LEDGER),
])
@pytest.mark.parametrize("max_epsilon", [DEFAULT_MAX_EPSILON, math.inf])
def test_a_deployed_site_refuses_rounds_it_cannot_run_privately_and_charges_nothing(tmp_path, instructions, why,
                                                                                    max_epsilon):
    ledger = tmp_path / "ledger.json"
    client, app = setup(ledger, max_epsilon=max_epsilon)
    reply = app(train_message(theta_of(client.recipe.module), **instructions)[0], context())
    assert refusal(reply) == why and charged_rounds(ledger) == 0


def test_the_default_site_configuration_has_a_ledger_and_a_budget(tmp_path):
    """A site started with nothing but its data refuses a noiseless, unclipped round."""
    data = tmp_path / "site.npy"
    np.save(data, records().numpy())
    app = client_apps["pca"]
    run = {"solver": "riemannian", "n-components": 2}
    node = {"data-path": str(data)}
    theta = theta_of(PCAProjector(6, 2, "grassmann"))
    reply = app(train_message(theta, noise_std=0.0, clip=math.inf)[0], context(node_config=node, run_config=run))
    assert refusal(reply) == REFUSED_BY_LEDGER
    ledger = tmp_path / "site.npy.privacy-ledger.json"
    reply = app(train_message(theta, noise_std=0.5)[0], context(node_config=node, run_config=run))
    assert not reply.has_error() and charged_rounds(ledger) == 1  # next to the data file, by default
    assert PrivacyBudget(math.inf, path=ledger).fits[0]["steps"][0]["mu0"] == pytest.approx(2 / (10 * 0.5))


def test_a_sites_records_cannot_be_probed_through_its_failures(tmp_path):
    """A label outside the run's classes, or a record that is not SPD, changes neither the answer nor the count."""
    data = tmp_path / "site.npz"
    X = np.stack([np.eye(3) * (1 + 0.1 * i) for i in range(10)])
    X[3] = np.diag([1.0, 1.0, -0.0123])  # not SPD: a zero-weight record, whatever the run
    np.savez(data, X=X, y=np.array(["secret-label"] + ["a", "b"] * 4 + ["a"]))
    app = client_apps["spdnet"]
    sizes = []
    for classes in ("a,b", "a,b,secret-label"):  # a server probing for a rare label
        apps._SITES.clear()
        ctx = context(node_config={"data-path": str(data)}, run_config={"classes": classes, "dims": "2"})
        described = app(Message(RecordDict(), dst_node_id=1, message_type="query"), ctx)
        sizes.append(described.content["client"]["n_records"])
        theta = theta_of(apps.site_setup("spdnet", ctx).recipe.module)
        assert not app(train_message(theta, batch_size=5)[0], ctx).has_error()  # the site answers either way
    assert sizes == [10, 10]  # the record count is the file's


def test_a_site_error_reply_names_nothing_of_the_site(tmp_path):
    ctx = context(node_config={"data-path": str(tmp_path / "secret-name.npz")}, run_config={"classes": "a,b"})
    for message in (Message(RecordDict(), dst_node_id=1, message_type="query"), train_message({})[0]):
        assert refusal(client_apps["spdnet"](message, ctx)) == _FAILED  # the details are in the site's log


def test_an_off_manifold_theta_gets_an_error_and_costs_nothing(tmp_path):
    ledger = tmp_path / "ledger.json"
    client, app = setup(ledger, max_epsilon=3.0)
    theta = theta_of(client.recipe.module)
    theta["weight"] = 0.99 * theta["weight"]
    assert refusal(app(train_message(theta)[0], context())) == REFUSED_THETA
    assert charged_rounds(ledger) == 0


def test_the_simulation_clients_errors_are_detailed():
    client, app = setup()  # no guard: the in-process simulation, whose server is the caller
    theta = theta_of(client.recipe.module)
    theta["weight"] = 0.99 * theta["weight"]
    assert refusal(app(train_message(theta)[0], context())).startswith("InvalidIterateError: The server's")


def test_site_budget_refuses_over_budget_rounds(tmp_path):
    ledger = tmp_path / "ledger.json"
    client, app = setup(ledger, max_epsilon=3.0)
    theta = theta_of(client.recipe.module)
    assert refusal(app(train_message(theta, noise_std=0.1)[0], context())) == REFUSED_BY_LEDGER  # about 14 alone
    ctx = context()
    rounds = 0
    for rounds in range(1, 100):
        # mu0 = 0.4, q = 0.2; a new request each round (a repeated one would get its cached reply)
        if app(train_message(theta, noise_std=0.5, local_steps=5, lr=0.1 + rounds)[0], ctx).has_error():
            break
    assert 1 < rounds < 99  # some rounds ran, then the ledger stopped the site
    assert charged_rounds(ledger) == rounds - 1  # refused rounds are not recorded
    assert client.guard.ledger().spent() <= 3.0


def test_a_site_guard_checks_its_own_settings(tmp_path):
    with pytest.raises(ValueError, match="max-epsilon must be > 0"):
        SiteGuard(str(tmp_path / "l.json"), max_epsilon=0.0)
    with pytest.raises(ValueError, match="set max-epsilon=inf with non-private=true"):
        SiteGuard(str(tmp_path / "l.json"), allow_non_private=True)


def test_a_test_bench_site_may_accept_noiseless_rounds_as_infinite_loss(tmp_path):
    ledger = tmp_path / "ledger.json"
    client = ClientSetup("bench", (records(),), ClientRecipe(PCAProjector(6, 2, "grassmann"), identity_loss),
                         guard=SiteGuard(str(ledger), max_epsilon=math.inf, allow_non_private=True))
    reply = make_client_app(lambda context: client)(train_message(theta_of(client.recipe.module), noise_std=0.0)[0],
                                                    context())
    assert not reply.has_error() and math.isinf(PrivacyBudget(math.inf, path=ledger).spent())


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
    assert _replay(lambda: setup(ledger, max_epsilon=50.0, seed=None), theta) > 1.0
    fits = PrivacyBudget(50.0, path=ledger).fits
    assert [f["label"].split()[:2] for f in fits] == [["run", "1"], ["run", "2"]]
    # the ledger composes both runs, and a third run that would pass max-epsilon is refused
    spent = PrivacyBudget(np.inf, path=ledger, discretization=10 * DISCRETIZATION).spent()
    more = PrivacyAccountant()
    for f in fits:
        more.extend(PrivacyAccountant.from_state_dict({"history": f["steps"]}))
    more.step(mu0=2 / (50 * 0.2), sample_rate=1.0, num_steps=1)
    limit = (spent + more.get_epsilon(1e-5, discretization=10 * DISCRETIZATION)) / 2
    client, app = setup(ledger, max_epsilon=limit, seed=None)
    TaskIdentity.run_id = 3
    assert refusal(app(train_message(theta, noise_std=0.2, batch_size=50, local_steps=1)[0], context(3))) \
        == REFUSED_BY_LEDGER


def test_the_replay_check_recovers_the_gradient_when_the_noise_repeats(tmp_path):
    """What the check above catches: a site whose noise is the same in every run (a fixed seed)."""
    theta = theta_of(setup()[0].recipe.module)
    assert _replay(lambda: setup(seed=7), theta) < 1e-2


def test_a_deployed_site_refuses_a_seed(tmp_path):
    """A seeded site that restarted would repeat its noise; deployed sites take no seed."""
    data = tmp_path / "site.npy"
    np.save(data, records().numpy())
    ctx = context(node_config={"data-path": str(data), "seed": 7}, run_config={"solver": "riemannian"})
    theta = theta_of(PCAProjector(6, 2, "grassmann"))
    assert refusal(client_apps["pca"](train_message(theta)[0], ctx)) == _FAILED


def test_a_restarted_default_site_draws_fresh_noise_within_a_run(tmp_path):
    """The restart attack of finding 7 against a default site: two processes, one run, a changed clip."""
    data = tmp_path / "site.npy"
    np.save(data, records().numpy())
    module = PCAProjector(6, 2, "grassmann")
    theta, lr = theta_of(module), 1e-4
    subs = []
    for clip, noise in ((1.0, 0.2), (2.0, 0.4)):  # the second process gets the round with clip and σ doubled
        apps._SITES.clear()  # a new process: nothing cached
        ctx = context(node_config={"data-path": str(data), "max-epsilon": 100.0}, run_config={"solver": "riemannian"})
        msg, _ = train_message(theta, noise_std=noise, clip=clip, batch_size=50, local_steps=1, lr=lr)
        subs.append(decode_arrays(client_apps["pca"](msg, ctx).content["submission"])["weight"])
    # with a repeated noise draw, −(2·Sub₁ − Sub₂)/η would be the clean gradient (no record reaches the clip)
    clean = private_gradient(module, identity_loss, (records(),), clip=1.0, noise_std=0.0, denominator=50)["weight"]
    recovered = -(2 * subs[0] - subs[1]) / lr
    assert float((recovered - clean).norm() / clean.norm()) > 1.0


@pytest.mark.parametrize("sampling, floor", [("fixed", 75.0), ("poisson", 22.0)])
def test_rounds_above_the_mu0_ceiling_are_meaningless_privacy(sampling, floor):
    """What the ceiling's comment states: one step at mu0 = 10, q = 0.01 already costs a large epsilon."""
    ledger = PrivacyAccountant()
    ledger.step(mu0=MU0_CEILING, sample_rate=0.01, num_steps=1, sampling=sampling)
    assert ledger.get_epsilon(1e-5, discretization=10 * DISCRETIZATION) > floor


def test_a_repeated_request_gets_the_same_reply_and_costs_nothing(tmp_path):
    """A resumed server re-sends the round it crashed in: same answer, no second charge, no fresh noise."""
    ledger = tmp_path / "ledger.json"
    theta = theta_of(setup()[0].recipe.module)
    first = decode_arrays(setup(ledger, max_epsilon=5.0, seed=None)[1](
        train_message(theta, noise_std=0.5)[0], context(1)).content["submission"])
    TaskIdentity.run_id = 2
    client, app = setup(ledger, max_epsilon=5.0, seed=None)  # a new run, a restarted site
    again = decode_arrays(app(train_message(theta, noise_std=0.5)[0], context(2)).content["submission"])
    assert all(torch.equal(first[n], again[n]) for n in first)
    assert charged_rounds(ledger) == 1
    other = dict(theta)
    other["weight"] = theta["weight"].clone()
    other["weight"][0, 0] += 1e-12  # one bit off: a new request, a new release, charged
    fresh = decode_arrays(app(train_message(other, noise_std=0.5)[0], context(2)).content["submission"])
    assert not torch.equal(fresh["weight"], first["weight"]) and charged_rounds(ledger) == 2


def test_a_site_charges_the_count_of_adaptive_clipping_and_returns_its_fraction(tmp_path):
    """count_noise_std > 0: the site's ledger charges μ0 = √(μ_g² + 1/σ_b²) and the reply carries the fraction."""
    from skfedriem.federated.instructions import CLIPPED_FRACTION

    client, app = setup(tmp_path / "ledger.json")
    theta = theta_of(client.recipe.module)
    msg, instructions = train_message(theta, count_noise_std=2.0)
    reply = app(msg, context())
    got = decode_arrays(reply.content["submission"])
    assert set(got) == {*theta, CLIPPED_FRACTION} and got[CLIPPED_FRACTION].numel() == 1
    expected, _ = run_client_round(PCAProjector(6, 2, "grassmann"), theta, client.data,
                                   ClientState.fresh(np.random.SeedSequence(7)), instructions, loss_fn=identity_loss)
    assert float(got[CLIPPED_FRACTION]) == float(expected[CLIPPED_FRACTION])
    (fit,) = PrivacyBudget(math.inf, path=tmp_path / "ledger.json").fits
    (step,) = fit["steps"]
    mu_g = clipped_gradient_diameter(client.recipe.module) * 1.0 / (10 * 0.5)  # Δ C / (B σ)
    assert step["mu0"] == pytest.approx(math.hypot(mu_g, 1 / 2.0)) and step["steps"] == 3


# ---------------------------------------------------------------- a site's records are its file's, whatever the run
def _trials_with_bad_ones(n_bad: int) -> np.ndarray:
    """20 SPD trials and ``n_bad`` that are SPD in float64 only (an eigenvalue below float32's smallest normal)."""
    rng = np.random.default_rng(0)
    A = rng.normal(size=(20, 3, 3))
    good = A @ A.transpose(0, 2, 1) + np.eye(3)
    bad = np.stack([np.diag([1.0, 1.0, 1e-40])] * n_bad)
    return np.concatenate([bad, good])


@pytest.mark.parametrize("n_bad", [1, 3])
def test_a_sites_record_count_is_its_files_under_every_run_config(tmp_path, n_bad):
    """Validity in the run's dtype decided the count a free query released: 20 records in float32, 21 in float64."""
    data = tmp_path / "site.npz"
    X = _trials_with_bad_ones(n_bad)
    np.savez(data, X=X, y=np.arange(len(X)) % 2)
    sizes = []
    for kind in ("spdnet", "tangent"):
        for run in ({"dtype": "float32"}, {"dtype": "float64"}, {"dtype": "float64", "classes": "0,1,7"},
                    {"dtype": "float32", "dims": "2"} if kind == "spdnet" else {"reference": "2 0 0 0 2 0 0 0 2"}):
            apps._SITES.clear()
            ctx = context(node_config={"data-path": str(data)}, run_config={"classes": "0,1", **run})
            reply = client_apps[kind](Message(RecordDict(), dst_node_id=1, message_type="query"), ctx)
            sizes.append(reply.content["client"]["n_records"])
    assert sizes == [20 + n_bad] * 8


def test_a_record_the_run_cannot_compute_trains_as_a_zero_weight_record(tmp_path):
    from skfedriem.classification._base import IGNORED_TARGET
    from skfedriem.privacy.per_record.gradients import per_record_gradients

    data = tmp_path / "site.npz"
    X = _trials_with_bad_ones(1)
    X[5] = np.nan  # invalid in every dtype
    np.savez(data, X=X, y=np.arange(len(X)) % 2)
    ctx = context(node_config={"data-path": str(data)}, run_config={"classes": "0,1", "dtype": "float32"})
    client = apps.site_setup("spdnet", ctx)
    inputs, targets = client.data
    assert len(inputs) == 21 and inputs.dtype == torch.float32
    for i in (0, 5):  # the placeholder: an SPD input, no target, no gradient
        assert torch.equal(inputs[i], torch.eye(3)) and int(targets[i]) == IGNORED_TARGET
    norms = per_record_gradients(client.recipe.module, client.recipe.loss_fn, client.data).norms()
    assert float(norms[0]) == float(norms[5]) == 0.0 and bool((norms[1:5] > 0).all())


# ---------------------------------------------------------------- noise and clips the model's dtype can hold
def _float32_site(ledger):
    module = torch.nn.Linear(6, 2)
    X = torch.from_numpy(np.random.default_rng(1).normal(size=(40, 6)).astype(np.float32))
    client = ClientSetup("site", (X, torch.arange(40) % 2), ClientRecipe(
        module, lambda out, y: torch.nn.functional.cross_entropy(out, y, reduction="none")),
        guard=SiteGuard(str(ledger), max_epsilon=math.inf))
    return client, make_client_app(lambda context: client)


@pytest.mark.parametrize("instructions", [dict(noise_std=1e300), dict(clip=1e30, noise_std=1e29),
                                          dict(lr=1e30), dict(count_noise_std=1e300)])
def test_a_float32_site_refuses_noise_and_clips_beyond_its_range_before_charging(tmp_path, instructions):
    """σ = 1e300 was charged μ0 = 2e-300, then ran into inf; now refused, nothing charged or run."""
    ledger = tmp_path / "ledger.json"
    client, app = _float32_site(ledger)
    theta = theta_of(client.recipe.module)
    before = {k: v.clone() for k, v in theta.items()}
    assert refusal(app(train_message(theta, **instructions)[0], context())) == REFUSED_INSTRUCTIONS
    assert charged_rounds(ledger) == 0
    assert not app(train_message(theta)[0], context()).has_error() and charged_rounds(ledger) == 1
    assert all(torch.equal(before[k], theta[k]) for k in theta)


def test_a_site_refuses_a_round_planned_for_another_size(tmp_path):
    ledger = tmp_path / "ledger.json"
    client, app = setup(ledger, seed=None)
    theta = theta_of(client.recipe.module)
    for planned in (20, 49, True, 50.0):
        assert refusal(app(train_message(theta, planned_records=planned)[0], context())) == REFUSED_INSTRUCTIONS
    assert charged_rounds(ledger) == 0
    assert not app(train_message(theta, planned_records=50)[0], context()).has_error()
    assert charged_rounds(ledger) == 1


# ---------------------------------------------------------------- noise that no lost context can repeat
class _Draws:
    """Every standard normal the site draws, message by message."""

    def __init__(self, monkeypatch):
        from skfedriem.privacy.mechanisms.randomness import SeededRandomness

        self.messages: list[list[torch.Tensor]] = []
        normal = SeededRandomness.standard_normal

        def watched(randomness, shape, dtype):
            value = normal(randomness, shape, dtype)
            self.messages[-1].append(value)
            return value

        monkeypatch.setattr(SeededRandomness, "standard_normal", watched)

    def start(self):
        self.messages.append([])


def test_a_lost_context_cannot_make_two_requests_share_draws(tmp_path, monkeypatch):
    """Flower pushes a reply before it saves the context: a lost save gave the next request the same noise."""
    from copy import deepcopy

    draws = _Draws(monkeypatch)
    client, app = setup(tmp_path / "ledger.json", max_epsilon=50.0, seed=None)
    theta = theta_of(client.recipe.module)
    ctx = context()
    draws.start()
    app(train_message(theta)[0], ctx)
    saved = deepcopy(ctx.state)  # the context as Flower last saved it
    for lr in (0.2, 0.3):  # two new, different requests, each from the saved context (the first one's save was lost)
        ctx.state = deepcopy(saved)
        draws.start()
        assert not app(train_message(theta, lr=lr)[0], ctx).has_error()
    second, third = draws.messages[1:]
    assert len(second) == len(third) > 0
    assert not any(torch.equal(a, b) for a, b in zip(second, third))
    assert "skfedriem" not in ctx.state.config_records  # no generator state in the context at all


def test_the_reply_cache_never_serves_a_reply_its_ledger_did_not_charge(tmp_path):
    ledger = tmp_path / "ledger.json"
    client, app = setup(ledger, max_epsilon=50.0, seed=None)
    theta = theta_of(client.recipe.module)
    first = decode_arrays(app(train_message(theta)[0], context()).content["submission"])
    assert charged_rounds(ledger) == 1
    ledger.unlink()  # the ledger rolled back (restored from an old backup, say): the cached reply's charge is gone
    again = decode_arrays(app(train_message(theta)[0], context()).content["submission"])
    assert charged_rounds(ledger) == 1  # charged anew
    assert not torch.equal(first["weight"], again["weight"])  # a fresh release, not the uncharged cached one
    repeat = decode_arrays(app(train_message(theta)[0], context()).content["submission"])
    assert torch.equal(repeat["weight"], again["weight"]) and charged_rounds(ledger) == 1


def test_a_resumed_run_gets_its_cached_reply_and_another_model_does_not(tmp_path):
    """The reply cache is keyed by the model the request runs on: the deployment's own keys (resume=true) are not
    part of it, the estimator's settings are."""
    data = tmp_path / "site.npz"
    X = _trials_with_bad_ones(1)[1:]
    np.savez(data, X=X, y=np.arange(len(X)) % 2)
    node = {"data-path": str(data), "max-epsilon": 100.0}
    ledger = tmp_path / "site.npz.privacy-ledger.json"
    replies, theta = [], None
    for run in ({"classes": "0,1"}, {"classes": "0,1", "resume": "true", "round-timeout": 5.0}, {"classes": "1,0"}):
        apps._SITES.clear()
        ctx = context(node_config=node, run_config={"dims": "2", **run})
        module = apps.site_setup("spdnet", ctx).recipe.module
        theta = theta_of(module) if theta is None else theta
        theta["classifier.weight"] = torch.zeros_like(module.classifier.weight)  # every model takes this θ
        theta["classifier.bias"] = torch.zeros_like(module.classifier.bias)
        replies.append(decode_arrays(client_apps["spdnet"](train_message(theta, batch_size=5)[0], ctx)
                                     .content["submission"]))
    assert all(torch.equal(replies[0][k], replies[1][k]) for k in replies[0])  # the resumed request: cached
    assert charged_rounds(ledger) == 2  # the first run's round, and the other model's (a new release)


def test_a_site_whose_records_changed_gets_a_fresh_release_not_the_cached_one(tmp_path):
    """Two files sharing one ledger, or one file rewritten: the reply cached for the old records is not served."""
    data = tmp_path / "site.npz"
    X = _trials_with_bad_ones(1)[1:]
    ledger = tmp_path / "ledger.json"
    node = {"data-path": str(data), "max-epsilon": 100.0, "ledger-path": str(ledger)}
    replies, theta = [], None
    for trials in (X, X[::-1].copy(), X):
        np.savez(data, X=trials, y=np.arange(len(trials)) % 2)
        apps._SITES.clear()  # the site process restarts and reads its file again
        ctx = context(node_config=node, run_config={"dims": "2", "classes": "0,1"})
        module = apps.site_setup("spdnet", ctx).recipe.module
        theta = theta_of(module) if theta is None else theta
        replies.append(decode_arrays(client_apps["spdnet"](train_message(theta, batch_size=5)[0], ctx)
                                     .content["submission"]))
    assert not all(torch.equal(replies[0][k], replies[1][k]) for k in replies[0])  # a fresh, charged release
    assert all(torch.equal(replies[0][k], replies[2][k]) for k in replies[0])  # the first records' cached reply
    assert charged_rounds(ledger) == 2
