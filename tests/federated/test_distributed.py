"""Rounds of distributed noise (noise="distributed"): one step, encoded releases, their sum decoded at the server."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from skfedriem import FederatedTangentSpaceClassifier
from skfedriem.datasets import make_spd_classification
from skfedriem.exceptions import InvalidInstructionsError
from skfedriem.federated import FederatedTrainer, FederationSettings, LocalTransport
from skfedriem.federated.client import ClientState
from skfedriem.federated.instructions import ENCODED_RELEASE, EXCESS_NOISE, RoundInstructions
from skfedriem.flower.protocol.messages import encode_instructions
from skfedriem.privacy import PrivacyBudget
from skfedriem.privacy.accounting.skellam import discrete_epsilon

from ..privacy.models import StiefelNet, cross_entropy, make_data


def clients(n=4, m=40):
    X, y = make_data(n * m, seed=1)
    return [(X[i * m:(i + 1) * m], y[i * m:(i + 1) * m]) for i in range(n)]


def trainer(seed=0, **kw):
    settings = dict(n_rounds=4, batch_size=10, eps=5.0, clip=1.0, lr=0.5, noise="distributed")
    settings.update(kw)
    return FederatedTrainer(StiefelNet(seed=0), cross_entropy, FederationSettings(**settings),
                            seed_sequence=np.random.SeedSequence(seed), client_seed=np.random.SeedSequence([seed, 1]))


def test_a_distributed_run_certifies_both_guarantees_from_its_shares():
    t = trainer().fit(clients())
    plan, encoding = t.plan_, t.plan_.encoding
    assert plan.steps_per_round == 1 and plan.local_steps == (1, 1, 1, 1)
    assert (encoding.clients, encoding.colluders) == (4, 1)
    assert t.epsilon_ <= 5.0
    l2, l1 = encoding.sensitivity(1.0)
    # ε_local: each client's share alone, Sk(λ, λ), over its 4 steps at q = 10 / 40
    alone = discrete_epsilon([(("skellam", 2 * encoding.share, l2, l1, 0.25), 4)], 1e-5)
    assert t.fitted_attributes()["local_epsilon_"] == pytest.approx(alone)
    assert t.epsilon_ < alone
    assert [h["epsilon"] for h in t.history_] == sorted(h["epsilon"] for h in t.history_)
    assert all("local_epsilon" in h and "discarded" not in h for h in t.history_)
    assert t.accountant_.discrete and t.local_accountant_.discrete


def test_the_model_moves_and_stays_on_its_manifold():
    t = trainer(n_rounds=6)
    before = {n: p.detach().clone() for n, p in t.module.named_parameters()}
    t.fit(clients())
    weight = t.module.W
    assert not torch.equal(weight.detach(), before["W"])
    torch.testing.assert_close(weight.T @ weight, torch.eye(weight.shape[1], dtype=weight.dtype), atol=1e-6, rtol=0)


@pytest.mark.parametrize("sampling", ["fixed", "poisson"])
def test_lockstep_and_one_by_one_release_the_same(sampling):
    """Clients in a stack draw their rounding and shares as alone (Poisson stacks leave their padding out)."""
    a = trainer(lockstep=True, sampling=sampling).fit(clients())
    b = trainer(lockstep=False, sampling=sampling).fit(clients())
    for (name, p), q in zip(a.module.named_parameters(), b.module.parameters()):
        torch.testing.assert_close(p, q, atol=1e-9, rtol=0)


def test_worker_processes_release_the_same():
    a = trainer().fit(clients())
    b = trainer(n_jobs=2).fit(clients())
    for p, q in zip(a.module.parameters(), b.module.parameters()):
        torch.testing.assert_close(p, q, atol=1e-9, rtol=0)


@pytest.mark.parametrize("options", [{"sampling": "poisson"}, {"clients_per_round": 2}, {"batch_size": None},
                                     {"optimizer": "adam", "lr": 0.05}])
def test_distributed_noise_runs_with(options):
    t = trainer(**options).fit(clients())
    assert t.epsilon_ <= 5.0 and math.isfinite(t.fitted_attributes()["local_epsilon_"])


def test_the_server_sees_only_the_sum():
    t = FederatedTrainer(StiefelNet(seed=0), cross_entropy,
                         FederationSettings(n_rounds=2, batch_size=10, eps=5.0, noise="distributed"),
                         seed_sequence=np.random.SeedSequence(0), record_transcript=True).fit(clients())
    assert all(set(row) == {"theta", "clients", "sum"} for row in t.transcript_)


class _Dropping(LocalTransport):
    """A transport whose clients after the first ``answering`` never answer."""

    def __init__(self, *args, answering):
        super().__init__(*args)
        self.answering = answering

    def run_round(self, t, selected, theta, instructions):
        replies = super().run_round(t, selected, theta, instructions)
        return {i: replies[i] for i in sorted(replies)[:self.answering]}


def _served(answering):
    t = trainer()
    data = clients()
    states = [ClientState.fresh(s) for s in np.random.SeedSequence(3).spawn(4)]
    transport = _Dropping(t.client_recipe(simulated=True), data, states, answering=answering)
    before = {n: p.detach().clone() for n, p in t.module.named_parameters()}
    t.serve(transport, [40] * 4, list(range(4)), np.random.SeedSequence(0))
    return t, before


class _Kept(_Dropping):
    """A dropping transport that keeps the replies it delivers."""

    def __init__(self, *args, answering):
        super().__init__(*args, answering=answering)
        self.delivered = []

    def run_round(self, t, selected, theta, instructions):
        replies = super().run_round(t, selected, theta, instructions)
        self.delivered.append(replies)
        return replies


def _served_with_allowance(answering, dropouts=2, record_transcript=False):
    """K = 7 clients, t = 1, d = ``dropouts``; the first ``answering`` answer every round."""
    data = clients(7, 30)
    t = FederatedTrainer(StiefelNet(seed=0), cross_entropy,
                         FederationSettings(n_rounds=3, batch_size=10, eps=5.0, clip=1.0, lr=0.5, noise="distributed",
                                            colluders=1, dropouts=dropouts),
                         seed_sequence=np.random.SeedSequence(0), client_seed=np.random.SeedSequence([0, 1]),
                         record_transcript=record_transcript)
    states = [ClientState.fresh(s) for s in np.random.SeedSequence(3).spawn(7)]
    transport = _Kept(t.client_recipe(simulated=True), data, states, answering=answering)
    t.serve(transport, [30] * 7, list(range(7)), np.random.SeedSequence(0))
    t.delivered = transport.delivered
    return t


def test_with_a_dropout_allowance_rounds_missing_t_plus_d_clients_apply_at_the_planned_epsilon():
    """K = 7, t = 1, d = 2: rounds that 2 (or 3 = t + d) clients miss apply, charged exactly as the plan certified
    (the same ε as rounds every client answers: the noise is kept whole, not re-certified); 4 missing are
    discarded and still charged; without the allowance 2 missing are discarded."""
    full = _served_with_allowance(7)
    assert full.plan_.encoding.dropouts == 2 and full.epsilon_ <= 5.0
    for answering in (5, 4):
        t = _served_with_allowance(answering)
        assert not any("discarded" in h for h in t.history_)
        assert t.epsilon_ == full.epsilon_ and t.local_epsilon_ == full.local_epsilon_
    short = _served_with_allowance(3)
    assert all("fewer than the K − t − d = 4" in h["discarded"] for h in short.history_)
    assert short.accountant_.steps == 3
    without = _served_with_allowance(5, dropouts=0)
    assert all("fewer than the K − t − d = 6" in h["discarded"] for h in without.history_)


def test_the_server_learns_the_sum_less_the_excess_over_the_rounds_level():
    """What the transcript keeps of a round that 2 of 7 missed is the five answering releases' sum less their excess
    above level 2 (none), and of a full round the sum less all their excess: each client's components travel
    apart from its release and only the round's level decides what is taken out."""
    from skfedriem.privacy.mechanisms.discrete import sum_releases

    full = _served_with_allowance(7, record_transcript=True)
    missing = _served_with_allowance(5, record_transcript=True)
    encoding = full.plan_.encoding
    for run, answering in ((missing, 5), (full, 7)):
        for row, replies in zip(run.transcript_, run.delivered, strict=True):
            assert sorted(replies) == list(range(answering))
            releases = [replies[i][0][ENCODED_RELEASE].numpy() for i in range(answering)]
            assert all(replies[i][0][EXCESS_NOISE].shape == (2, encoding.length) for i in range(answering))
            removed = sum(replies[i][0][EXCESS_NOISE].numpy().sum(0) for i in range(answering)) if answering == 7 \
                else 0
            assert np.array_equal(row["sum"].numpy(), np.mod(sum_releases(releases, encoding) - removed,
                                                              encoding.modulus))


