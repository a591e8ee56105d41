"""A malicious server plays against a deployed site's ClientApp: what the site runs is never more than it charges.

Hypothesis writes the server's side: arbitrary instructions (fractional and
huge B and τ, tiny and huge clip and σ, unknown samplings and rules), good,
bad and saturating iterates, replays of earlier requests, new runs and
restarts of the site process, against three sites (a Grassmann PCA model, the
one-shot second moment, a float32 linear classifier). The sites are the real
ClientApp with its SiteGuard. The referee measures what each local step
released from the tensors themselves, not from the arguments the mechanism
was called with:

* the sampling rate, from the client's own draws (the batch size drawn; under
  Poisson sampling, the largest uniform that let a record in);
* each record's clipped contribution, by summing the step's per-record
  gradients one record at a time with the weights the step used (its norm and
  the largest distance between two of them bound the step's sensitivity from
  below);
* the denominator and the noise actually added, by fitting the release as
  a · P_θ(clipped sum) + b · P_θ(ξ) with the standard normals ξ the client drew.

After every message it re-accounts those steps independently (prv-accountant on
the closed-form privacy-loss variables of ``tests/privacy/prv_reference.py``)
and asserts that an accepted round's charge dominates them step by step and
in ε, that a repeated request got the same reply and no charge, and that a
refused round charged nothing, ran nothing and sent back nothing but the kind
of refusal. The last tests show the referee catching broken sites.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

pytest.importorskip("flwr")

from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from skfedriem.audit.mutations import (noise_scaled, site_charges_the_servers_numbers, site_drops_invalid_records,
                                       site_ignores_the_planned_size)
from skfedriem.decomposition import identity_loss
from skfedriem.federated.client import ClientRecipe
from skfedriem.federated.instructions import RoundInstructions
from skfedriem.flower import ClientSetup, SiteGuard, make_client_app
from skfedriem.flower.protocol.client_app import _FAILED, _REFUSALS
from skfedriem.flower.protocol.messages import decode_arrays, encode_arrays, encode_instructions
from skfedriem.models import PCAProjector, SecondMoment
from skfedriem.models.pca import _PCAGradients
from skfedriem.models.second_moment import _OuterProducts
from skfedriem.privacy import PrivacyAccountant, PrivacyBudget
from skfedriem.privacy.mechanisms import mechanism as mechanism_module
from skfedriem.privacy.per_record.gradients import DenseGradients, record_norms
from skfedriem.privacy.mechanisms.randomness import SeededRandomness
from skfedriem.privacy.mechanisms.sampling import BatchSampler, PoissonSampler

from ..privacy.prv_reference import ReplaceOneSubsampledGaussian, SymmetrisedSubsampledGaussian, prv_epsilon

N_RECORDS, DELTA = 40, 1e-5
GENERIC_REASONS = {*_REFUSALS.values(), _FAILED}
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # inside prv-accountant


@pytest.fixture(autouse=True)
def task_identity():
    saved = TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


# ---------------------------------------------------------------- what ran, measured
@dataclass
class Step:
    n_records: int
    sampling: str
    drawn: int = 0
    included: list[float] = field(default_factory=list)  # Poisson: the uniforms that let a record in
    contributions: list[torch.Tensor] = field(default_factory=list)
    normals: list[torch.Tensor] = field(default_factory=list)
    denominator: float = math.nan
    noise_gain: float = 0.0
    count_gain: float | None = None  # the std of the noise the step's count really got (None: no count released)
    rtol: float = 1e-6  # how precisely the fit of the release measures it (its dtype's resolution)

    @property
    def sample_rate(self) -> float:
        """A lower bound on the rate the draw really had."""
        if self.sampling == "fixed":
            return self.drawn / self.n_records
        return max(self.included, default=0.0)

    diameter: float = 2.0  # the referee's own knowledge of the model (SITES), not the site's claim

    @property
    def sensitivity(self) -> float:
        """How far one replaced record can move the step's clipped sum, from the largest contribution seen.

        A record whose clipped gradient reached norm r can be replaced by one at distance ``diameter`` · r
        (with fixed-size batches; under Poisson sampling the accountant's ±r model, factor 2): for the PCA
        model the record Px − (I − P)x has the opposite gradient, for the second moment an orthogonal record
        of the same norm is √2 r away (tests/models/test_second_moment.py), for the linear model a flipped label.
        """
        radius = max((float(record_norms(v.unsqueeze(0))[0]) for v in self.contributions), default=0.0)
        return (self.diameter if self.sampling == "fixed" else 2.0) * radius

    @property
    def mu(self) -> float:
        """A lower bound on the step's actual GDP parameter: sensitivity / (denominator · noise), and with a count
        (whose sensitivity is 1) √(μ_g² + 1/σ_b²) at the count noise σ_b measured."""
        if math.isinf(self.denominator) or self.sensitivity == 0:
            mu_g = 0.0  # the release resolves no signal of the records
        elif self.noise_gain <= 0:
            return math.inf
        else:
            mu_g = self.sensitivity / (self.denominator * self.noise_gain)
        if self.count_gain is None:
            return mu_g
        return math.inf if self.count_gain <= 0 else math.hypot(mu_g, 1 / self.count_gain)


@dataclass
class Instruments:
    steps: list[Step] = field(default_factory=list)

    @contextmanager
    def installed(self):
        sample, uniform, normal = BatchSampler.sample, SeededRandomness.uniform, SeededRandomness.standard_normal
        noisy_release, noisy_count = mechanism_module.noisy_release, mechanism_module.noisy_clipped_count
        sums = {cls: cls.weighted_sum for cls in (DenseGradients, _PCAGradients, _OuterProducts)}
        drawn: dict = {}

        def watched_uniform(randomness, size):
            drawn["uniform"] = uniform(randomness, size)
            return drawn["uniform"]

        def watched_sample(sampler, randomness):
            drawn.clear()
            idx = sample(sampler, randomness)
            step = Step(sampler.n_records, sampler.sampling, drawn=len(idx))
            if sampler.sampling == "poisson":
                step.included = drawn["uniform"][idx].tolist()
            self.steps.append(step)
            return idx

        def watched_sum(cls):
            def weighted_sum(grads, weights):
                for z in torch.nonzero(weights).flatten().tolist():  # each record's clipped contribution on its own
                    alone = torch.zeros_like(weights)
                    alone[z] = weights[z]
                    parts = sums[cls](grads, alone)
                    self.steps[-1].contributions.append(
                        torch.cat([parts[k].double().reshape(-1) for k in sorted(parts)]))
                return sums[cls](grads, weights)
            return weighted_sum

        def watched_normal(randomness, shape, dtype):
            value = normal(randomness, shape, dtype)
            self.steps[-1].normals.append(value)
            return value

        def watched_noisy_release(copies, sums, *, denominator, noise_std, randomness):
            first = len(self.steps[-1].normals)
            released = noisy_release(copies, sums, denominator=denominator, noise_std=noise_std,
                                     randomness=randomness)
            points = copies.points()  # a deployed site is a lone client: client axis 0 of 1
            normals = self.steps[-1].normals[first:] or [torch.zeros_like(p[0]) for p in points.values()]
            signal, noise, out = [], [], []
            for (name, value), xi in zip(sums.items(), normals):
                project = copies.manifolds[name].proju
                point = points[name][0].double()
                signal.append(project(point, value[0].double()).reshape(-1))
                noise.append(project(point, xi.double()).reshape(-1))
                out.append(released[name][0].double().reshape(-1))
            design, observed = torch.stack([torch.cat(signal), torch.cat(noise)], dim=1), torch.cat(out)
            fit = torch.linalg.lstsq(design, observed.unsqueeze(1)).solution[:, 0]
            step = self.steps[-1]
            step.noise_gain = abs(float(fit[1]))
            step.rtol = max(1e-6, 1e3 * torch.finfo(next(iter(released.values())).dtype).eps)
            resolution = 1e3 * torch.finfo(next(iter(released.values())).dtype).eps * float(observed.norm())
            if float(fit[0]) * float(design[:, 0].norm()) > resolution:
                step.denominator = 1 / float(fit[0])
            else:  # the clipped mean is below what the release resolves: it carries no signal to fit
                step.denominator = math.inf
            return released

        def watched_count(norms, clip, count_noise_std, randomness):
            first = len(self.steps[-1].normals)
            value = noisy_count(norms, clip, count_noise_std, randomness)
            (xi,) = self.steps[-1].normals[first:] or [torch.zeros(1)]
            signal = float(((torch.isfinite(norms) & (norms <= clip)).double() - 0.5).sum())
            xi = float(xi.reshape(-1)[0])
            self.steps[-1].count_gain = 0.0 if xi == 0 else abs((value - signal) / xi)
            return value

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(mechanism_module, "noisy_clipped_count", watched_count)
            patch.setattr(BatchSampler, "sample", watched_sample)
            patch.setattr(SeededRandomness, "uniform", watched_uniform)
            patch.setattr(SeededRandomness, "standard_normal", watched_normal)
            patch.setattr(mechanism_module, "noisy_release", watched_noisy_release)
            for cls in sums:
                patch.setattr(cls, "weighted_sum", watched_sum(cls))
            yield self


def independent_epsilon(steps: list[Step]) -> float:
    """A lower bound on the ε of the steps that ran (prv-accountant, at the weakest step, μ capped at 3).

    ε grows with μ, so ε at min(μ, 3) is still a lower bound where μ is beyond prv-accountant's comfortable domain.
    """
    mu, rate = min(s.mu for s in steps), min(s.sample_rate for s in steps)
    if math.isinf(mu):
        return math.inf
    if mu <= 0 or rate <= 0:
        return 0.0
    mu = min(mu, 3.0)
    prv = (SymmetrisedSubsampledGaussian(rate, mu) if steps[0].sampling == "fixed"
           else ReplaceOneSubsampledGaussian(rate, mu))
    low, _, _ = prv_epsilon(prv, len(steps), DELTA, eps_error=1e-2)
    return low


# ---------------------------------------------------------------- the sites
def _pca_records():
    return (torch.from_numpy(np.random.default_rng(0).normal(size=(N_RECORDS, 6)) / 3),)


def _linear_records():
    rng = np.random.default_rng(1)
    return torch.from_numpy(rng.normal(size=(N_RECORDS, 6)).astype(np.float32)), torch.arange(N_RECORDS) % 2


def _cross_entropy(logits, target):
    return F.cross_entropy(logits, target, reduction="none")


SITES = {  # model factory, loss, records, the diameter of its clipped gradients in units of their radius
    "pca": (lambda: PCAProjector(6, 2, "grassmann"), identity_loss, _pca_records, 2.0),
    "moment": (lambda: SecondMoment(6), identity_loss, _pca_records, math.sqrt(2)),
    "linear": (lambda: torch.nn.Linear(6, 2), _cross_entropy, _linear_records, 2.0),
}


def site(kind: str, ledger: str, seed: int | None = None):
    """A fresh site process: its model and app are new, its ledger file is what it had.

    ``seed`` makes its batches and noise reproducible (a search for a counterexample replays what it found).
    """
    model, loss, records, _ = SITES[kind]
    client = ClientSetup("site", records(), ClientRecipe(model(), loss), guard=SiteGuard(ledger, max_epsilon=500.0),
                         seed=None if seed is None else np.random.SeedSequence(seed))
    return make_client_app(lambda context: client)


def iterate(site_kind: str, kind: str) -> dict[str, torch.Tensor]:
    if site_kind == "pca":
        theta = {"weight": PCAProjector(6, 2, "grassmann", generator=torch.Generator().manual_seed(1)).weight.detach()}
    elif site_kind == "moment":
        theta = {"weight": torch.zeros(6, 6, dtype=torch.float64)}
    else:
        theta = {"weight": 0.1 * torch.ones(2, 6), "bias": torch.zeros(2)}
        if kind == "saturated":  # p = e^-60: every label-0 gradient is ~1e-26, below float32's √(smallest normal)
            theta["bias"] = torch.tensor([60.0, 0.0])
    if kind == "off" and site_kind == "pca":
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


# ---------------------------------------------------------------- the server's moves
WILD = {
    "batch_size": [0, -3, N_RECORDS + 1, 10**9, 1.999, 2.5, math.nan],
    "local_steps": [0, -1, 2.5, 10**7],
    "clip": [1e-300, 1e-30, 1e300, 0.0, -1.0, math.inf, math.nan, 10**400],
    "noise_std": [0.0, 1e-300, 5e-324, 1e300, math.inf, math.nan],
    "sampling": ["shuffled"],
    "aggregation": ["mean"],
    "lr": [math.nan, -1.0, 1e26],
    "count_noise_std": [1e-300, 1e300, math.nan, -1.0, math.inf],
}


@st.composite
def instructions(draw) -> dict:
    """A plausible round (its noise multiplier B σ / 2C on both sides of the site's ceiling), some wild fields."""
    whole = st.integers(1, N_RECORDS)
    batch = draw(st.one_of(whole, whole, whole, st.floats(1.0, N_RECORDS).filter(lambda b: b != int(b))))
    clip = draw(st.floats(0.05, 20.0))
    multiplier = draw(st.floats(0.05, 20.0))
    settings = {"batch_size": batch, "local_steps": draw(st.integers(1, 3)), "clip": clip,
                "noise_std": 2 * clip * multiplier / batch, "sampling": draw(st.sampled_from(["fixed", "poisson"])),
                "aggregation": draw(st.sampled_from(["projavg", "rlavg"])), "lr": draw(st.sampled_from([0.1, 1e-3])),
                "count_noise_std": draw(st.sampled_from([0.0, 0.0, 0.0, 0.5, 2.0]))}
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
    theta = draw(st.sampled_from(["on"] * 8 + ["saturated", "off", "nan", "misshapen"]))
    return kind, draw(instructions()), theta


scripts = st.tuples(st.sampled_from(["pca", "linear", "moment"]), st.lists(moves(), min_size=1, max_size=6))


# ---------------------------------------------------------------- the referee
def charges(ledger: str) -> list[dict]:
    return PrivacyBudget(math.inf, path=ledger).fits


def play(script, ledger: str, seed: int | None = None) -> None:
    """Run ``script`` against a site; AssertionError at the first move that breaks the site's promise."""
    kind, moves_ = script
    app, run, ctx = site(kind, ledger, seed), 1, None
    last, answers = None, {}
    with Instruments().installed() as instruments:
        for move in moves_:
            if move[0] == "restart":
                app, ctx = site(kind, ledger, seed), None
                continue
            if move[0] == "new run":
                run, ctx = run + 1, None
                continue
            if move[0] == "replay":
                if last is None:
                    continue
                theta, settings = last
            else:
                theta, settings = iterate(kind, move[2]), move[1]
            if ctx is None:
                TaskIdentity.run_id = run
                ctx = Context(run_id=run, node_id=1, node_config={}, state=RecordDict(), run_config={})
            before, ran_before = charges(ledger), len(instruments.steps)
            reply = app(message(theta, settings), ctx)
            new_charges, ran = charges(ledger)[len(before):], instruments.steps[ran_before:]
            for step in ran:
                step.diameter = SITES[kind][3]
            if reply.has_error():
                assert not reply.has_content() and reply.error.reason in GENERIC_REASONS, reply.error.reason
                assert not new_charges and not ran, "a refused round charged or ran something"
                continue
            last = theta, settings
            submission = decode_arrays(reply.content["submission"])
            request = (repr(settings), b"".join(v.numpy().tobytes() for _, v in sorted(theta.items())))
            if not ran:  # answered from the site's cache: the same reply to the same request, charged once
                assert not new_charges and request in answers
                assert all(answers[request][k].numpy().tobytes() == submission[k].numpy().tobytes() for k in submission)
                continue
            answers[request] = submission
            assert len(new_charges) == 1, "an accepted round is charged exactly once"
            (entry,) = PrivacyAccountant.from_state_dict({"history": new_charges[0]["steps"]}).history
            assert entry.steps >= len(ran) and {s.sampling for s in ran} == {entry.sampling}
            for step in ran:
                assert entry.mu0 >= step.mu * (1 - step.rtol), f"charged mu0 {entry.mu0} < ran {step.mu}"
                assert entry.sample_rate >= step.sample_rate * (1 - 1e-12), \
                    f"charged q {entry.sample_rate} < ran {step.sample_rate}"
            assert new_charges[0]["epsilon"] >= independent_epsilon(ran), "charged epsilon below what ran"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=scripts)
def test_every_accepted_round_is_charged_at_least_what_it_ran(script, tmp_path_factory):
    play(script, str(tmp_path_factory.mktemp("site") / "ledger.json"))


# ---------------------------------------------------------------- the referee catches broken sites
PLAUSIBLE = [("round", {"batch_size": 10, "local_steps": 2, "clip": 1.0, "noise_std": 0.5, "sampling": sampling,
                        "aggregation": "rlavg", "lr": 0.1}, "on") for sampling in ("fixed", "poisson")]


def caught(script, tmp_path_factory) -> str | None:
    """The referee's objection to ``script`` against a seeded site (the same verdict every time), or None."""
    try:
        play(script, str(tmp_path_factory.mktemp("broken") / "ledger.json"), seed=0)
    except AssertionError as failure:
        return str(failure)
    return None


def test_the_property_catches_the_pre_fix_site(tmp_path_factory):
    """A site that charges the server's B = 1.999 and runs batches of 1 is found out."""
    with site_charges_the_servers_numbers():
        found = find(scripts, lambda s: (caught(s, tmp_path_factory) or "").startswith("charged"),
                     settings=settings(max_examples=300, deadline=None, database=None, phases=[Phase.generate],
                                     derandomize=True))  # a search that finds it on every run
    rounds = [move[1] for move in found[1] if move[0] == "round"]
    assert any(isinstance(r["batch_size"], float) for r in rounds)  # the fractional batch size is what it found


def test_the_referee_objects_to_the_pre_fix_site_on_the_reviewers_round(tmp_path_factory):
    """The round of finding 2 (B = 1.999, every record at the clip): charged μ0 = 2C/(1.999σ), ran 2C/σ."""
    fractional = [("round", {**PLAUSIBLE[0][1], "batch_size": 1.999, "clip": 0.01, "noise_std": 0.02}, "on")]
    with site_charges_the_servers_numbers():
        assert caught(("pca", fractional), tmp_path_factory).startswith("charged mu0")
    assert caught(("pca", fractional), tmp_path_factory) is None  # today's site refuses the round


@pytest.mark.parametrize("kind", sorted(SITES))
def test_the_referee_measures_the_noise_the_site_really_added(kind, tmp_path_factory):
    assert caught((kind, PLAUSIBLE), tmp_path_factory) is None
    with noise_scaled(0.5):  # the site adds half the noise it charges
        assert caught((kind, PLAUSIBLE), tmp_path_factory).startswith("charged mu0")


def test_the_referee_measures_the_clipping_the_site_really_applied(tmp_path_factory, monkeypatch):
    tight = [("round", {**PLAUSIBLE[0][1], "clip": 0.01, "noise_std": 0.005}, "on")]  # every record reaches C
    assert caught(("pca", tight), tmp_path_factory) is None
    monkeypatch.setattr(mechanism_module, "clip_factors", lambda norms, clip, margin=0.0, dtypes=(): torch.ones_like(norms))
    assert caught(("pca", tight), tmp_path_factory).startswith("charged mu0")


def test_the_referee_measures_the_rate_the_sampler_really_drew_at(tmp_path_factory, monkeypatch):
    def twice(sampler, randomness):  # includes records at 2q while the plan charges q
        return np.flatnonzero(randomness.uniform(sampler.n_records) < 2 * sampler.sample_rate)

    monkeypatch.setattr(PoissonSampler, "_sample", twice)
    assert caught(("pca", PLAUSIBLE[1:]), tmp_path_factory).startswith("charged q")


# ---------------------------------------------------------------- the deployed sites, as a node config builds them
def _spd_trials(n: int, rng) -> np.ndarray:
    A = rng.normal(size=(n, 3, 6))
    return A @ A.transpose(0, 2, 1) / 6 + 0.1 * np.eye(3)


def _with_bad_records(X: np.ndarray, kind: str) -> np.ndarray:
    """A NaN record, and one valid in float64 only (its smallest value below float32's smallest normal)."""
    X = X.copy()
    X[0] = np.nan
    X[1] = np.diag([1.0, 1.0, 1e-40]) if kind in ("spdnet", "tangent") else 1e-40
    return X


def write_site(kind: str, path, n: int, seed: int) -> None:
    """A site's data file of ``n`` records, two of them invalid under some run."""
    rng = np.random.default_rng(seed)
    if kind == "pca":
        np.save(path, _with_bad_records(rng.normal(size=(n, 5)) / 3, kind))
        return
    X = _spd_trials(n, rng) if kind in ("spdnet", "tangent") else rng.normal(size=(n, 3, 32))
    np.savez(path, X=_with_bad_records(X, kind), y=np.array(["a", "b", "rare"])[rng.integers(0, 3, size=n)])


DEPLOYED_RUNS = {  # run configurations a server may choose (all public); every one must leave the site's count alone
    "pca": [{"solver": "riemannian"}, {"solver": "riemannian", "manifold": "stiefel", "n-components": 1},
            {"solver": "covariance"}],
    "spdnet": [{"classes": "a,b", "dtype": "float32", "dims": "2"}, {"classes": "a,b,rare", "dtype": "float64"},
               {"classes": "b,c", "dtype": "float32", "dims": "3"}],
    "tangent": [{"classes": "a,b", "dtype": "float32"}, {"classes": "a,b,rare", "dtype": "float64",
                                                         "reference": "2 0 0 0 2 0 0 0 2"}],
    "eegnet": [{"classes": "a,b", "dtype": "float32", "F1": 2, "D": 1, "F2": 2, "kernel-length": 8},
               {"classes": "a,rare", "dtype": "float64", "F1": 2, "D": 1, "F2": 2, "kernel-length": 4}],
}
DEPLOYED_SIZES = (24, 30)


@st.composite
def deployed_moves(draw) -> tuple:
    kind = draw(st.sampled_from(["round"] * 5 + ["replay", "restart", "resize", "new run", "reconfigure", "query"]))
    if kind == "resize":
        return kind, draw(st.sampled_from(DEPLOYED_SIZES))
    if kind == "reconfigure":
        return kind, draw(st.integers(0, 2))
    if kind != "round":
        return (kind,)
    return kind, draw(instructions()), draw(st.sampled_from(["unstated", "first", "current"]))


deployed_scripts = st.tuples(st.sampled_from(sorted(DEPLOYED_RUNS)), st.integers(0, 2),
                             st.lists(deployed_moves(), min_size=1, max_size=5))


def deployed_theta(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in module.named_parameters() if p.requires_grad}


def play_deployed(script, folder) -> None:
    """Run ``script`` against a deployed site built by ``site_setup`` from its node config and data file."""
    from skfedriem.flower.deployment import apps
    from skfedriem.flower.deployment.apps import client_apps

    kind, run_index, moves_ = script
    data = folder / ("site.npy" if kind == "pca" else "site.npz")
    ledger = str(folder / "ledger.json")
    write_site(kind, data, DEPLOYED_SIZES[0], seed=0)
    size, first_size, run = DEPLOYED_SIZES[0], DEPLOYED_SIZES[0], 1
    runs = DEPLOYED_RUNS[kind]
    node = {"data-path": str(data), "ledger-path": ledger, "max-epsilon": 500.0}

    def fresh_context():
        TaskIdentity.run_id = run
        return Context(run_id=run, node_id=1, node_config=node, state=RecordDict(),
                       run_config=runs[run_index % len(runs)])

    apps._SITES.clear()
    ctx, last, answers = fresh_context(), None, {}
    with Instruments().installed() as instruments:
        for move in moves_:
            if move[0] in ("restart", "resize"):
                if move[0] == "resize":
                    size = move[1]
                    write_site(kind, data, size, seed=size)
                apps._SITES.clear()  # a new site process: it reads its file again
                ctx = fresh_context()
                continue
            if move[0] in ("new run", "reconfigure"):
                run += 1
                run_index = move[1] if move[0] == "reconfigure" else run_index
                ctx = fresh_context()
                continue
            if move[0] == "query":
                reply = client_apps[kind](Message(RecordDict(), dst_node_id=1, message_type="query"), ctx)
                if not reply.has_error():
                    assert reply.content["client"]["n_records"] == size, "the site's count is not its file's"
                continue
            try:
                module = apps.site_setup(kind, ctx).recipe.module
            except ValueError:
                module = None  # a run config this file cannot serve: every message is refused
            if move[0] == "replay":
                if last is None:
                    continue
                theta, settings = last
            else:
                theta = {} if module is None else deployed_theta(module)
                planned = {"unstated": 0, "first": first_size, "current": size}[move[2]]
                settings = {**move[1], "planned_records": planned}
            before, ran_before = charges(ledger), len(instruments.steps)
            reply = client_apps[kind](message(theta, settings), ctx)
            new_charges, ran = charges(ledger)[len(before):], instruments.steps[ran_before:]
            if reply.has_error():
                assert not reply.has_content() and reply.error.reason in GENERIC_REASONS, reply.error.reason
                assert not new_charges and not ran, "a refused round charged or ran something"
                continue
            last = theta, settings
            submission = decode_arrays(reply.content["submission"])
            request = (repr(settings), b"".join(v.numpy().tobytes() for _, v in sorted(theta.items())))
            if not ran:
                assert not new_charges and request in answers
                assert all(answers[request][k].numpy().tobytes() == submission[k].numpy().tobytes()
                           for k in submission)
                continue
            answers[request] = submission
            assert len(new_charges) == 1, "an accepted round is charged exactly once"
            assert all(step.n_records == size for step in ran), "the site ran on another number of records"
            if settings["planned_records"]:
                assert size == settings["planned_records"], "the site ran a round planned for another size"
            (entry,) = PrivacyAccountant.from_state_dict({"history": new_charges[0]["steps"]}).history
            diameter = math.sqrt(2) if module is not None and isinstance(module, SecondMoment) else 2.0
            for step in ran:
                step.diameter = diameter
                assert entry.mu0 >= step.mu * (1 - step.rtol), f"charged mu0 {entry.mu0} < ran {step.mu}"
                assert entry.sample_rate >= step.sample_rate * (1 - 1e-12), \
                    f"charged q {entry.sample_rate} < ran {step.sample_rate}"
            assert new_charges[0]["epsilon"] >= independent_epsilon(ran), "charged epsilon below what ran"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=deployed_scripts)
