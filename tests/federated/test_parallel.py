import os

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info

from skfedriem import FederatedSPDNetClassifier
from skfedriem.datasets import make_spd_classification
from skfedriem.exceptions import InvalidIterateError
from skfedriem.federated import FederatedTrainer, FederationSettings, LocalTransport
from skfedriem.federated.client import ClientState
from skfedriem.federated.instructions import RoundInstructions
from skfedriem.federated.parallel import ParallelTransport, effective_n_jobs, thread_budget

from ..privacy.models import StiefelNet, cross_entropy
from .test_engine import clients, trainer


def same_run(a, b):
    assert all(torch.equal(p, q) for p, q in zip(a.module.parameters(), b.module.parameters()))
    assert a.epsilon_ == b.epsilon_
    assert [h["epsilon"] for h in a.history_] == [h["epsilon"] for h in b.history_]
    assert [h["clients"] for h in a.history_] == [h["clients"] for h in b.history_]


@pytest.fixture
def workers_up(monkeypatch):
    """Fits wait for their worker processes before the first round (a short fit ends before they are up) and
    record each transport, so a test can check that workers really ran clients."""
    transports = []
    enter = ParallelTransport.__enter__

    def enter_and_wait(self):
        enter(self)
        self.wait_until_ready()
        transports.append(self)
        return self

    monkeypatch.setattr(ParallelTransport, "__enter__", enter_and_wait)
    return transports


@pytest.mark.parametrize("options", [{"clients_per_round": 2, "n_rounds": 4}, {"sampling": "poisson"}])
def test_results_do_not_depend_on_n_jobs(options, workers_up):
    same_run(trainer(**options).fit(clients()), trainer(n_jobs=2, **options).fit(clients()))
    assert [t.worker_runs > 0 for t in workers_up] == [True]  # the worker ran clients of every round


# Adam's moments travel in the shipped ClientState
@pytest.mark.parametrize("options", [{}, {"optimizer": "adam", "reset_optimizer": False}])
def test_rounds_run_by_the_workers_equal_the_serial_rounds(options):
    data = clients()
    serial = trainer(**options)
    serial.serve(LocalTransport(serial.client_recipe(), data, [ClientState.fresh(s) for s in serial.client_seeds(3)]),
                 [60] * 3, [0, 1, 2], serial.seed_sequence)
    parallel = trainer(**options)
    states = [ClientState.fresh(s) for s in parallel.client_seeds(3)]
    with ParallelTransport(parallel.client_recipe(), data, states, n_jobs=2) as transport:
        transport.wait_until_ready()
        parallel.serve(transport, [60] * 3, [0, 1, 2], parallel.seed_sequence)
    assert transport.worker_runs == 2 * 3  # 3 rounds; each round the worker runs 2 clients, this process 1
    same_run(serial, parallel)


def test_estimator_results_do_not_depend_on_n_jobs(workers_up):
    X, y, groups = make_spd_classification(3, 40, 6, n_classes=2, random_state=0)
    fits = [FederatedSPDNetClassifier(eps=5.0, dims=(4,), n_rounds=3, batch_size=10, random_state=0, n_jobs=n_jobs)
            .fit(X, y, groups=groups) for n_jobs in (None, 2)]
    release, rounds = workers_up  # the clients' mean released before the rounds, in the workers too
    assert fits[1].n_jobs == 2 and rounds.worker_runs == 3 * 2  # 2 of 3 clients per round in the worker
    assert release.worker_runs == 2
    assert np.array_equal(fits[0].predict_proba(X), fits[1].predict_proba(X))
    assert fits[0].epsilon_ == fits[1].epsilon_


def test_fit_computes_with_one_thread_and_restores_the_budget():
    seen = []

    def monitor(module):
        blas = {pool["user_api"]: pool["num_threads"] for pool in threadpool_info()}
        seen.append((torch.get_num_threads(), blas.get("blas", 1)))
        return {}

    torch.set_num_threads(2)
    try:
        trainer(monitor=monitor).fit(clients())
        assert seen and set(seen) == {(1, 1)}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def test_thread_budget_restores_after_an_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError), thread_budget(1):
        raise RuntimeError
    assert torch.get_num_threads() == before


