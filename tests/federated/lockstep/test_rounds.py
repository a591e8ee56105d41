import copy
import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from skfedriem import FederatedPCA, FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem.datasets import make_spd_classification
from skfedriem.federated import FederatedTrainer, FederationSettings, LocalTransport
from skfedriem.federated.client import ClientRecipe, ClientState
from skfedriem.federated.instructions import CLIPPED_FRACTION, RoundInstructions, step_plan
from skfedriem.federated.client_round import lockstep_groups, run_clients, run_round
from skfedriem.federated.optimizers import register_optimizer
from skfedriem.federated.parallel import ParallelTransport
from skfedriem.privacy import ModelCapabilities
from skfedriem.privacy.mechanisms.units import PrivacyUnit
from skfedriem.privacy.mechanisms.mechanism import private_step
from skfedriem.models import BiMap, EEGNet, LogEig, PCAProjector, SPDNet, TangentSpaceLogistic
from skfedriem.federated.lockstep import ClientStack, stacked_gradients_available, supports_stacking

from ...privacy.models import StiefelNet, cross_entropy, make_data


def _spd(n_records, n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n_records, n, 2 * n, generator=g, dtype=torch.float64)
    return (A @ A.mT / (2 * n)).float()


def _pca_loss(losses):
    return losses


def _case(kind):
    """(model, loss, clients of different sizes, bitwise): every model family the estimators train.

    bitwise: whether lockstep gives the one-by-one submissions bit for bit (measured: PCA's closed form does;
    float32 SPDNet, EEGNet and the tangent-space model differ by a few ulps, where batched kernels reduce in
    another order).
    """
    g = torch.Generator().manual_seed(3)
    if kind == "spdnet":
        model = SPDNet(6, 3, dims=(4,), generator=g)
        clients = [(_spd(m, seed=m), torch.randint(3, (m,), generator=g)) for m in (30, 41, 36)]
        return model, cross_entropy, clients, False
    if kind == "tangent":
        model = TangentSpaceLogistic(6, 3)
        clients = [(_spd(m, seed=m), torch.randint(3, (m,), generator=g)) for m in (30, 41, 36)]
        return model, cross_entropy, clients, False
    if kind == "eegnet":
        model = EEGNet(4, 64, 2, F1=2, D=1, F2=2, kernel_length=8, generator=g)
        clients = [(torch.randn(m, 4, 64, generator=g), torch.randint(2, (m,), generator=g)) for m in (20, 26)]
        return model, cross_entropy, clients, False
    if kind == "stiefelnet":
        X, y = make_data(120, seed=2)
        return StiefelNet(seed=0), cross_entropy, [(X[:50], y[:50]), (X[50:], y[50:])], False
    manifold = kind.split("-")[1]
    X = torch.randn(150, 8, generator=g, dtype=torch.float64)
    X /= X.norm(dim=1, keepdim=True)
    return PCAProjector(8, 2, manifold, generator=g), _pca_loss, [(X[:40],), (X[40:95],), (X[95:],)], True


def _instructions(**kw):
    args = dict(lr=0.05, local_steps=3, batch_size=10, clip=1.0, noise_std=0.3, sampling="fixed",
                aggregation="projavg")
    return RoundInstructions(**{**args, **kw})


def _rounds(kind, instructions, optimizer="sgd", reset=True, rounds=2):
    """The same rounds run one by one and in lockstep, from the same seeds: (one-by-one, lockstep) replies and states."""
    model, loss, clients, bitwise = _case(kind)
    theta = {name: p.detach().clone() for name, p in model.named_parameters()}
    runs = []
    for lockstep in (False, True):
        recipe = ClientRecipe(copy.deepcopy(model), loss, optimizer, reset, lockstep)
        states = [ClientState.fresh(np.random.SeedSequence([7, i])) for i in range(len(clients))]
        selected = list(range(len(clients)))
        for _ in range(rounds):
            replies = run_clients(recipe, theta, clients, states, selected, {i: instructions for i in selected})
        runs.append((replies, states))
    return runs, bitwise