def test_a_deployed_site_is_charged_what_it_runs_whatever_the_run_config_and_its_file(script, tmp_path_factory):
    """The real sites (PCA, SPDNet, tangent, EEGNet from a node config and a data file) under run-config changes,
    files that change size between restarts, invalid records and count noise."""
    play_deployed(script, tmp_path_factory.mktemp("deployed"))


def test_the_deployed_referee_catches_a_count_that_depends_on_the_run(tmp_path_factory):
    """The pre-fix site dropped the records invalid in the run's dtype: its free count moved with the run config."""
    script = ("spdnet", 1, [("query",), ("reconfigure", 0), ("query",)])  # float64, then float32 (one more fails)
    play_deployed(script, tmp_path_factory.mktemp("honest"))
    with site_drops_invalid_records(), pytest.raises(AssertionError, match="count is not its file's"):
        play_deployed(script, tmp_path_factory.mktemp("broken"))


def test_the_deployed_referee_catches_a_site_that_runs_a_round_planned_for_another_size(tmp_path_factory):
    rounds = [("round", {**PLAUSIBLE[0][1], "count_noise_std": 0.0, "lr": lr}, "first") for lr in (0.1, 0.01)]
    script = ("pca", 0, [rounds[0], ("resize", DEPLOYED_SIZES[1]), rounds[1]])
    play_deployed(script, tmp_path_factory.mktemp("honest"))  # the resized site refuses the second round
    with site_ignores_the_planned_size(), pytest.raises(AssertionError, match="planned for another size"):
        play_deployed(script, tmp_path_factory.mktemp("broken"))


def test_the_referee_measures_the_count_noise_the_site_really_added(tmp_path_factory, monkeypatch):
    counted = [("round", {**PLAUSIBLE[0][1], "noise_std": 5.0, "count_noise_std": 0.5}, "on")]
    assert caught(("pca", counted), tmp_path_factory) is None
    honest = mechanism_module.noisy_clipped_count
    monkeypatch.setattr(mechanism_module, "noisy_clipped_count", lambda norms, clip, sigma, randomness: honest(
        norms, clip, sigma / 4, randomness))  # a site that adds a quarter of the count noise it charges
    assert caught(("pca", counted), tmp_path_factory).startswith("charged mu0")
