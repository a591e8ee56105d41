import math

import numpy as np
import pytest
import torch

from skfedriem.federated import FederatedTrainer, FederationSettings, TrainingState
from skfedriem.federated.client import ClientState
from skfedriem.federated import LocalTransport
from skfedriem.privacy import PrivacyAccountant, epsilon_spent

from ..privacy.models import StiefelNet, cross_entropy, make_data


def clients(n=3, m=60):
    X, y = make_data(n * m, seed=1)
    return [(X[i * m : (i + 1) * m], y[i * m : (i + 1) * m]) for i in range(n)]


RUNTIME = {"seed_sequence", "client_seed", "privacy_budget", "run_name", "prior", "monitor", "record_transcript"}


def trainer(seed=0, **kw):
    """A seeded trainer of StiefelNet: settings and runtime objects by keyword."""
    args = dict(n_rounds=3, batch_size=10, local_steps=2, eps=5.0, delta=1e-5, clip=1.0, lr=0.1,
                seed_sequence=np.random.SeedSequence(seed), client_seed=np.random.SeedSequence([seed, 1]))
    args.update(kw)
    runtime = {k: args.pop(k) for k in list(args) if k in RUNTIME}
    return FederatedTrainer(StiefelNet(seed=0), cross_entropy, FederationSettings(**args), **runtime)


def test_accounting_uses_smallest_client_and_its_tau():
    """Under privacy every client takes the smallest client's ⌈m⋆ / B⌉ steps: the rate and the count it runs."""
    data = clients()
    data[1] = (data[1][0][:25], data[1][1][:25])
    t = trainer(local_steps=None, local_epochs=1).fit(data)
    plan = t.plan_
    assert plan.local_steps == (3, 3, 3)  # ceil(m⋆ / B) for every client
    assert plan.sample_rate == pytest.approx(10 / 25)
    assert plan.steps_per_round == 3 and plan.total_steps == 9
    (charged,) = t.accountant_.history  # μ0 = ΔC / (Bσ) as the clients run it: the plan's, up to an ulp
    assert charged.mu0 == pytest.approx(plan.mu0, rel=1e-14)
    assert t.epsilon_ == pytest.approx(epsilon_spent(charged.mu0, 0.4, 9, 1e-5), rel=1e-12)
    assert t.epsilon_ <= 5.0
    eps = [h["epsilon"] for h in t.history_]
    assert eps == sorted(eps) and eps[-1] <= 5.0 * 1.01 and len(eps) == 3


def test_a_client_with_a_few_more_records_does_not_double_the_charged_steps():
    """Clients of 31 and 30 records at B = 30 were planned 2 steps and 1, and every client was charged two
    full-batch steps a round (the largest count at the smallest client's rate): twice what the smallest ran."""
    X, y = make_data(92, seed=1)
    data = [(X[:31], y[:31]), (X[31:62], y[31:62]), (X[62:], y[62:])]
    private = trainer(local_steps=None, local_epochs=1, batch_size=30, n_rounds=2).fit(data)
    assert private.plan_.local_steps == (1, 1, 1) and private.plan_.steps_per_round == 1
    (charged,) = private.accountant_.history
    assert (charged.sample_rate, charged.steps) == (1.0, 2)  # one full-batch step a round, as the smallest runs
    free = trainer(local_steps=None, local_epochs=1, batch_size=30, n_rounds=2, eps=None).fit(data)
    assert free.plan_.local_steps == (2, 2, 1)  # without privacy nothing is charged: each client its own epoch


def test_a_trainer_runs_the_plan_it_is_given_and_refuses_one_made_for_other_clients():
    """The plan a planner made is the run's (not made again); a plan of other sizes, settings or model is refused."""
    from skfedriem.federated import plan_run
    from skfedriem.federated.plan import plan_basis

    data = clients()
    settings = FederationSettings(n_rounds=2, batch_size=10, local_steps=2, eps=5.0)
    plan = plan_run([60, 60, 60], [0, 1, 2], settings)
    assert plan.basis == plan_basis([60, 60, 60], settings, "rfedproj", 2.0)
    given = FederatedTrainer(StiefelNet(seed=0), cross_entropy, settings, plan=plan,
                             client_seed=np.random.SeedSequence(1)).fit(data)
    assert given.plan_ is plan
    for other in (plan_run([60, 60, 59], [0, 1, 2], settings), plan_run([60, 60, 60], [0, 1, 2],
                                                                        settings.replace(eps=4.0))):
        with pytest.raises(ValueError, match="plan given to FederatedTrainer was made for other clients"):
            FederatedTrainer(StiefelNet(seed=0), cross_entropy, settings, plan=other).fit(data)