KINDS = ["spdnet", "tangent", "eegnet", "stiefelnet", "pca-grassmann", "pca-stiefel"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("options", [{}, {"sampling": "poisson"}, {"count_noise_std": 2.0},
                                     {"clip": float("inf"), "noise_std": 0.0},
                                     {"sampling": "poisson", "count_noise_std": 2.0},
                                     {"sampling": "poisson", "clip": float("inf"), "noise_std": 0.0}])
def test_lockstep_submissions_are_the_one_by_one_submissions_from_the_same_draws(kind, options):
    runs, bitwise = _rounds(kind, _instructions(**options))
    (serial, serial_states), (lockstep, lockstep_states) = runs
    for i in serial:
        assert set(serial[i][0]) == set(lockstep[i][0])
        for name, value in serial[i][0].items():
            if bitwise:  # float64: batched and lone products may round differently on some CPUs, by an ulp or two
                torch.testing.assert_close(lockstep[i][0][name], value, rtol=1e-13, atol=1e-14)
            else:
                torch.testing.assert_close(lockstep[i][0][name], value, rtol=1e-5, atol=1e-6)
    # every client drew exactly what it draws alone: its stream is at the same place afterwards
    assert [s.to_bytes() for s in serial_states] == [s.to_bytes() for s in lockstep_states]


@pytest.mark.parametrize("kind", ["spdnet", "stiefelnet"])
def test_kept_adam_moments_are_each_clients_own(kind):
    (serial, serial_states), (lockstep, lockstep_states) = _rounds(kind, _instructions(), "adam", reset=False,
                                                                   rounds=3)[0]
    for a, b in zip(serial_states, lockstep_states):
        assert a.optimizer_state["state"].keys() == b.optimizer_state["state"].keys()
        for index, entry in a.optimizer_state["state"].items():
            for key, value in entry.items():
                torch.testing.assert_close(b.optimizer_state["state"][index][key], value, rtol=1e-5, atol=1e-7)
    for i in serial:
        for name, value in serial[i][0].items():
            torch.testing.assert_close(lockstep[i][0][name], value, rtol=1e-5, atol=1e-6)


def test_each_clients_noise_is_recovered_from_its_own_stream():
    """Noise and no noise from the same streams: the difference, over σ, is each client's own N(0, 1) draws."""
    model, loss, clients, _ = _case("spdnet")
    stack = ClientStack(model, len(clients))
    stack.load({name: p.detach() for name, p in model.named_parameters()})
    picks = [torch.arange(10) + k for k in range(len(clients))]
    batch = tuple(torch.stack([c[j][p] for c, p in zip(clients, picks)]) for j in range(2))
    sigma, seeds = 0.7, [np.random.SeedSequence([11, k]) for k in range(len(clients))]

    def release(noise_std):
        states = [ClientState.fresh(s) for s in seeds]
        return private_step(stack, loss, [(batch, None)], clip=1.0, noise_std=noise_std, denominator=10,
                            randomness=[s.randomness for s in states])

    noisy, clean = release(sigma), release(0.0)
    for k, seed in enumerate(seeds):
        own = ClientState.fresh(seed).randomness
        for name, block in stack.blocks.items():
            drawn = own.standard_normal(tuple(block.shape[1:]), block.dtype)  # in the order a lone client draws
            tangent = block.manifold.proju(block[k].detach(), drawn) if hasattr(block, "manifold") else drawn
            torch.testing.assert_close((noisy[name][k] - clean[name][k]) / sigma, tangent, rtol=1e-4, atol=1e-5)
    # and two clients never share a draw
    weight = "classifier.weight"
    assert not torch.allclose(noisy[weight][0] - clean[weight][0], noisy[weight][1] - clean[weight][1])


@pytest.mark.parametrize("kind", ["spdnet", "eegnet", "pca-grassmann"])
def test_no_client_in_a_stack_sees_another_clients_records(kind):
    """Replacing every record of client 1 changes client 1's submission and nobody else's, bit for bit."""
    model, loss, clients, _ = _case(kind)
    theta = {name: p.detach().clone() for name, p in model.named_parameters()}
    changed = list(clients)
    changed[1] = (clients[1][0].flip(0) * 1.5 if kind == "eegnet" else clients[1][0].flip(0) ** 2, *clients[1][1:])
    replies = []
    for data in (clients, changed):
        recipe = ClientRecipe(copy.deepcopy(model), loss, "sgd", True, True)
        states = [ClientState.fresh(np.random.SeedSequence([5, i])) for i in range(len(data))]
        selected = list(range(len(data)))
        replies.append(run_clients(recipe, theta, data, states, selected, {i: _instructions() for i in selected}))
    for i in replies[0]:
        same = all(torch.equal(replies[0][i][0][n], replies[1][i][0][n]) for n in replies[0][i][0])
        assert same == (i != 1), i


def test_clients_with_other_instructions_run_in_their_own_group():
    a, b = _instructions(), _instructions(batch_size=7)
    states = [ClientState.fresh(np.random.SeedSequence(i)) for i in range(4)]
    assert lockstep_groups([3, 0, 1, 2], {0: a, 1: b, 2: a, 3: b}, states, keeps_optimizer=False) == [[3, 1], [0, 2]]
    model, loss, clients, _ = _case("spdnet")
    clients = clients + [clients[0]]
    instructions = {0: a, 1: b, 2: a, 3: b}
    replies = []
    for lockstep in (False, True):
        recipe = ClientRecipe(copy.deepcopy(model), loss, "sgd", True, lockstep)
        fresh = [ClientState.fresh(np.random.SeedSequence(i)) for i in range(4)]
        theta = {name: p.detach() for name, p in model.named_parameters()}
        replies.append(run_clients(recipe, theta, clients, fresh, [3, 0, 1, 2], instructions))
    assert list(replies[1]) == [3, 0, 1, 2]
    for i in replies[0]:
        for name, value in replies[0][i][0].items():
            torch.testing.assert_close(replies[1][i][0][name], value, rtol=1e-5, atol=1e-6)


def test_a_kept_optimiser_at_another_step_count_is_its_own_group():
    model, loss, clients, _ = _case("spdnet")
    recipe = ClientRecipe(model, loss, "adam", False, True)
    states = [ClientState.fresh(np.random.SeedSequence(i)) for i in range(3)]
    theta = {name: p.detach() for name, p in model.named_parameters()}
    run_clients(recipe, theta, clients, states, [0], {0: _instructions()})  # client 0 now has 3 Adam steps
    assert lockstep_groups([0, 1, 2], {i: _instructions() for i in range(3)}, states,
                           keeps_optimizer=True) == [[0], [1, 2]]


def test_lockstep_refuses_what_a_lone_client_refuses():
    model, loss, clients, _ = _case("spdnet")
    recipe = ClientRecipe(model, loss, "sgd", True, True)
    states = [ClientState.fresh(np.random.SeedSequence(i)) for i in range(3)]
    theta = {name: 2 * p.detach() for name, p in model.named_parameters()}
    from skfedriem.exceptions import InvalidInstructionsError, InvalidIterateError
    with pytest.raises(InvalidIterateError, match="not a point"):
        run_round(recipe, theta, clients, states, _instructions())
    theta = {name: p.detach() for name, p in model.named_parameters()}
    with pytest.raises(InvalidInstructionsError, match="batch_size"):
        run_round(recipe, theta, clients, states, _instructions(batch_size=31))  # client 0 holds 30


class _OwnRuleLayer(torch.nn.Module):
    """A layer with its own per-record rule that does not say it can be stacked."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))

    def forward(self, X):
        return X * self.weight

    def per_sample_parameter_gradients(self, X, grad_output):
        return {"weight": X * grad_output}

    capabilities = ModelCapabilities(per_record_rule=per_sample_parameter_gradients)


def _sum_loss(output, target):
    return (output.sum(-1) - target.double()) ** 2


def _nesterov(params, lr):
    return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True)


def test_only_stackable_models_and_element_wise_optimisers_run_in_lockstep():
    assert not stacked_gradients_available(torch.nn.Sequential(_OwnRuleLayer()))
    assert stacked_gradients_available(StiefelNet()) and stacked_gradients_available(SPDNet(6, 2, dims=(4,)))
    settings = FederationSettings(n_rounds=1, batch_size=10, local_steps=1, eps=5.0)
    assert FederatedTrainer(StiefelNet(), cross_entropy, settings).client_recipe(simulated=True).lockstep
    assert not FederatedTrainer(StiefelNet(), cross_entropy, settings).client_recipe().lockstep  # a Flower site's
    assert not FederatedTrainer(torch.nn.Sequential(_OwnRuleLayer()), _sum_loss,
                                settings).client_recipe(simulated=True).lockstep
    assert not FederatedTrainer(StiefelNet(), cross_entropy,
                                settings.replace(lockstep=False)).client_recipe(simulated=True).lockstep
    register_optimizer(_nesterov, name="test_nesterov", force=True)
    assert not FederatedTrainer(StiefelNet(), cross_entropy, settings.replace(optimizer="test_nesterov")
                                ).client_recipe(simulated=True).lockstep


def test_both_samplings_of_records_are_eligible_and_an_unknown_one_is_refused():
    from skfedriem.federated.lockstep import lockstep_eligible

    model = SPDNet(6, 2, dims=(4,))
    assert lockstep_eligible(model, "sgd", "fixed") and lockstep_eligible(model, "sgd", "poisson")
    assert not lockstep_eligible(model, "sgd", "poisson", PrivacyUnit("subject"))
    assert lockstep_eligible(model, "sgd", "poisson", PrivacyUnit("subject", 3))  # k records of each subject, sampled as records
    with pytest.raises(ValueError, match="'sampling'.*'shuffle'"):
        lockstep_eligible(model, "sgd", "shuffle")
    settings = FederationSettings(n_rounds=1, batch_size=10, local_steps=1, eps=5.0, sampling="poisson")
    assert FederatedTrainer(StiefelNet(), cross_entropy, settings).client_recipe(simulated=True).lockstep


@pytest.mark.parametrize("make", [
    lambda **kw: FederatedSPDNetClassifier(eps=5.0, dims=(4,), n_rounds=4, batch_size=10, **kw),
    lambda **kw: FederatedTangentSpaceClassifier(eps=5.0, n_rounds=4, batch_size=10, **kw),
])
@pytest.mark.parametrize("sampling", ["fixed", "poisson"])
def test_an_estimator_in_lockstep_is_the_one_by_one_fit(make, sampling):
    X, y, groups = make_spd_classification(4, 40, 6, n_classes=2, random_state=0)
    fits = [make(random_state=0, lockstep=lockstep, sampling=sampling).fit(X, y, groups=groups)
            for lockstep in (False, True)]
    np.testing.assert_allclose(fits[1].predict_proba(X), fits[0].predict_proba(X), rtol=1e-4, atol=1e-5)
    assert fits[0].epsilon_ == fits[1].epsilon_
    assert [h["epsilon"] for h in fits[0].history_] == [h["epsilon"] for h in fits[1].history_]


def test_federated_pca_in_lockstep_is_the_one_by_one_fit_up_to_rounding():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 6)) * np.array([3, 2, 1, 1, 1, 1])
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    options = dict(n_components=2, eps=5.0, solver="riemannian", n_rounds=5, n_clients=4, random_state=0)
    fits = [FederatedPCA(**options, lockstep=lockstep).fit(X) for lockstep in (False, True)]
    # the subspaces (a basis of a Grassmann projector's eigenspace is arbitrary, so compare the projectors)
    projectors = [fit.components_.T @ fit.components_ for fit in fits]
    np.testing.assert_allclose(projectors[1], projectors[0], rtol=0, atol=1e-13)


def test_lockstep_in_the_worker_processes_is_the_lockstep_in_process():
    model, loss, clients, _ = _case("spdnet")
    recipe = ClientRecipe(model, loss, "sgd", True, True)
    theta = {name: p.detach() for name, p in model.named_parameters()}
    instructions = {i: _instructions(count_noise_std=2.0) for i in range(3)}
    here = [ClientState.fresh(np.random.SeedSequence(i)) for i in range(3)]
    expected = LocalTransport(recipe, clients, here).run_round(0, [0, 1, 2], theta, instructions)
    states = [ClientState.fresh(np.random.SeedSequence(i)) for i in range(3)]
    with ParallelTransport(recipe, clients, states, n_jobs=2) as transport:
        transport.wait_until_ready()
        replies = transport.run_round(0, [0, 1, 2], theta, instructions)
    assert transport.worker_runs == 2  # two clients in lockstep in the worker, one here
    for i in expected:
        assert all(torch.equal(expected[i][0][n], replies[i][0][n]) for n in expected[i][0])
        assert CLIPPED_FRACTION in replies[i][0]
    assert [s.to_bytes() for s in states] == [s.to_bytes() for s in here]


@pytest.mark.parametrize("device, match", [("cuda:0" if not torch.cuda.is_available() else "nonsense", "device"),
                                           ("tpu", "device"), (3, "device")])
def test_a_device_that_is_not_there_is_refused_by_name(device, match):
    X, y, groups = make_spd_classification(3, 20, 4, n_classes=2, random_state=0)
    with pytest.raises((ValueError, TypeError), match=match):
        FederatedSPDNetClassifier(eps=5.0, n_rounds=1, device=device).fit(X, y, groups=groups)


def test_the_device_is_for_the_local_backend():
    settings = FederationSettings(n_rounds=1, batch_size=10, local_steps=1, eps=5.0, backend="flower",
                                  device="cuda")
    X, y = make_data(40)
    with pytest.raises(ValueError, match="device"):
        FederatedTrainer(StiefelNet(), cross_entropy, settings).fit([(X[:20], y[:20]), (X[20:], y[20:])])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_fit_on_the_gpu_is_the_cpu_fit():
    X, y, groups = make_spd_classification(3, 60, 8, n_classes=2, random_state=0)
    fits = [FederatedSPDNetClassifier(eps=5.0, n_rounds=5, batch_size=16, random_state=0, device=device)
            .fit(X, y, groups=groups) for device in ("cpu", "cuda")]
    np.testing.assert_allclose(fits[1].predict_proba(X), fits[0].predict_proba(X), rtol=1e-3, atol=1e-4)
    assert fits[0].epsilon_ == fits[1].epsilon_
    assert all(p.device.type == "cpu" for p in fits[1].module_.parameters())


def test_settings_say_lockstep_and_device():
    assert dataclasses.asdict(FederationSettings())["lockstep"] is True
    assert FederationSettings().device == "cpu"


# ---------------------------------------------------------------- what the adversarial review found


def _same_as_one_by_one(model, loss, clients, instructions, bitwise=False):
    theta = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    replies = []
    for lockstep in (False, True):
        recipe = ClientRecipe(copy.deepcopy(model), loss, "sgd", True, lockstep)
        states = [ClientState.fresh(np.random.SeedSequence([9, i])) for i in range(len(clients))]
        selected = list(range(len(clients)))
        replies.append(run_clients(recipe, theta, clients, states, selected, {i: instructions for i in selected}))
    for i in replies[0]:
        for name, value in replies[0][i][0].items():
            torch.testing.assert_close(replies[1][i][0][name], value, rtol=1e-5, atol=1e-6)
    return replies


@pytest.mark.parametrize("batch_size", [1, 3, 10])
def test_a_frozen_linear_weight_with_a_trainable_bias_is_not_mixed_across_clients(batch_size):
    """With B == K the shared weight's bias was broadcast over the records, client b's to record b."""
    model, loss, clients, _ = _case("spdnet")
    model.classifier.weight.requires_grad_(False)
    changed = list(clients)
    changed[2] = (clients[2][0] ** 2, clients[2][1])
    a = _same_as_one_by_one(model, loss, clients, _instructions(batch_size=batch_size))[1]
    b = _same_as_one_by_one(model, loss, changed, _instructions(batch_size=batch_size))[1]
    assert all(torch.equal(a[0][0][n], b[0][0][n]) for n in a[0][0])


class _OrdinaryBiMap(BiMap):
    """A user's BiMap with a forward written for one client (it broadcasts a stacked W over the records)."""

    def forward(self, X):
        return self.weight.transpose(-1, -2) @ X @ self.weight


class _ClaimingBiMap(_OrdinaryBiMap):
    # claimed, wrongly: the check must refuse it
    capabilities = ModelCapabilities(per_record_rule=BiMap.per_sample_parameter_gradients, rule_input_dims=2,
                                     stacks=True)


def test_a_subclass_does_not_inherit_the_claim_and_a_false_claim_is_refused():
    """A subclass of BiMap was taken as stackable; one that claims it wrongly is caught."""
    model, loss, clients, _ = _case("spdnet")
    model.features[1] = _OrdinaryBiMap(6, 4, generator=torch.Generator().manual_seed(5))
    assert not supports_stacking(model) and not stacked_gradients_available(model)  # its layers have rules
    model.features[1] = _ClaimingBiMap(6, 4, generator=torch.Generator().manual_seed(5))
    assert supports_stacking(model)
    recipe = ClientRecipe(model, loss, "sgd", True, True)
    states = [ClientState.fresh(np.random.SeedSequence(i)) for i in range(3)]
    theta = {name: p.detach() for name, p in model.named_parameters()}
    before = [s.to_bytes() for s in states]
    with pytest.raises(ValueError, match="cannot run its clients in lockstep.*lockstep=False"):
        run_round(recipe, theta, clients, states, _instructions(batch_size=3))
    assert [s.to_bytes() for s in states] == before  # refused before any draw


def _row_loss(out, y):  # out (B, 4, 3): per record, the sum of its rows' cross entropies
    return F.cross_entropy(out.flatten(0, 1), y.repeat_interleave(4), reduction="none").view(-1, 4).sum(-1)


def test_a_linear_on_more_than_flat_records_takes_the_vmap_route():
    """A Linear on (B, 4, 4) inputs must not get the flat rule in a stack."""
    model = torch.nn.Sequential(BiMap(6, 4, generator=torch.Generator().manual_seed(1)), LogEig(),
                                torch.nn.Linear(4, 3))
    _, _, clients, _ = _case("spdnet")
    _same_as_one_by_one(model, _row_loss, clients, _instructions())


class _Tied(torch.nn.Module):
    capabilities = ModelCapabilities(stacks=True)  # Linear, tanh, Linear: its forward broadcasts over a client axis

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.a = torch.nn.Linear(6, 6).double()
        self.b = torch.nn.Linear(6, 3).double()
        self.b.weight = torch.nn.Parameter(torch.randn(3, 6, generator=g, dtype=torch.float64))
        self.a.weight = torch.nn.Parameter(torch.randn(6, 6, generator=g, dtype=torch.float64) / 3)
        self.c = self.a  # the same layer twice: its parameters are tied

    def forward(self, x):
        return self.b(torch.tanh(self.c(torch.tanh(self.a(x)))))


def test_tied_parameters_run_one_by_one():
    """A parameter shared by two layers became two stacked blocks (KeyError): not stacked."""
    assert not stacked_gradients_available(_Tied())
    with pytest.raises(ValueError, match="one by one"):
        ClientStack(_Tied(), 2)
    settings = FederationSettings(n_rounds=1, batch_size=10, local_steps=1, eps=5.0)
    assert not FederatedTrainer(_Tied(), cross_entropy, settings).client_recipe(simulated=True).lockstep


def test_instructions_that_are_equal_but_of_another_type_are_another_group():
    """lr=True equals lr=1, yet a lone client refuses it, so it must be checked on its own."""
    good, odd = _instructions(lr=1), _instructions(lr=True)
    states = [ClientState.fresh(np.random.SeedSequence(i)) for i in range(2)]
    assert lockstep_groups([0, 1], {0: good, 1: odd}, states, keeps_optimizer=False) == [[0], [1]]
    model, loss, clients, _ = _case("spdnet")
    recipe = ClientRecipe(model, loss, "sgd", True, True)
    theta = {name: p.detach() for name, p in model.named_parameters()}
    from skfedriem.exceptions import InvalidInstructionsError
    with pytest.raises(InvalidInstructionsError, match="'lr'"):
        run_clients(recipe, theta, clients[:2], states, [0, 1], {0: good, 1: odd})


@pytest.fixture
def narrow_poisson_stacks(monkeypatch):
    """Poisson stacks of width 3: most steps take several passes, and clients of 0 to 3 records share them."""
    import skfedriem.federated.client_round as rounds

    widths = []

    def narrow(sizes, rates):
        widths.append(3)
        return 3

    monkeypatch.setattr(rounds, "poisson_width", narrow)
    return widths


@pytest.mark.parametrize("kind", ["spdnet", "eegnet", "pca-grassmann"])
@pytest.mark.parametrize("options", [{"batch_size": 10}, {"batch_size": 1, "count_noise_std": 2.0},
                                     {"batch_size": 10, "clip": float("inf"), "noise_std": 0.0}])
def test_poisson_batches_over_several_passes_are_the_one_by_one_steps(kind, options, narrow_poisson_stacks):
    """Batches larger than the width (further passes) and empty ones (B = 1 of 30: about a third of the draws): each
    client's submission is its one-by-one submission, drawn from the same stream."""
    runs, bitwise = _rounds(kind, _instructions(sampling="poisson", **options))
    (serial, serial_states), (lockstep, lockstep_states) = runs
    assert narrow_poisson_stacks  # the stack ran
    for i in serial:
        for name, value in serial[i][0].items():
            tolerance = dict(rtol=1e-13, atol=1e-14) if bitwise else dict(rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(lockstep[i][0][name], value, **tolerance)
    assert [s.to_bytes() for s in serial_states] == [s.to_bytes() for s in lockstep_states]


def _passes_of_a_round(clients, model, seeds, width):
    """How many passes of ``width`` each of a round's steps takes, from the clients' own streams (a probe)."""
    states = [ClientState.fresh(seed) for seed in seeds]
    sizes = [[len(step_plan(_instructions(sampling="poisson"), int(c[0].shape[0]), model).sampler().sample(
        s.randomness)) for _ in range(_instructions().local_steps)] for c, s in zip(clients, states)]
    return [max(1, -(-max(step) // width)) for step in zip(*sizes)]


@pytest.mark.parametrize("kind", ["spdnet", "pca-grassmann"])
def test_a_clients_secret_batch_sizes_never_reach_another_clients_release(kind, monkeypatch):
    """Client 1's seed alone changes: its batches, and so how many passes the stack's steps take (width 12, B = 10),
    change; every other client's submission stays the same bit for bit."""
    import skfedriem.federated.client_round as rounds

    monkeypatch.setattr(rounds, "poisson_width", lambda sizes, rates: 12)
    model, loss, clients, _ = _case(kind)
    theta = {name: p.detach().clone() for name, p in model.named_parameters()}

    def seeds(own):
        return [np.random.SeedSequence([own if i == 1 else 5, i]) for i in range(len(clients))]

    before = _passes_of_a_round(clients, model, seeds(5), 12)
    other = next(own for own in range(6, 60) if _passes_of_a_round(clients, model, seeds(own), 12) != before)
    replies = []
    for own in (5, other):
        recipe = ClientRecipe(copy.deepcopy(model), loss, "sgd", True, True)
        states = [ClientState.fresh(seed) for seed in seeds(own)]
        selected = list(range(len(clients)))
        replies.append(run_clients(recipe, theta, clients, states, selected,
                                   {i: _instructions(sampling="poisson") for i in selected}))
    for i in replies[0]:
        same = all(torch.equal(replies[0][i][0][n], replies[1][i][0][n]) for n in replies[0][i][0])
        assert same == (i != 1), i


def test_a_model_with_hooks_is_not_stacked():
    """StackedLinear would have dropped a hook on the Linear it replaces."""
    model, loss, clients, _ = _case("spdnet")
    model.classifier.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
    assert not supports_stacking(model) and not stacked_gradients_available(model)


def _batch_scaled_loss(out, y):  # couples the records of a batch: not a per-record loss
    return F.cross_entropy(out, y, reduction="none") * out.shape[0]


def test_a_loss_that_is_not_per_record_is_refused_in_lockstep():
    """The stack's loss sees K x B rows; a loss that reads the batch would differ, and is caught."""
    model, _, clients, _ = _case("spdnet")
    recipe = ClientRecipe(model, _batch_scaled_loss, "sgd", True, True)
    states = [ClientState.fresh(np.random.SeedSequence(i)) for i in range(3)]
    theta = {name: p.detach() for name, p in model.named_parameters()}
    with pytest.raises(ValueError, match="not per record"):
        run_round(recipe, theta, clients, states, _instructions())


# ---------------------------------------------------------------- what the second review found


def test_an_iterative_submission_is_each_clients_own():
    """kfavg's Sub (Stiefel log) iterates to a tolerance: computed over the stack, each client waited for the slowest."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 6)) * np.array([3, 2, 1, 1, 1, 1])
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    options = dict(n_components=2, eps=5.0, solver="riemannian", manifold="stiefel", aggregation="kfavg",
                   n_rounds=4, n_clients=4, random_state=0)
    fits = [FederatedPCA(**options, lockstep=lockstep).fit(X) for lockstep in (False, True)]
    np.testing.assert_allclose(fits[1].components_, fits[0].components_, rtol=0, atol=1e-13)  # the leak was 1e-11


def _filter_bank_loss(out, y):  # out (B, P, classes): the mean over the bands' logits
    return F.cross_entropy(out.mean(1), y, reduction="none")


def test_a_bimap_on_filter_bank_inputs_meets_its_clients_records():
    """BiMap on (K, B, P, n, n): a stacked W must meet the client axis, not the record axis."""
    from skfedriem.models import LogReEig, Vech
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(BiMap(6, 4, generator=g), LogReEig(1e-4), Vech(), torch.nn.Linear(10, 3))
    clients = [(_spd(2 * m, seed=m).view(m, 2, 6, 6), torch.randint(3, (m,), generator=g)) for m in (20, 25)]
    _same_as_one_by_one(model, _filter_bank_loss, clients, _instructions(batch_size=2))


class _ClientZeroForAll(torch.nn.Module):
    """Claims stacking but applies client 0's weight to every client (and has no per-record rule)."""

    capabilities = ModelCapabilities(stacks=True)

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, 4, dtype=torch.float64))

    def forward(self, X):
        return X * (self.weight if self.weight.dim() == 1 else self.weight[:1].unsqueeze(1))


@pytest.mark.parametrize("n_clients", [7, 40])
def test_the_check_of_many_clients_takes_a_few_records_each_and_still_refuses(n_clients):
    """From 6 clients on the check runs on 6 records each (its cost grows with K, not K²): a stack that applies
    client 0's weight to all, or a BiMap written for one client, is still refused; an honest SPDNet passes."""
    from skfedriem.federated.lockstep.check import CHECK_WIDTH

    g = torch.Generator().manual_seed(0)
    clients = [(torch.randn(10, 4, generator=g, dtype=torch.float64), torch.randn(10, generator=g, dtype=torch.float64))
               for _ in range(n_clients)]
    stack = ClientStack(_ClientZeroForAll(), n_clients)
    stack.load({"weight": _ClientZeroForAll().weight.detach()})
    with pytest.raises(ValueError, match="client 1's forward"):
        stack.verify(_sum_loss, clients)
    model, loss, _, _ = _case("spdnet")
    spd_clients = [(_spd(CHECK_WIDTH + 2, seed=k), torch.randint(3, (CHECK_WIDTH + 2,), generator=g))
                   for k in range(n_clients)]
    honest = ClientStack(model, n_clients)
    honest.load({name: p.detach() for name, p in model.named_parameters()})
    honest.verify(loss, spd_clients)
    assert honest.verified
    model.features[1] = _ClaimingBiMap(6, 4, generator=torch.Generator().manual_seed(5))
    claiming = ClientStack(model, n_clients)
    claiming.load({name: p.detach() for name, p in model.named_parameters()})
    with pytest.raises(ValueError, match="cannot run its clients in lockstep"):
        claiming.verify(loss, spd_clients)


@pytest.mark.parametrize("first", [None, float("inf"), 1e9])
def test_the_check_is_not_fooled_by_a_record_that_overflows(first):
    """An inf in a record made the check's tolerance inf: a mixing forward passed."""
    g = torch.Generator().manual_seed(0)
    clients = []
    for _ in range(2):
        X = torch.randn(10, 4, generator=g, dtype=torch.float64)
        if first is not None:
            X[0, 0] = first
        clients.append((X, torch.randn(10, generator=g, dtype=torch.float64)))
    stack = ClientStack(_ClientZeroForAll(), 2)
    stack.load({"weight": _ClientZeroForAll().weight.detach()})
    with pytest.raises(ValueError, match="client 1's forward"):
        stack.verify(_sum_loss, clients)


@pytest.mark.parametrize("kind", ["spdnet", "tangent", "pca-grassmann"])
@pytest.mark.parametrize("sampling", ["fixed", "poisson"])
def test_subjects_giving_k_records_a_round_run_in_lockstep_as_one_by_one(kind, sampling):
    """Each client draws its subjects' k records of the round from its own stream, as alone; then the steps are the
    record-level lockstep's: the same submissions, the same streams afterwards."""
    model, loss, clients, bitwise = _case(kind)
    clients = [(*data, torch.arange(data[0].shape[0]) % 5) for data in clients]  # 5 subjects a client
    theta = {name: p.detach().clone() for name, p in model.named_parameters()}
    instructions = _instructions(sampling=sampling, batch_size=6, privacy_unit="subject", records_per_subject=4)
    runs = []
    for lockstep in (False, True):
        recipe = ClientRecipe(copy.deepcopy(model), loss, "sgd", True, lockstep, PrivacyUnit("subject", 4))
        states = [ClientState.fresh(np.random.SeedSequence([7, i])) for i in range(len(clients))]
        selected = list(range(len(clients)))
        for _ in range(2):
            replies = run_clients(recipe, theta, clients, states, selected, {i: instructions for i in selected})
        runs.append((replies, [s.to_bytes() for s in states]))
    (serial, serial_states), (stacked, stacked_states) = runs
    tolerance = dict(rtol=1e-13, atol=1e-14) if bitwise else dict(rtol=1e-5, atol=1e-6)
    for i in serial:
        for name, value in serial[i][0].items():
            torch.testing.assert_close(stacked[i][0][name], value, **tolerance)
    assert serial_states == stacked_states
