"""A malicious server plays against a deployed site's ClientApp: what the site runs is never more than it charges.

Hypothesis writes the server's side: arbitrary instructions (fractional and
huge B and τ, tiny and huge clip and σ, unknown samplings and rules), good and
bad iterates, replays of earlier requests, new runs and restarts of the site
process. The site is the real ClientApp with its SiteGuard; instruments on the
sampler and the mechanism record what each local step actually ran (the batch
it drew, the rate it drew it at, the clip, the denominator, the noise std).
After every message the test re-accounts those steps independently
(prv-accountant on the closed-form privacy-loss variables of
``tests/privacy/prv_reference.py``) and asserts that an accepted round's
charge dominates them step by step and in ε, that a repeated request got the
same reply and no charge, and that a refused round charged nothing, ran
nothing, and sent back nothing but the kind of refusal.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

pytest.importorskip("flwr")

from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from skfedriem.audit.mutations import site_charges_the_servers_numbers
from skfedriem.decomposition import identity_loss
from skfedriem.federated.client import ClientRecipe, RoundInstructions
from skfedriem.flower import ClientSetup, SiteGuard, make_client_app
from skfedriem.flower._client_app import _FAILED, _REFUSALS
from skfedriem.flower._protocol import decode_arrays, encode_arrays, encode_instructions
from skfedriem.models import PCAProjector
from skfedriem.privacy import PrivacyAccountant, PrivacyBudget
from skfedriem.privacy import mechanism as mechanism_module
from skfedriem.privacy.sampling import BatchSampler

from ..privacy.prv_reference import ReplaceOneSubsampledGaussian, SymmetrisedSubsampledGaussian, prv_epsilon

N_RECORDS, DELTA = 40, 1e-5
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # inside prv-accountant
GENERIC_REASONS = {*_REFUSALS.values(), _FAILED}


@pytest.fixture(autouse=True)
def task_identity():
    saved = TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


# ---------------------------------------------------------------- what ran
@dataclass
class Step:
    n_records: int
    rate: float
    drawn: int
    sampling: str
    clip: float = math.inf
    denominator: float | None = None
    noise_std: float = 0.0

    @property
    def mu(self) -> float:
        """The step's actual per-step GDP parameter: sensitivity 2C / denominator over the noise std."""
        if self.noise_std <= 0 or math.isinf(self.clip):
            return math.inf
        return 2 * self.clip / (self.denominator * self.noise_std)

    @property
    def sample_rate(self) -> float:
        """The subsampling rate the draw really had."""
        return self.drawn / self.n_records if self.sampling == "fixed" else self.rate


@dataclass
class Instruments:
    steps: list[Step] = field(default_factory=list)

    @contextmanager
    def installed(self):
        sample, clip_factors, noisy_mean = BatchSampler.sample, mechanism_module.clip_factors, \
            mechanism_module.noisy_mean

        def watched_sample(sampler, randomness):
            idx = sample(sampler, randomness)
            self.steps.append(Step(sampler.n_records, sampler.sample_rate, len(idx), sampler.sampling))
            return idx

        def watched_clip(norms, clip):
            self.steps[-1].clip = clip
            return clip_factors(norms, clip)

        def watched_noise(sums, params, *, denominator, noise_std, randomness):
            self.steps[-1].denominator, self.steps[-1].noise_std = denominator, noise_std
            return noisy_mean(sums, params, denominator=denominator, noise_std=noise_std, randomness=randomness)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(BatchSampler, "sample", watched_sample)
            patch.setattr(mechanism_module, "clip_factors", watched_clip)
            patch.setattr(mechanism_module, "noisy_mean", watched_noise)
            yield self


def independent_epsilon(steps: list[Step]) -> float:
    """A lower bound on the ε of the steps that ran (prv-accountant, at the weakest step's μ and rate)."""
    mu, rate = min(s.mu for s in steps), min(s.sample_rate for s in steps)
    if math.isinf(mu):
        return math.inf
    if mu > 3:  # beyond prv-accountant's comfortable domain: the step-by-step dominance still applies
        return 0.0
    prv = (SymmetrisedSubsampledGaussian(rate, mu) if steps[0].sampling == "fixed"
           else ReplaceOneSubsampledGaussian(rate, mu))
    low, _, _ = prv_epsilon(prv, len(steps), DELTA, eps_error=1e-2)
    return low


# ---------------------------------------------------------------- the server's moves
WILD = {
    "batch_size": [0, -3, N_RECORDS + 1, 10**9, 1.999, 2.5, math.nan],
    "local_steps": [0, -1, 2.5, 10**7],
    "clip": [1e-300, 1e300, 0.0, -1.0, math.inf, math.nan],
    "noise_std": [0.0, 1e-300, 1e300, math.inf, math.nan],
    "sampling": ["shuffled"],
    "aggregation": ["mean"],
    "lr": [math.nan, -1.0],
}


@st.composite
def instructions(draw) -> dict:
    """A plausible round (its noise multiplier B σ / 2C on both sides of the site's ceiling), some wild fields."""
    batch = draw(st.one_of(st.integers(1, N_RECORDS), st.floats(1.0, N_RECORDS).filter(lambda b: b != int(b))))
    clip = draw(st.floats(0.05, 20.0))
    multiplier = draw(st.floats(0.05, 20.0))
    settings = {"batch_size": batch, "local_steps": draw(st.integers(1, 3)), "clip": clip,
                "noise_std": 2 * clip * multiplier / batch, "sampling": draw(st.sampled_from(["fixed", "poisson"])),
                "aggregation": draw(st.sampled_from(["projavg", "rlavg"])), "lr": draw(st.sampled_from([0.1, 1e-3]))}
    wild = draw(st.sampled_from([[], [], [], *([name] for name in sorted(WILD)), ["batch_size", "noise_std"]]))
    for name in wild:
        settings[name] = draw(st.sampled_from(WILD[name]))
    return settings