def test_a_trainer_plans_once_for_the_same_clients(monkeypatch):
    """Charging the plan before the rounds and serving them use one plan (it used to be made twice)."""
    from skfedriem.federated import pricing

    calls = []
    monkeypatch.setattr(pricing, "plan_run", lambda *a, **k: calls.append(1) or plan_run(*a, **k))
    from skfedriem.federated.plan import plan_run

    t = trainer()
    t.charge.charge_plan([60, 60, 60])
    t.fit(clients())
    assert len(calls) == 1


def test_batch_size_clamped_to_smallest_client_with_warning():
    data = clients(m=8)
    with pytest.warns(UserWarning, match=r"client 0.*8 records"):
        t = trainer(batch_size=20).fit(data)
    assert t.plan_.batch_size == 8 and t.plan_.sample_rate == 1.0


def test_one_record_client_is_an_error():
    data = clients()
    data[2] = (data[2][0][:1], data[2][1][:1])
    with pytest.raises(ValueError, match="Client 2 holds 1 record"):
        trainer().fit(data)


def test_client_selection_uniform_without_replacement():
    t = trainer(n_rounds=300, local_steps=1, clients_per_round=2, eps=None).fit(clients(n=4))
    picks = np.array([h["clients"] for h in t.history_])
    assert all(len(set(p)) == 2 for p in picks)
    counts = np.bincount(picks.ravel(), minlength=4)
    assert np.all(np.abs(counts - 150) < 45)


def test_deterministic_and_global_rngs_untouched():
    data = clients()
    a, b, c = trainer(seed=7), trainer(seed=7), trainer(seed=8)
    torch_state, np_state = torch.get_rng_state(), np.random.get_state()[1].copy()
    for t in (a, b, c):
        t.fit(data)
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert (np.random.get_state()[1] == np_state).all()
    assert torch.equal(a.module.W, b.module.W)
    assert not torch.equal(a.module.W, c.module.W)


def test_transcript_records_what_the_server_sees():
    t = trainer(record_transcript=True, clients_per_round=2, aggregation="rlavg").fit(clients())
    assert len(t.transcript_) == 3
    first = t.transcript_[0]
    assert len(first["clients"]) == 2
    assert first["submissions"]["W"].shape == (2, 6, 3)
    # the second round starts from Out(θ_0, mean of the first round's submissions)
    M = t.module.W.manifold
    expected = M.retr(first["theta"]["W"], first["submissions"]["W"].mean(0))
    torch.testing.assert_close(t.transcript_[1]["theta"]["W"], expected)


def test_non_private_run_has_no_noise_and_infinite_epsilon():
    t = trainer(eps=None).fit(clients())
    assert t.plan_.noise_std == 0 and math.isinf(t.plan_.clip) and math.isinf(t.epsilon_)


def test_training_reduces_the_loss_and_keeps_iterates_on_manifold():
    data = clients()
    X = torch.cat([d[0] for d in data])
    y = torch.cat([d[1] for d in data])
    t = trainer(n_rounds=30, eps=None, aggregation="projavg", optimizer="adam", lr=0.05)
    with torch.no_grad():
        before = float(cross_entropy(t.module(X), y).mean())
    t.fit(data)
    with torch.no_grad():
        after = float(cross_entropy(t.module(X), y).mean())
    assert after < before - 0.1
    assert t.module.W.manifold.check_point(t.module.W.detach(), atol=1e-10)