def test_a_round_short_of_honest_shares_is_charged_and_discarded():
    t, before = _served(answering=2)  # K − t = 3 shares needed
    assert all("fewer than the K − t − d = 3" in h["discarded"] for h in t.history_)
    for name, p in t.module.named_parameters():
        assert torch.equal(p.detach(), before[name])
    assert t.accountant_.steps == 4  # every round was charged


def test_a_round_with_k_minus_t_shares_is_applied():
    t, before = _served(answering=3)
    assert not any("discarded" in h for h in t.history_)


@pytest.mark.parametrize("options, message", [
    ({"local_steps": 2}, "local_steps=2: a round of distributed noise is one step"),
    ({"colluders": 4}, "colluders"), ({"local_epochs": 2.0}, "local_epochs=2.0"),
    ({"aggregation": "rlavg"}, "aggregation='rlavg'"), ({"aggregation": "retavg"}, "aggregation='retavg'"),
    ({"client_timings": True}, "client_timings=True"),
    ({"accounting": "prirfed", "sampling": "poisson"}, "does not account distributed noise"),
    ({"noise": "local", "colluders": 2}, "colluders=2 sizes the noise shares"),
    ({"noise": "local", "dropouts": 1}, "dropouts=1 keeps the noise shares"),
    ({"colluders": 1, "dropouts": 3}, "'dropouts' parameter must leave at least one honest answer"),
])
def test_what_distributed_noise_refuses(options, message):
    """Each setting the run would not honour is refused by name (rlavg, local_epochs=2, timings and colluders with
    local noise all ran without a word before)."""
    data = clients()
    if "privacy_unit" in options:
        data = [(X, y, torch.arange(len(y)) // 2) for X, y in data]
    with pytest.raises(ValueError, match=message):
        trainer(**options).fit(data)


@pytest.mark.parametrize("options, message", [
    ({"aggregation": "rlavg"}, "aggregation='rlavg'"), ({"local_epochs": 3.0}, "local_epochs=3.0"),
    ({"noise": "local", "colluders": 1}, "colluders=1"),
])
def test_an_estimator_refuses_what_its_noise_cannot_honour_before_any_release(options, message, monkeypatch):
    """Named before the reference point is released (the release would be charged for a run that cannot start)."""
    from skfedriem import FederatedTangentSpaceClassifier
    from skfedriem.classification import _reference
    from skfedriem.datasets import make_spd_classification

    def released(*args, **kwargs):
        raise AssertionError("the reference point was released")

    monkeypatch.setattr(_reference, "TangentMean", released)
    X, y, groups = make_spd_classification(n_clients=4, n_matrices_per_client=20, n_channels=3, random_state=0)
    est = FederatedTangentSpaceClassifier(**{"eps": 4.0, "noise": "distributed", "n_rounds": 2, **options})
    with pytest.raises(ValueError, match=message):
        est.fit(X, y, groups=groups)


def test_flower_carries_an_encoding_field_by_field():
    """An encoding travels field by field (deployed sites run it under secure aggregation:
    tests/flower/test_secure_aggregation.py, and so do the simulation's: tests/flower/test_simulation.py)."""
    from skfedriem.flower.protocol.messages import decode_instructions

    t = trainer()
    t.pricing.plan([40] * 4, list(range(4)))
    instructions = t.pricing.client_instructions(0, 0.1)
    assert instructions.encoding is not None
    assert decode_instructions(encode_instructions(instructions)) == instructions
    counted = trainer(clip="auto")
    counted.pricing.plan([40] * 4, list(range(4)))
    instructions = counted.pricing.client_instructions(0, 0.1, 0.5)
    assert instructions.encoding.count_scale > 0
    assert decode_instructions(encode_instructions(instructions)) == instructions


def test_a_client_refuses_an_encoding_for_another_model_or_several_steps():
    from skfedriem.federated.instructions import step_plan

    t = trainer()
    t.pricing.plan([40] * 4, list(range(4)))
    good = t.pricing.client_instructions(0, 0.1)
    wrong = RoundInstructions(**{**good.__dict__, "encoding": good.encoding.__class__(
        good.encoding.dimension + 1, *list(good.encoding.__dict__.values())[1:])})
    with pytest.raises(InvalidInstructionsError, match="coordinates"):
        step_plan(wrong, 40, t.module)
    with pytest.raises(InvalidInstructionsError, match="one step"):
        step_plan(RoundInstructions(**{**good.__dict__, "local_steps": 2}), 40, t.module)
    with pytest.raises(InvalidInstructionsError, match="noise_std=0"):
        step_plan(RoundInstructions(**{**good.__dict__, "noise_std": 0.5}), 40, t.module)


def test_the_release_is_an_integer_vector_modulo_the_encodings_modulus():
    from skfedriem.federated.client_round import run_round

    t = trainer()
    t.pricing.plan([40] * 4, list(range(4)))
    instructions = t.pricing.client_instructions(0, 0.1, rotation_seed=9)
    recipe = t.client_recipe(simulated=True)
    theta = {n: p.detach().clone() for n, p in t.module.named_parameters()}
    [(reply, _)] = run_round(recipe, theta, [clients()[0]], [ClientState.fresh(np.random.SeedSequence(1))],
                             instructions)
    assert set(reply) == {ENCODED_RELEASE}
    release = reply[ENCODED_RELEASE]
    assert release.dtype == torch.int64 and release.shape == (instructions.encoding.padded,)
    assert int(release.min()) >= 0 and int(release.max()) < instructions.encoding.modulus


def test_estimators_take_the_settings_and_a_budget_and_warm_start():
    X, y, groups = make_spd_classification(6, 30, 4, random_state=0)
    budget = PrivacyBudget(20.0)
    clf = FederatedTangentSpaceClassifier(eps=4.0, noise="distributed", n_rounds=20, privacy_budget=budget,
                                          warm_start=True)
    clf.fit(X, y, groups=groups)
    first_local = clf.local_epsilon_
    assert clf.epsilon_ <= 4.0 < first_local
    assert [h["local_epsilon"] for h in clf.history_][-1] == pytest.approx(first_local)
    clf.fit(X, y, groups=groups)
    assert clf.local_epsilon_ > first_local and clf.epsilon_ > 4.0
    assert budget.spent() == pytest.approx(clf.epsilon_, rel=1e-6)  # the budget composes the two fits' ε_central


def test_a_round_short_of_shares_leaves_no_sum_in_the_transcript():
    """Secure aggregation with fewer than K − t survivors aborts: the one release that arrived is not kept (it is
    protected only by its own share, ε_local)."""
    t = FederatedTrainer(StiefelNet(seed=0), cross_entropy,
                         FederationSettings(n_rounds=2, batch_size=10, eps=5.0, noise="distributed"),
                         seed_sequence=np.random.SeedSequence(0), record_transcript=True)
    states = [ClientState.fresh(s) for s in np.random.SeedSequence(3).spawn(4)]
    transport = _Dropping(t.client_recipe(simulated=True), clients(), states, answering=1)
    t.serve(transport, [40] * 4, list(range(4)), np.random.SeedSequence(0))
    assert [row["sum"] for row in t.transcript_] == [None, None]


def test_a_plan_for_other_clients_or_colluders_is_refused():
    """A plan forged for t = 0 and passed as this run's (t = 1): the run would certify shares it does not count."""
    from skfedriem.federated.plan import plan_basis, plan_run
    from skfedriem.federated.pricing import model_dimension
    from skfedriem.privacy.accounting.accounting_methods import get_accounting

    settings = FederationSettings(n_rounds=4, batch_size=10, eps=5.0, noise="distributed", colluders=1)
    module = StiefelNet(seed=0)
    d = model_dimension(module)
    forged = plan_run([40] * 4, list(range(4)), settings.replace(colluders=0), dimension=d)
    object.__setattr__(forged, "basis", plan_basis([40] * 4, settings, get_accounting("rfedproj"), 2.0, d))
    with pytest.raises(ValueError, match="t = 0"):
        FederatedTrainer(module, cross_entropy, settings, plan=forged).fit(clients())


@pytest.mark.parametrize("field, value, message", [("rotation_seed", -1, "rotation_seed"),
                                                   ("share", 1e19, "share"), ("scale", 1e20, "2\\^52")])
def test_a_client_refuses_a_hostile_encoding(field, value, message):
    from skfedriem.federated.instructions import step_plan

    t = trainer()
    t.pricing.plan([40] * 4, list(range(4)))
    good = t.pricing.client_instructions(0, 0.1)
    with pytest.raises(InvalidInstructionsError, match=message):
        encoding = good.encoding.__class__(**{**good.encoding.__dict__, field: value})
        step_plan(RoundInstructions(**{**good.__dict__, "encoding": encoding}), 40, t.module)


def test_subjects_sampled_whole_are_the_clipped_unit():
    data = [(X, y, torch.arange(len(y)) // 4) for X, y in clients()]  # 10 subjects of 4 records a client
    t = trainer(privacy_unit="subject", batch_size=5).fit(data)
    assert t.plan_.sample_rate == 0.5 and t.epsilon_ <= 5.0
    assert all(entry.unit == "subject" for entry in t.accountant_.history)


@pytest.mark.parametrize("batch_size", [None, 5])
def test_a_subject_of_k_records_is_charged_as_one_skellam_step_at_k_times_a_records_sensitivity(batch_size):
    """records_per_subject k: the client's sum moves by k Δ when a subject's k records change, charged at q = 1
    (no amplification claimed); the certificate is that Skellam mechanism's, recomputed here independently."""
    data = [(X, y, torch.arange(len(y)) // 4) for X, y in clients()]  # 10 subjects of 4 records a client
    t = trainer(privacy_unit="subject", records_per_subject=2, batch_size=batch_size).fit(data)
    record = trainer(batch_size=batch_size).fit(clients())
    encoding = t.plan_.encoding
    l2, l1 = encoding.sensitivity(1.0)
    (entry,) = t.accountant_.history
    assert entry.unit == "subject" and entry.group_size == 1 and entry.sample_rate == 1.0
    assert entry.skellam == pytest.approx((encoding.central_variance, 2 * l2, 2 * l1))
    independent = discrete_epsilon([(("skellam", encoding.central_variance, 2 * l2, 2 * l1, 1.0), 4)], 1e-5)
    assert t.epsilon_ == pytest.approx(independent) and t.epsilon_ <= 5.0
    # the same ε for a subject needs more noise than for a record
    assert encoding.central_variance > record.plan_.encoding.central_variance
    (one,) = record.accountant_.history  # a record: its own Δ on the same grid, at its sampling rate
    assert one.skellam[1:] == pytest.approx((l2, l1)) and one.sample_rate == record.plan_.sample_rate


class _Crashing(LocalTransport):
    """The server dies at round ``crash_at``, after it charged and checkpointed the round."""

    def __init__(self, *args, crash_at):
        super().__init__(*args)
        self.crash_at = crash_at

    def run_round(self, t, selected, theta, instructions):
        if t == self.crash_at:
            raise RuntimeError("server crash")
        return super().run_round(t, selected, theta, instructions)


def test_a_resumed_run_equals_the_uninterrupted_one_and_charges_the_resent_round_again(tmp_path):
    """The round cut by the crash is sent again: under distributed noise that is a new release (deployed sites draw
    fresh noise under fresh masks and charge it anew), so the certificate counts it twice; the model is the same."""
    from skfedriem.federated import TrainingState

    data = clients()
    full = trainer().fit(data)
    crashed = trainer()
    states = [ClientState.fresh(s) for s in crashed.client_seeds(len(data))]
    saved = []
    with pytest.raises(RuntimeError, match="server crash"):
        crashed.serve(_Crashing(crashed.client_recipe(simulated=True), data, states, crash_at=2), [40] * 4,
                      list(range(4)), crashed.seed_sequence, on_round=saved.append)
    saved[-1].save(tmp_path / "checkpoint.pt")
    resumed = trainer()
    resumed.serve(LocalTransport(resumed.client_recipe(simulated=True), data, states), [40] * 4, list(range(4)),
                  resumed.seed_sequence, resume=TrainingState.load(tmp_path / "checkpoint.pt"))
    for a, b in zip(full.module.parameters(), resumed.module.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)
    assert full.accountant_.steps == 4 and resumed.accountant_.steps == resumed.local_accountant_.steps == 5
    assert resumed.deviating_accountant_.steps == 5  # the checkpoint carried the deviating ledger on
    assert resumed.epsilon_ > full.epsilon_ and resumed.local_epsilon_ > full.local_epsilon_
    assert resumed.deviating_epsilon_ > full.deviating_epsilon_


@pytest.mark.parametrize("colluders", [1, 2])
def test_a_deviating_server_is_certified_with_the_k_minus_2t_honest_shares_it_can_leave(colluders):
    """Against a server that deviates with t colluders (it declares t honest clients dropped out): the Skellam
    mechanism of K − 2t shares, recomputed here independently; between ε_central and ε_local; in history_, the
    fitted attributes and a ledger of its own."""
    t = trainer(colluders=colluders).fit(clients(n=5))
    encoding = t.plan_.encoding
    l2, l1 = encoding.sensitivity(1.0)
    honest = max(5 - 2 * colluders, 1)
    variance = 2 * encoding.share * honest
    independent = discrete_epsilon([(("skellam", variance, l2, l1, t.plan_.sample_rate), 4)], 1e-5)
    assert t.deviating_epsilon_ == pytest.approx(independent)
    assert [e.skellam[0] for e in t.deviating_accountant_.history] == pytest.approx([variance])
    assert t.epsilon_ < t.deviating_epsilon_ <= t.local_epsilon_
    assert (t.deviating_epsilon_ == pytest.approx(t.local_epsilon_)) == (honest == 1)
    assert t.history_[-1]["deviating_epsilon"] == pytest.approx(t.deviating_epsilon_)
    attributes = t.fitted_attributes()
    assert attributes["deviating_epsilon_"] == t.deviating_epsilon_
    assert attributes["deviating_ledger_"].state_dict() == t.deviating_accountant_.state_dict()


def test_where_k_is_at_most_2t_the_deviating_server_leaves_the_clients_own_share():
    t = trainer(colluders=2, clients_per_round=None).fit(clients(n=4))
    assert t.epsilon_ < t.deviating_epsilon_ == t.local_epsilon_ < math.inf


def test_a_checkpoint_without_a_deviating_ledger_resumes_it_from_epsilon_local():
    """A checkpoint saved before the deviating ledger existed: its ε_local ledger bounds it (its ε_central ledger,
    of K − t shares, would understate it)."""
    import dataclasses

    data = clients(n=5)
    done, saved = trainer(), []
    states = [ClientState.fresh(s) for s in done.client_seeds(len(data))]
    done.serve(LocalTransport(done.client_recipe(simulated=True), data, states), [40] * 5, list(range(5)),
               done.seed_sequence, on_round=saved.append)
    legacy = dataclasses.replace(saved[-1], deviating_ledger=None)
    assert saved[-1].deviating_ledger != done.local_accountant_.state_dict()
    again = trainer()
    states = [ClientState.fresh(s) for s in again.client_seeds(len(data))]
    again.serve(LocalTransport(again.client_recipe(simulated=True), data, states), [40] * 5, list(range(5)),
                again.seed_sequence, resume=legacy)
    assert again.deviating_accountant_.state_dict() == done.local_accountant_.state_dict()


def test_with_local_noise_every_certificate_is_epsilon():
    t = trainer(noise="local").fit(clients())
    assert t.deviating_epsilon_ == t.local_epsilon_ == t.epsilon_
    assert "deviating_epsilon" not in t.history_[-1]


def test_without_privacy_there_is_no_noise_to_place():
    t = trainer(eps=None).fit(clients())
    assert t.plan_.encoding is None and math.isinf(t.epsilon_) and math.isinf(t.fitted_attributes()["local_epsilon_"])


def test_a_released_reference_mean_is_a_distributed_round_too():
    X, y, groups = make_spd_classification(6, 40, 4, random_state=0)
    clf = FederatedTangentSpaceClassifier(eps=4.0, reference="mean", noise="distributed", n_rounds=10,
                                          random_state=0).fit(X, y, groups=groups)
    assert clf.ledger_.discrete and all(entry.skellam for entry in clf.ledger_.history)
    assert clf.epsilon_ <= 4.0 < clf.local_epsilon_
    # ε_local composes the release's shares and the rounds' shares, each alone
    shares = [entry.skellam[0] for entry in clf.local_ledger_.history]
    central = [entry.skellam[0] for entry in clf.ledger_.history]
    assert len(shares) == len(central) == 2 and all(s < c for s, c in zip(shares, central))


@pytest.mark.parametrize("colluders", [0, 1])
def test_a_classifier_with_colluders_plans_and_states_what_distributed_noise_saves(colluders):
    # the plan compares with local noise at the same ε, which takes no colluders
    X, y, groups = make_spd_classification(4, 30, 4, random_state=0)
    clf = FederatedTangentSpaceClassifier(eps=10.0, noise="distributed", colluders=colluders, n_rounds=2)
    clf.fit(X, y, groups=groups)
    assert f"t = {colluders} may drop out or collude" in clf.plan_.reason


def test_a_budget_shares_its_epsilon_between_distributed_fits_by_their_composition():
    """eps='budget' scales a Skellam run's variance to find its share: more than basic composition's ε / n."""
    X, y, groups = make_spd_classification(6, 30, 4, random_state=0)
    budget = PrivacyBudget(6.0, n_fits=3)
    clf = FederatedTangentSpaceClassifier(eps="budget", noise="distributed", n_rounds=20, privacy_budget=budget)
    clf.fit(X, y, groups=groups)
    assert 6.0 / 3 * 1.05 < clf.epsilon_ < 6.0


def test_adaptive_clipping_releases_its_count_through_the_secure_sum_and_is_charged_for_it():
    """clip='auto': the count of records within the clip rides in the release's last coordinate at s_b, so one
    Skellam step covers (sum, count) at (√((2R)² + s_b²), 2R min(√n, R) + s_b); the certificate equals that
    mechanism's, recomputed here (a charge that left the count out would be below it), and the clip moves."""
    from skfedriem.federated.adaptive_clip import COUNT_SHARE
    from skfedriem.privacy.mechanisms.discrete import rounding_bound

    t = trainer(clip="auto", n_rounds=6).fit(clients())
    encoding = t.plan_.encoding
    radius = rounding_bound(encoding.scale * 1.0, encoding.padded)
    s_b = encoding.count_scale
    assert s_b ** 2 / ((2 * radius) ** 2 + s_b ** 2) == pytest.approx(COUNT_SHARE, rel=0.05)
    l2, l1 = math.hypot(2 * radius, s_b), 2 * radius * min(math.sqrt(encoding.padded), radius) + s_b
    (entry,) = t.accountant_.history
    assert entry.skellam == pytest.approx((encoding.central_variance, l2, l1))
    independent = discrete_epsilon([(("skellam", encoding.central_variance, l2, l1, 0.25), 6)], 1e-5)
    assert t.epsilon_ == pytest.approx(independent) and t.epsilon_ <= 5.0
    without_count = discrete_epsilon([(("skellam", encoding.central_variance, 2 * radius,
                                        2 * radius * min(math.sqrt(encoding.padded), radius), 0.25), 6)], 1e-5)
    assert without_count < t.epsilon_
    clips = [row["clip"] for row in t.history_]
    assert clips[0] == 1.0 and len(set(clips)) == len(clips)
    assert all(row["clipped_fraction"] is not None for row in t.history_)


def test_the_servers_fraction_is_the_decoded_count_of_the_sum_it_learnt():
    """The server's b̄_t is the sum's last coordinate over s_b, divided by the answering clients' batches: what
    secure aggregation revealed, nothing else."""
    from skfedriem.federated.adaptive_clip import FRACTION_RANGE
    from skfedriem.privacy.mechanisms.discrete import decode_count

    t = FederatedTrainer(StiefelNet(seed=0), cross_entropy,
                         FederationSettings(n_rounds=3, batch_size=10, eps=5.0, noise="distributed", clip="auto"),
                         seed_sequence=np.random.SeedSequence(0), record_transcript=True).fit(clients())
    for row, seen in zip(t.history_, t.transcript_):
        encoding = t.plan_.encoding
        fraction = decode_count(seen["sum"].numpy(), encoding) / 40
        assert row["clipped_fraction"] == pytest.approx(min(max(fraction, FRACTION_RANGE[0]), FRACTION_RANGE[1]))


@pytest.mark.parametrize("clip, expected", [(1e-6, 0), (1e6, 10)])
def test_a_clients_count_is_its_batchs_records_within_the_clip(clip, expected):
    """Without noise (a share of 1e-300) the release's last coordinate is s_b times the records of the batch of 10
    whose gradient norm is at most C: none at a clip below every norm, all ten above them (a doubled, constant or
    unconditional count fails one of the two)."""
    from skfedriem.federated.client_round import run_round

    t = trainer(clip="auto")
    t.pricing.plan([40] * 4, list(range(4)))
    instructions = t.pricing.client_instructions(0, 0.1, clip)
    quiet = RoundInstructions(**{**instructions.__dict__,
                                 "encoding": dataclasses.replace(instructions.encoding, share=1e-300)})
    theta = {n: p.detach().clone() for n, p in t.module.named_parameters()}
    [(reply, _)] = run_round(t.client_recipe(simulated=True), theta, [clients()[0]],
                             [ClientState.fresh(np.random.SeedSequence(1))], quiet)
    release = reply[ENCODED_RELEASE].numpy()
    assert release.shape == (quiet.encoding.padded + 1,)
    assert int(release[-1]) == expected * quiet.encoding.count_scale


def test_the_count_coordinate_carries_the_records_within_the_clip_and_one_record_moves_it_by_s_b():
    from skfedriem.privacy.mechanisms.discrete import decode_count, encode_records, sum_releases
    from skfedriem.privacy.mechanisms.randomness import SeededRandomness

    t = trainer(clip="auto")
    t.pricing.plan([40] * 4, list(range(4)))
    encoding = dataclasses.replace(t.plan_.encoding, share=1e-300)  # no noise: the sum itself
    rows = torch.zeros(5, encoding.dimension, dtype=torch.float64)

    def release(count):
        return encode_records(rows, encoding, 1.0, SeededRandomness(np.random.SeedSequence(0)), count)

    assert release(3).shape == (encoding.padded + 1,)
    assert decode_count(sum_releases([release(3), release(2)], encoding), encoding) == 5.0
    assert int(release(3)[-1] - release(2)[-1]) == encoding.count_scale
    with pytest.raises(ValueError, match="count"):
        encode_records(rows, encoding, 1.0, SeededRandomness(np.random.SeedSequence(0)))


def test_an_adaptive_round_at_another_clip_keeps_the_planned_grid_and_charge():
    """The grid follows the round's clip (s C_t never above the planned s C_0), so every round costs its plan; a
    client sent a larger count scale charges the larger sensitivity it runs."""
    from skfedriem.federated.instructions import step_plan

    t = trainer(clip="auto")
    t.pricing.plan([40] * 4, list(range(4)))
    (planned,) = t.pricing.round_release(0.1).history
    for clip in (0.25, 3.0, 1.0 + 1e-15):
        instructions = t.pricing.client_instructions(0, 0.1, clip)
        assert instructions.encoding.scale * clip <= t.plan_.encoding.scale * t.plan_.clip
        (runs,) = step_plan(instructions, 40, t.module).release().history  # what the client charges itself
        assert runs.skellam[0] == planned.skellam[0] and runs.skellam[1] <= planned.skellam[1]
        assert runs.skellam[2] <= planned.skellam[2]
        t.pricing.round_release(0.1, clip)  # no RuntimeError: the plan dominates the round
    good = t.pricing.client_instructions(0, 0.1)
    louder = dataclasses.replace(good.encoding, count_scale=10 * good.encoding.count_scale)
    (honest,) = step_plan(good, 40, t.module).release().history
    (charged,) = step_plan(RoundInstructions(**{**good.__dict__, "encoding": louder}), 40, t.module).release().history
    assert charged.skellam[1] > honest.skellam[1] and charged.skellam[2] > honest.skellam[2]


@pytest.mark.parametrize("estimator", ["tangent", "spdnet"])
def test_classifiers_fit_with_adaptive_clipping_and_distributed_noise(estimator):
    from skfedriem import FederatedSPDNetClassifier

    X, y, groups = make_spd_classification(4, 40, 4, random_state=0)
    cls = FederatedTangentSpaceClassifier if estimator == "tangent" else FederatedSPDNetClassifier
    clf = cls(eps=8.0, noise="distributed", clip="auto", n_rounds=6).fit(X, y, groups=groups)
    assert clf.epsilon_ <= 8.0 and clf.local_epsilon_ > clf.epsilon_
    assert all("clipped_fraction" in row for row in clf.history_)


def test_substituting_one_record_moves_the_release_count_included_within_its_charged_sensitivity():
    """Neighbouring clients (record j replaced by one 50 times louder, or by zeros), the same secret randomness and
    no noise: the count coordinate moves by at most s_b and the whole release by at most the charged (Δ2, Δ1)."""
    from skfedriem.federated.client_round import run_round

    t = trainer(clip="auto", batch_size=None)
    t.pricing.plan([40] * 4, list(range(4)))
    instructions = t.pricing.client_instructions(0, 0.1)
    encoding = dataclasses.replace(instructions.encoding, share=1e-300)
    quiet = RoundInstructions(**{**instructions.__dict__, "encoding": encoding})
    theta = {n: p.detach().clone() for n, p in t.module.named_parameters()}
    X, y = clients()[0]

    def release(records):
        [(reply, _)] = run_round(t.client_recipe(simulated=True), theta, [(records, y)],
                                 [ClientState.fresh(np.random.SeedSequence(1))], quiet)
        return reply[ENCODED_RELEASE].numpy()

    m, (l2, l1) = encoding.modulus, encoding.sensitivity(quiet.clip)
    counts_moved = 0
    for j in range(6):
        for factor in (50.0, 0.0):
            neighbour = X.clone()
            neighbour[j] *= factor
            moved = np.mod(release(neighbour) - release(X) + m // 2, m) - m // 2
            assert abs(int(moved[-1])) in (0, encoding.count_scale)
            assert np.linalg.norm(moved) <= l2 and np.abs(moved).sum() <= l1
            counts_moved += moved[-1] != 0
    assert counts_moved > 0  # some substitutions moved a record across the clip