@st.composite
def moves(draw) -> tuple:
    """Mostly rounds; sometimes a replay of the last accepted request, a restart of the site, a new run."""
    kind = draw(st.sampled_from(["round"] * 5 + ["replay", "restart", "new run"]))
    if kind != "round":
        return (kind,)
    return kind, draw(instructions()), draw(st.sampled_from(["on"] * 9 + ["off", "nan", "misshapen"]))


scripts = st.lists(moves(), min_size=1, max_size=6)


def iterate(kind: str) -> dict[str, torch.Tensor]:
    theta = {"weight": PCAProjector(6, 2, "grassmann", generator=torch.Generator().manual_seed(1)).weight.detach()}
    if kind == "off":
        theta["weight"] = 0.9 * theta["weight"]
    elif kind == "nan":
        theta["weight"] = theta["weight"].clone()
        theta["weight"][0, 0] = math.nan
    elif kind == "misshapen":
        theta["weight"] = torch.zeros(5, 5, dtype=torch.float64)
    return theta


def message(theta, settings: dict) -> Message:
    content = RecordDict({"theta": encode_arrays(theta),
                          "instructions": encode_instructions(RoundInstructions(**settings))})
    return Message(content, dst_node_id=1, message_type="train", group_id="1")


# ---------------------------------------------------------------- the site and the referee
RECORDS = torch.from_numpy(np.random.default_rng(0).normal(size=(N_RECORDS, 6)) / 3)


def site(ledger: str):
    """A fresh site process: its model and app are new, its ledger file is what it had."""
    client = ClientSetup("site", (RECORDS,), ClientRecipe(PCAProjector(6, 2, "grassmann"), identity_loss),
                         guard=SiteGuard(ledger, max_epsilon=30.0))
    return make_client_app(lambda context: client)


def charges(ledger: str) -> list[dict]:
    return PrivacyBudget(math.inf, path=ledger).fits


def play(script, ledger: str) -> None:
    """Run ``script`` against a site; AssertionError at the first move that breaks the site's promise."""
    app, run, ctx = site(ledger), 1, None
    last, answers = None, {}
    with Instruments().installed() as instruments:
        for move in script:
            if move[0] == "restart":
                app, ctx = site(ledger), None
                continue
            if move[0] == "new run":
                run, ctx = run + 1, None
                continue
            if move[0] == "replay":
                if last is None:
                    continue
                msg, key = message(*last), last
            else:
                _, settings, kind = move
                msg, key = message(iterate(kind), settings), (iterate(kind), settings)
            if ctx is None:
                TaskIdentity.run_id = run
                ctx = Context(run_id=run, node_id=1, node_config={}, state=RecordDict(), run_config={})
            before, ran_before = charges(ledger), len(instruments.steps)
            reply = app(msg, ctx)
            new_charges, ran = charges(ledger)[len(before):], instruments.steps[ran_before:]
            if reply.has_error():
                assert not reply.has_content() and reply.error.reason in GENERIC_REASONS, reply.error.reason
                assert not new_charges and not ran, "a refused round charged or ran something"
                continue
            last = key
            submission = decode_arrays(reply.content["submission"])["weight"]
            request = (repr(key[1]), key[0]["weight"].numpy().tobytes())
            if not ran:  # answered from the site's cache: the same reply to the same request, charged once
                assert not new_charges and request in answers and torch.equal(answers[request], submission)
                continue
            answers[request] = submission
            assert len(new_charges) == 1, "an accepted round is charged exactly once"
            charged = PrivacyAccountant.from_state_dict({"history": new_charges[0]["steps"]})
            (entry,) = charged.history
            assert entry.steps >= len(ran) and {s.sampling for s in ran} == {entry.sampling}
            for step in ran:
                assert entry.mu0 >= step.mu * (1 - 1e-12), f"charged mu0 {entry.mu0} < ran {step.mu}"
                assert entry.sample_rate >= step.sample_rate * (1 - 1e-12), \
                    f"charged q {entry.sample_rate} < ran {step.sample_rate}"
            assert new_charges[0]["epsilon"] >= independent_epsilon(ran), "charged epsilon below what ran"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=scripts)
def test_every_accepted_round_is_charged_at_least_what_it_ran(script, tmp_path_factory):
    play(script, str(tmp_path_factory.mktemp("site") / "ledger.json"))


def test_the_property_catches_the_pre_fix_site(tmp_path_factory):
    """Finding 2: a site that charges the server's B = 1.999 and runs batches of 1 is found out."""

    def undercharged(script) -> bool:
        try:
            play(script, str(tmp_path_factory.mktemp("broken") / "ledger.json"))
        except AssertionError as failure:
            return str(failure).startswith("charged")  # it ran more than it charged
        return False

    with site_charges_the_servers_numbers():
        found = find(scripts, undercharged,
                     settings=settings(max_examples=300, deadline=None, database=None, phases=[Phase.generate]))
    rounds = [move[1] for move in found if move[0] == "round"]
    assert any(isinstance(r["batch_size"], float) for r in rounds)  # the fractional batch size is what it found