def test_bad_engine_arguments():
    with pytest.raises(ValueError, match="'clients_per_round'.*Got 5"):
        trainer(clients_per_round=5).fit(clients())
    with pytest.raises(ValueError, match="'optimizer'.*Got 'rmsprop'"):
        trainer(optimizer="rmsprop").fit(clients())
    with pytest.raises(ValueError, match="'aggregation'"):
        trainer(aggregation="mean")


class DroppingTransport(LocalTransport):
    """Clients in ``dead`` take their steps but their submissions never arrive (a site going down)."""

    def __init__(self, *args, dead=(), **kw):
        super().__init__(*args, **kw)
        self.dead = set(dead)
        self.ran = []

    def run_round(self, t, selected, theta, instructions):
        replies = super().run_round(t, selected, theta, instructions)
        self.ran.append(sorted(replies))
        return {i: r for i, r in replies.items() if i not in self.dead}


def serve_with(dead, seed=0, **kw):
    t = trainer(seed=seed, **kw)
    data = clients()
    states = [ClientState.fresh(s) for s in t.client_seeds(len(data))]
    transport = DroppingTransport(t.client_recipe(), data, states, dead=dead)
    return t.serve(transport, [len(d[0]) for d in data], [0, 1, 2], t.seed_sequence), transport


def test_serve_over_local_transport_is_fit():
    fitted = trainer().fit(clients())  # in lockstep; the transport runs the clients one by one
    served, _ = serve_with(dead=())
    for a, b in zip(fitted.module.parameters(), served.module.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-14)  # batched products may round differently
    assert [h["clients"] for h in fitted.history_] == [h["replied"] for h in served.history_]


def test_lost_submissions_are_left_out_but_the_round_is_charged():
    full, _ = serve_with(dead=())
    lossy, transport = serve_with(dead=(0,))
    assert all(0 in ran for ran in transport.ran)  # client 0 did take its private steps
    assert [h["replied"] for h in lossy.history_] == [[1, 2]] * 3
    assert [h["clients"] for h in lossy.history_] == [[0, 1, 2]] * 3
    assert lossy.epsilon_ == full.epsilon_  # the ledger charges every round, dead client included
    assert [h["epsilon"] for h in lossy.history_] == [h["epsilon"] for h in full.history_]
    assert not all(torch.equal(a, b) for a, b in zip(full.module.parameters(), lossy.module.parameters()))


def test_round_without_any_submission_keeps_theta():
    t, _ = serve_with(dead=(0, 1, 2), n_rounds=2)
    fresh = trainer(n_rounds=2).module
    for a, b in zip(fresh.parameters(), t.module.parameters()):
        assert torch.equal(a, b)
    assert [h["replied"] for h in t.history_] == [[], []]
    assert t.accountant_.steps == 2 * 2  # T rounds of tau steps, charged although nothing arrived


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match=r"'backend'.*among.*'local'.*Got 'ray'"):
        trainer(backend="ray")


def test_client_state_round_trips_through_bytes():
    state = ClientState.fresh(np.random.SeedSequence(3))
    state.randomness.uniform(5), state.randomness.standard_normal((3,), torch.float64)
    copy = ClientState.from_bytes(state.to_bytes())
    assert np.array_equal(state.randomness.subset(100, 10), copy.randomness.subset(100, 10))
    assert torch.equal(state.randomness.standard_normal((4,), torch.float32),
                       copy.randomness.standard_normal((4,), torch.float32))
    secure = ClientState.from_bytes(ClientState.fresh(secure_mode=True).to_bytes())
    assert type(secure.randomness).__name__ == "SecureRandomness"


class CrashingTransport(LocalTransport):
    """The server dies at round ``crash_at``, after it charged and checkpointed the round, before any client ran."""

    def __init__(self, *args, crash_at, **kw):
        super().__init__(*args, **kw)
        self.crash_at = crash_at

    def run_round(self, t, selected, theta, instructions):
        if t == self.crash_at:
            raise RuntimeError("server crash")
        return super().run_round(t, selected, theta, instructions)