def test_a_workers_refusal_reaches_the_server():
    t = trainer(n_rounds=1)
    data = clients()
    states = [ClientState.fresh(np.random.SeedSequence(i)) for i in range(3)]
    instructions = RoundInstructions(lr=0.1, local_steps=1, batch_size=10, clip=1.0, noise_std=1.0,
                                     sampling="fixed", aggregation="projavg")
    bad = {name: 2 * p.detach() for name, p in StiefelNet(seed=0).named_parameters()}  # off the manifold
    with ParallelTransport(t.client_recipe(), data, states, n_jobs=2) as transport:
        transport.wait_until_ready()
        with pytest.raises(InvalidIterateError, match="not a point"):
            transport.run_round(0, [0], bad, {0: instructions})  # one client: the worker runs it


def test_every_client_runs_once_per_round_in_some_job():
    t = trainer(n_rounds=1)
    data = clients(n=5, m=30)
    states = [ClientState.fresh(np.random.SeedSequence(i)) for i in range(5)]
    instructions = RoundInstructions(lr=0.1, local_steps=2, batch_size=10, clip=1.0, noise_std=1.0,
                                     sampling="fixed", aggregation="projavg")
    theta = {name: p.detach() for name, p in StiefelNet(seed=0).named_parameters()}
    before = [s.to_bytes() for s in states]
    with ParallelTransport(t.client_recipe(), data, states, n_jobs=3) as transport:
        transport.wait_until_ready()
        replies = transport.run_round(0, [0, 2, 3, 4], theta, {i: instructions for i in range(5)})
    assert transport.worker_runs == 3  # 4 clients on 3 jobs: this process took 4 // 3 = 1
    serial_states = [ClientState.from_bytes(b) for b in before]
    serial = LocalTransport(t.client_recipe(), data, serial_states).run_round(0, [0, 2, 3, 4], theta,
                                                                             {i: instructions for i in range(5)})
    assert list(replies) == [0, 2, 3, 4]
    for i in replies:
        assert all(torch.equal(replies[i][0][name], serial[i][0][name]) for name in theta)
    # each selected client's stream moved on exactly as in one serial round; client 1's did not move
    assert [s.to_bytes() for s in states] == [s.to_bytes() for s in serial_states]
    assert states[1].to_bytes() == before[1]


def test_parallel_transport_runs_only_inside_its_block():
    transport = ParallelTransport(trainer().client_recipe(), clients(), [], n_jobs=2)
    with pytest.raises(RuntimeError, match="inside a `with` block"):
        transport.run_round(0, [], {}, {})


@pytest.mark.parametrize("n_jobs", [0, 1.5, "2", True])
def test_bad_n_jobs_is_refused(n_jobs):
    with pytest.raises(ValueError, match=r"'n_jobs'.*" + repr(n_jobs).replace(".", r"\.")):
        trainer(n_jobs=n_jobs).fit(clients())


def test_n_jobs_is_for_the_local_backend():
    with pytest.raises(ValueError, match="n_jobs.*backend='flower'"):
        trainer(n_jobs=2, backend="flower").fit(clients())


def test_effective_n_jobs_follows_scikit_learn():
    assert effective_n_jobs(None) == 1
    assert effective_n_jobs(-1) == os.cpu_count()
    assert effective_n_jobs(4) == 4


def test_a_recipe_that_cannot_travel_is_named():
    t = FederatedTrainer(StiefelNet(seed=0), lambda out, y: cross_entropy(out, y),
                         FederationSettings(n_rounds=1, batch_size=10, local_steps=1, eps=5.0, n_jobs=2))
    with pytest.raises(TypeError, match="n_jobs > 1.*pickle.*lambda"):
        t.fit(clients())
