"""The federated round loop (SPEC §4), for any module with manifold-tagged parameters.

The loop knows nothing of PCA or SPDNet: it needs a torch module, a
per-record loss, and the clients' records. A new model, manifold or
aggregation rule plugs in without touching it.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from ..baselines.prirfed import prirfed_epsilon
from ..manifolds import manifold_of
from ..privacy import PrivacyAccountant, PrivateManifoldOptimizer, make_sampler, trainable_parameters
from ..privacy.accounting import DISCRETIZATION
from ..privacy.per_sample import LossFn
from .aggregation import get_aggregation
from .plan import PrivacyPlan, plan_run

__all__ = ["FederatedTrainer", "OPTIMIZERS", "lr_at_round"]

OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}


def lr_at_round(lr: float, schedule: str | Callable[[int], float], round_: int, n_rounds: int) -> float:
    """Learning rate of round ``round_`` (0-based): constant, cosine, or a callable of the round."""
    if callable(schedule):
        return float(schedule(round_))
    if schedule == "constant":
        return lr
    if schedule == "cosine":
        return lr * 0.5 * (1 + math.cos(math.pi * round_ / n_rounds))
    raise ValueError(f"The 'lr_schedule' parameter must be 'constant', 'cosine' or a callable. Got {schedule!r} instead.")


def _torch_seed(seq: np.random.SeedSequence) -> int:
    return int(seq.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


class FederatedTrainer:
    """Private federated training of a torch module (DP-RFedProj, SPEC §3–5).

    Each round the server draws ``clients_per_round`` of the n clients
    uniformly without replacement and broadcasts θ_t; each selected client
    runs its τ_i private local steps (fresh uniform batches, per-sample tangent
    gradients clipped over all blocks, tangent Gaussian noise, any optimiser,
    projection) and submits Sub(θ_t, θ_i); the server averages the
    submissions and sets θ_{t+1} = Out(θ_t, Δ̄), per parameter block.

    Parameters
    ----------
    module : torch.nn.Module
        Its parameters are the initial θ_0 (trained in place); tag manifold
        blocks with :class:`~skfedriem.manifolds.ManifoldParameter`.
    loss_fn : callable
        ``loss_fn(module(batch[0]), *batch[1:])`` -> per-record losses (B,).
    n_rounds : int
        T.
    batch_size : int
        B (clamped to the smallest client, with a warning).
    local_steps, local_epochs : int or float, optional
        Exactly one: τ for every client, or τ_i = ceil(epochs · m_i / B).
    clients_per_round : int, optional
        k; all clients when None.
    eps : float or None
        Target ε; None (or inf) trains without noise and without clipping.
    delta : float
    clip : float
        C, the per-record clip norm over all blocks.
    sampling : {"fixed", "poisson"}
    accounting : {"rfedproj", "prirfed"}, default="rfedproj"
        How σ is calibrated and ε reported: the whole-run composition of
        SPEC §5, or PriRFed's per-round accounting (baseline; Poisson only).
    aggregation : {"projavg", "rlavg", "retavg", "kfavg"}
    optimizer : {"sgd", "adam"} or callable
        Client optimiser, or ``callable(params, lr) -> torch.optim.Optimizer``.
    lr : float
    lr_schedule : {"constant", "cosine"} or callable
        Indexed by round.
    reset_optimizer : bool, default=True
        Fresh optimiser state for each client at every round; otherwise each
        client keeps its own state across rounds (it never leaves the client).
    seed_sequence : numpy.random.SeedSequence
        The single source of randomness (client selection, batches, noise).
    monitor : callable, optional
        ``monitor(module) -> dict`` called after every round on the new θ; its
        values go into :attr:`history_`. It runs at the server, so it must only
        use data the server holds.
    record_transcript : bool, default=False
        Keep what the server sees (θ_t, S_t, Δ_i) in :attr:`transcript_`.
    verbose : int, default=0
        > 0 shows a per-round progress bar.

    Attributes
    ----------
    plan_ : PrivacyPlan
    accountant_ : PrivacyAccountant
    history_ : list of dict
        Per round: ``round``, ``epsilon`` (certified so far), ``lr``,
        ``clients``, ``aggregation_seconds`` (server time of Sub, mean and Out)
        and the monitor's values.
    transcript_ : list of dict or None
    """

    def __init__(
        self,
        module: nn.Module,
        loss_fn: LossFn,
        *,
        n_rounds: int,
        batch_size: int,
        local_steps: int | None = None,
        local_epochs: float | None = None,
        clients_per_round: int | None = None,
        eps: float | None = None,
        delta: float = 1e-5,
        clip: float = 1.0,
        sampling: str = "fixed",
        accounting: str = "rfedproj",
        aggregation: str = "projavg",
        optimizer: str | Callable = "sgd",
        lr: float = 0.1,
        lr_schedule: str | Callable[[int], float] = "constant",
        reset_optimizer: bool = True,
        seed_sequence: np.random.SeedSequence | None = None,
        monitor: Callable[[nn.Module], dict] | None = None,
        record_transcript: bool = False,
        verbose: int = 0,
    ) -> None:
        self.module = module
        self.loss_fn = loss_fn
        self.n_rounds = n_rounds
        self.batch_size = batch_size
        self.local_steps = local_steps
        self.local_epochs = local_epochs
        self.clients_per_round = clients_per_round
        self.eps = eps
        self.delta = delta
        self.clip = clip
        self.sampling = sampling
        self.accounting = accounting
        self.aggregation = get_aggregation(aggregation)
        self.optimizer = optimizer
        self.lr = lr
        self.lr_schedule = lr_schedule
        self.reset_optimizer = reset_optimizer
        self.seed_sequence = seed_sequence if seed_sequence is not None else np.random.SeedSequence()
        self.monitor = monitor
        self.record_transcript = record_transcript
        self.verbose = verbose

    def _make_optimizer(self, params, lr: float) -> torch.optim.Optimizer:
        if callable(self.optimizer):
            return self.optimizer(params, lr)
        try:
            return OPTIMIZERS[self.optimizer](params, lr=lr)
        except KeyError:
            raise ValueError(
                f"The 'optimizer' parameter must be one of {sorted(OPTIMIZERS)} or a callable. "
                f"Got {self.optimizer!r} instead."
            ) from None

    def fit(self, clients: Sequence[tuple[torch.Tensor, ...]], client_names: Sequence | None = None):
        """Run the T rounds on the clients' records.

        Parameters
        ----------
        clients : sequence of tuple of torch.Tensor
            Client i's records ``(inputs, *targets)``, records along dim 0.
            Only client i's local steps ever touch them.
        client_names : sequence, optional
            Labels used in messages (default: 0 .. n−1).

        Returns
        -------
        self
        """
        n_clients = len(clients)
        names = list(client_names) if client_names is not None else list(range(n_clients))
        k = n_clients if self.clients_per_round is None else self.clients_per_round
        if not 1 <= k <= n_clients:
            raise ValueError(
                f"The 'clients_per_round' parameter must be in [1, {n_clients}]. Got {self.clients_per_round!r} instead."
            )
        sizes = [int(c[0].shape[0]) for c in clients]
        plan = plan_run(
            sizes, client_names=names, batch_size=self.batch_size, n_rounds=self.n_rounds,
            local_steps=self.local_steps, local_epochs=self.local_epochs, eps=self.eps,
            delta=self.delta, clip=self.clip, sampling=self.sampling, accounting=self.accounting,
        )
        samplers = [make_sampler(self.sampling, m, plan.batch_size) for m in sizes]
        server_seq, *client_seqs = self.seed_sequence.spawn(1 + n_clients)
        server_rng = np.random.default_rng(server_seq)
        client_rngs = [np.random.default_rng(s) for s in client_seqs]
        client_gens = [torch.Generator().manual_seed(_torch_seed(s)) for s in client_seqs]
        optimizer_states: list[dict | None] = [None] * n_clients

        self.plan_: PrivacyPlan = plan
        self.accountant_ = PrivacyAccountant()
        self.history_: list[dict] = []
        self.transcript_: list[dict] | None = [] if self.record_transcript else None

        params = trainable_parameters(self.module)
        manifolds = {name: manifold_of(p) for name, p in params.items()}
        local = copy.deepcopy(self.module)
        local_params = trainable_parameters(local)

        for t in tqdm(range(self.n_rounds), disable=self.verbose <= 0, desc="rounds", unit="round"):
            lr = lr_at_round(self.lr, self.lr_schedule, t, self.n_rounds)
            theta = {name: p.detach().clone() for name, p in params.items()}
            selected = np.sort(server_rng.choice(n_clients, size=k, replace=False))
            finals = {name: [] for name in params}
            for i in selected:
                with torch.no_grad():
                    for name, p in local_params.items():
                        p.copy_(theta[name])
                inner = self._make_optimizer(local.parameters(), lr)
                if not self.reset_optimizer and optimizer_states[i] is not None:
                    inner.load_state_dict(optimizer_states[i])
                    for group in inner.param_groups:
                        group["lr"] = lr
                step = PrivateManifoldOptimizer(
                    local, inner, loss_fn=self.loss_fn, clip=plan.clip, noise_std=plan.noise_std,
                    generator=client_gens[i],
                )
                data, sampler, rng = clients[i], samplers[i], client_rngs[i]
                for _ in range(plan.local_steps[i]):
                    idx = torch.from_numpy(sampler.sample(rng))
                    step.step(tuple(x[idx] for x in data), denominator=sampler.denominator)
                if not self.reset_optimizer:
                    optimizer_states[i] = copy.deepcopy(inner.state_dict())
                for name, p in local_params.items():
                    finals[name].append(p.detach().clone())
            submissions = {}
            started = time.perf_counter()
            with torch.no_grad():
                for name, p in params.items():
                    M = manifolds[name]
                    submissions[name] = self.aggregation.submission(M, theta[name], torch.stack(finals[name]))
                    p.copy_(self.aggregation.output(M, theta[name], submissions[name].mean(0)))
            aggregation_seconds = time.perf_counter() - started
            if self.transcript_ is not None:
                self.transcript_.append({"theta": theta, "clients": selected.tolist(), "submissions": submissions})
            self._end_round(t, lr, selected, aggregation_seconds)
        return self

    def _end_round(self, t: int, lr: float, selected: np.ndarray, aggregation_seconds: float) -> None:
        plan = self.plan_
        if plan.mu0 is not None:
            self.accountant_.step(
                mu0=plan.mu0, sample_rate=plan.sample_rate, num_steps=plan.steps_per_round,
                sampling=self.sampling,
            )
            if plan.accounting == "prirfed":
                eps = prirfed_epsilon(plan.mu0, self.delta, plan.sample_rate, plan.steps_per_round, t + 1,
                                      total_rounds=plan.n_rounds)
            else:
                # 10x the final grid: still an upper bound, fast enough for every round
                eps = self.accountant_.get_epsilon(self.delta, discretization=10 * DISCRETIZATION)
        else:
            eps = math.inf
        entry = {"round": t + 1, "epsilon": eps, "lr": lr, "clients": selected.tolist(),
                 "aggregation_seconds": aggregation_seconds}
        if self.monitor is not None:
            entry.update(self.monitor(self.module))
        self.history_.append(entry)

    def fitted_attributes(self) -> dict:
        """What an estimator exposes after :meth:`fit`, all post-processing of the transcript.

        ``epsilon_`` (certified, fine grid), ``delta_``, ``mu0_``, ``noise_std_``,
        ``batch_size_`` (after clamping) and ``history_``.
        """
        plan = self.plan_
        return {"epsilon_": self.epsilon_, "delta_": self.delta, "mu0_": plan.mu0, "noise_std_": plan.noise_std,
                "batch_size_": plan.batch_size, "history_": self.history_}

    @property
    def epsilon_(self) -> float:
        """Certified ε of the whole run on the fine grid (inf when non-private)."""
        plan = self.plan_
        if plan.mu0 is None:
            return math.inf
        if plan.accounting == "prirfed":
            return prirfed_epsilon(plan.mu0, self.delta, plan.sample_rate, plan.steps_per_round,
                                   max(1, len(self.history_)), total_rounds=plan.n_rounds)
        return self.accountant_.get_epsilon(self.delta)