def test_resuming_a_crashed_run_from_its_checkpoint_equals_the_uninterrupted_run(tmp_path):
    data = clients()
    full = trainer(n_rounds=4).fit(data)
    crashed = trainer(n_rounds=4)
    states = [ClientState.fresh(s) for s in crashed.client_seeds(len(data))]
    saved = []
    with pytest.raises(RuntimeError, match="server crash"):
        crashed.serve(CrashingTransport(crashed.client_recipe(), data, states, crash_at=2), [60] * 3, [0, 1, 2],
                      crashed.seed_sequence, on_round=saved.append)
    assert saved[-1].started and saved[-1].round == 2  # round 3 had started: it is charged in the checkpoint
    saved[-1].save(tmp_path / "checkpoint.pt")
    state = TrainingState.load(tmp_path / "checkpoint.pt")
    resumed = trainer(n_rounds=4)
    resumed.serve(LocalTransport(resumed.client_recipe(), data, states), [60] * 3, [0, 1, 2], resumed.seed_sequence,
                  resume=state)
    for a, b in zip(full.module.parameters(), resumed.module.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-14)  # lockstep against one by one: up to rounding
    assert resumed.accountant_.steps == full.accountant_.steps == 4 * 2  # the crashed round is charged once
    assert resumed.epsilon_ == full.epsilon_
    assert [h["epsilon"] for h in resumed.history_] == [h["epsilon"] for h in full.history_]
    assert [h["round"] for h in resumed.history_] == [1, 2, 3, 4]


def test_a_prior_ledger_is_composed_into_every_reported_epsilon():
    first = trainer(n_rounds=2).fit(clients())
    prior = TrainingState(0, {}, first.accountant_.state_dict(), first.history_)
    second = trainer(n_rounds=2, prior=prior).fit(clients())
    assert [h["round"] for h in second.history_] == [1, 2, 3, 4]
    assert second.accountant_.steps == 2 * first.accountant_.steps
    assert first.epsilon_ < second.epsilon_ < 2 * first.epsilon_
    assert second.epsilon_ == pytest.approx(epsilon_spent(first.plan_.mu0, first.plan_.sample_rate, 8, 1e-5))


def test_history_reports_the_ledgers_epsilon_after_every_round():
    t = trainer(n_rounds=6, clients_per_round=2).fit(clients())
    ledger = PrivacyAccountant()
    for entry in t.history_[:-1]:
        ledger.step(mu0=t.plan_.mu0, sample_rate=t.plan_.sample_rate, num_steps=t.plan_.steps_per_round)
        coarse = ledger.get_epsilon(1e-5, discretization=1e-3)
        assert entry["epsilon"] == pytest.approx(min(coarse, t.epsilon_), rel=1e-7)
    # the last round reports the certified epsilon_ itself, and no round reports more (issue 20)
    assert t.history_[-1]["epsilon"] == t.epsilon_
    assert max(h["epsilon"] for h in t.history_) <= t.epsilon_


def test_a_non_private_run_is_in_the_ledger_as_infinite_loss():
    """A fit without noise leaves its rounds in the ledger, so nothing built on it is called private."""
    first = trainer(n_rounds=2, eps=None).fit(clients())
    assert first.accountant_.steps == 2 * 2 and not first.accountant_.private
    assert all(math.isinf(e.mu0) for e in first.accountant_.history)
    prior = TrainingState(0, {}, first.accountant_.state_dict(), first.history_)
    private = trainer(n_rounds=1, eps=1.0, lr=1e-12, prior=prior).fit(clients())
    assert math.isinf(private.epsilon_)
    assert [h["epsilon"] for h in private.history_] == [math.inf] * 3


def test_every_round_is_charged_from_the_steps_the_clients_run():
    """The charge is built by the clients' own step plan: their sizes, their τ_i, the model's sensitivity."""
    data = clients()
    data[1] = (data[1][0][:25], data[1][1][:25])
    t = trainer(local_steps=None, local_epochs=1, clients_per_round=1).fit(data)
    (entry,) = t.accountant_.history
    assert (entry.sample_rate, entry.steps) == (10 / 25, 3 * 3)  # whoever was selected
    assert entry.mu0 == pytest.approx(t.plan_.mu0, rel=1e-14)  # ΔC / (Bσ) from the σ it was sent


def test_a_resume_with_other_settings_is_refused(tmp_path):
    """The checkpoint's plan is the run's; a resume at another σ or horizon is another run."""
    data = clients()
    crashed = trainer(n_rounds=4)
    states = [ClientState.fresh(s) for s in crashed.client_seeds(len(data))]
    saved = []
    with pytest.raises(RuntimeError, match="server crash"):
        crashed.serve(CrashingTransport(crashed.client_recipe(), data, states, crash_at=2), [60] * 3, [0, 1, 2],
                      crashed.seed_sequence, on_round=saved.append)
    for changed, named in (({"eps": 6.0}, "eps"), ({"n_rounds": 8}, "n_rounds"), ({"clip": 2.0}, "clip"),
                           ({"batch_size": 12}, "batch_size"), ({"sampling": "poisson"}, "sampling")):
        resumed = trainer(**{"n_rounds": 4, **changed})
        with pytest.raises(ValueError, match=f"Cannot resume.*{named}"):
            resumed.serve(LocalTransport(resumed.client_recipe(), data, states), [60] * 3, [0, 1, 2],
                          resumed.seed_sequence, resume=saved[-1])
    with pytest.raises(ValueError, match="Cannot resume.*client_sizes"):
        trainer(n_rounds=4).serve(LocalTransport(crashed.client_recipe(), data, states), [60, 60, 50], [0, 1, 2],
                                  crashed.seed_sequence, resume=saved[-1])


def test_a_cut_round_resent_at_another_cost_is_charged_again():
    data = clients()
    crashed = trainer(n_rounds=3)
    states = [ClientState.fresh(s) for s in crashed.client_seeds(len(data))]
    saved = []
    with pytest.raises(RuntimeError, match="server crash"):
        crashed.serve(CrashingTransport(crashed.client_recipe(), data, states, crash_at=1), [60] * 3, [0, 1, 2],
                      crashed.seed_sequence, on_round=saved.append)
    cut = saved[-1]
    cut.round_cost = {"history": [{**cut.round_cost["history"][0], "mu0": 0.01}]}  # charged at another mu0
    resumed = trainer(n_rounds=3)
    resumed.serve(LocalTransport(resumed.client_recipe(), data, states), [60] * 3, [0, 1, 2], resumed.seed_sequence,
                  resume=cut)
    assert resumed.accountant_.steps == (3 + 1) * 2  # the re-sent round is charged at what it was sent with


def test_a_plan_edited_by_hand_is_refused_and_the_settings_are_not_replaced():
    """A plan's basis is plan_run's mark: an edited copy (less noise) has none, so no trainer takes it; a trainer's
    settings and module are those its rounds are priced for (reassigning them would under-charge the rounds)."""
    import dataclasses

    from skfedriem.federated import plan_run

    settings = FederationSettings(n_rounds=2, batch_size=10, local_steps=2, eps=2.0)
    plan = plan_run([60, 60, 60], [0, 1, 2], settings)
    quieter = dataclasses.replace(plan, noise_std=plan.noise_std / 10, mu0=plan.mu0 * 10)
    assert quieter.basis == ()
    with pytest.raises(ValueError, match="plan given to FederatedTrainer was made for other clients"):
        FederatedTrainer(StiefelNet(seed=0), cross_entropy, settings, plan=quieter).fit(clients())
    t = FederatedTrainer(StiefelNet(seed=0), cross_entropy, settings)
    with pytest.raises(AttributeError):
        t.settings = settings.replace(n_rounds=8)
    with pytest.raises(AttributeError):
        t.module = StiefelNet(seed=1)



def test_a_trainer_charged_for_one_run_runs_no_other():
    """Once its budget is charged for a plan, a trainer refuses to plan another (the budget would pay for a run
    that did not happen while another ran)."""
    from skfedriem.privacy import PrivacyBudget

    budget = PrivacyBudget(epsilon=50.0)
    t = trainer(privacy_budget=budget)
    t.charge.charge_plan([60, 60, 60])
    with pytest.raises(ValueError, match="budget was charged for this trainer's plan of other clients"):
        t.fit(clients(m=20))
    with pytest.raises(AttributeError):
        t.pricing.settings = t.settings.replace(n_rounds=30)
