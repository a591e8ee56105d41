"""One client's side of a round (SPEC §3–4): private local steps, then its submission.

The same code runs in-process (the ``"local"`` backend) and inside a Flower
ClientApp: everything a client keeps between rounds (its random streams and,
optionally, its optimiser state) is in :class:`ClientState`, which the Flower
app stores in the node's own context and never sends.
"""

from __future__ import annotations

import copy
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..manifolds import manifold_of
from ..privacy import PrivateManifoldOptimizer, make_sampler, trainable_parameters
from ..privacy.per_sample import LossFn
from .aggregation import get_aggregation

__all__ = ["ClientState", "RoundInstructions", "check_optimizer", "make_optimizer", "run_client_round"]

OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}


def check_optimizer(optimizer) -> None:
    """ValueError unless ``optimizer`` is a name in :data:`OPTIMIZERS` or a callable."""
    if not callable(optimizer) and not (isinstance(optimizer, str) and optimizer in OPTIMIZERS):
        raise ValueError(
            f"The 'optimizer' parameter must be one of {sorted(OPTIMIZERS)} or a callable. Got {optimizer!r} instead."
        )


def make_optimizer(optimizer: str | Callable, params, lr: float) -> torch.optim.Optimizer:
    """A client optimiser: a name in :data:`OPTIMIZERS` or ``callable(params, lr)``."""
    check_optimizer(optimizer)
    return optimizer(params, lr) if callable(optimizer) else OPTIMIZERS[optimizer](params, lr=lr)


def torch_seed(seq: np.random.SeedSequence) -> int:
    """A 63-bit torch seed drawn from ``seq``."""
    return int(seq.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


@dataclass
class ClientState:
    """What a client carries from one round to the next; it never leaves the client.

    Attributes
    ----------
    rng : numpy.random.Generator
        Draws the batches.
    generator : torch.Generator
        Draws the noise.
    optimizer_state : dict or None
        Kept only when the optimiser is not reset between rounds.
    """

    rng: np.random.Generator
    generator: torch.Generator
    optimizer_state: dict | None = None

    @classmethod
    def from_seed(cls, seq: np.random.SeedSequence) -> ClientState:
        """Fresh streams from the client's own seed sequence."""
        return cls(np.random.default_rng(seq), torch.Generator().manual_seed(torch_seed(seq)))

    def to_bytes(self) -> bytes:
        """Serialise (for a Flower node's private context)."""
        return pickle.dumps({"rng": self.rng.bit_generator.state, "generator": self.generator.get_state(),
                             "optimizer_state": self.optimizer_state})

    @classmethod
    def from_bytes(cls, data: bytes) -> ClientState:
        """Inverse of :meth:`to_bytes`."""
        state = pickle.loads(data)  # written by this client into its own context
        rng = np.random.default_rng()
        rng.bit_generator.state = state["rng"]
        generator = torch.Generator()
        generator.set_state(state["generator"])
        return cls(rng, generator, state["optimizer_state"])


@dataclass(frozen=True)
class RoundInstructions:
    """What the server tells a selected client for one round (all public).

    Attributes
    ----------
    lr : float
    local_steps : int
        τ_i for this client.
    batch_size : int
    clip : float
    noise_std : float
    sampling : {"fixed", "poisson"}
    aggregation : str
        The rule whose Sub the client applies.
    """

    lr: float
    local_steps: int
    batch_size: int
    clip: float
    noise_std: float
    sampling: str
    aggregation: str


def run_client_round(
    module: nn.Module,
    theta: dict[str, torch.Tensor],
    data: tuple[torch.Tensor, ...],
    state: ClientState,
    instructions: RoundInstructions,
    *,
    loss_fn: LossFn,
    optimizer: str | Callable = "sgd",
    reset_optimizer: bool = True,
) -> tuple[dict[str, torch.Tensor], float]:
    """τ_i private local steps from θ_t, then the submission Sub(θ_t, θ_i) of every block.

    Parameters
    ----------
    module : torch.nn.Module
        The client's working copy; its parameters are overwritten with θ_t.
    theta : dict of str to Tensor
        θ_t, by trainable-parameter name.
    data : tuple of Tensor
        The client's records ``(inputs, *targets)``.
    state : ClientState
        Advanced in place (streams; optimiser state when kept).
    instructions : RoundInstructions
    loss_fn : callable
    optimizer : str or callable
    reset_optimizer : bool

    Returns
    -------
    submission : dict of str to Tensor
        Sub(θ_t, θ_i) per block.
    submission_seconds : float
        Time spent in Sub (reported with the aggregation cost).
    """
    params = trainable_parameters(module)
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(theta[name])
    inner = make_optimizer(optimizer, module.parameters(), instructions.lr)
    if not reset_optimizer and state.optimizer_state is not None:
        inner.load_state_dict(state.optimizer_state)
        for group in inner.param_groups:
            group["lr"] = instructions.lr
    step = PrivateManifoldOptimizer(module, inner, loss_fn=loss_fn, clip=instructions.clip,
                                    noise_std=instructions.noise_std, generator=state.generator)
    sampler = make_sampler(instructions.sampling, int(data[0].shape[0]), instructions.batch_size)
    for _ in range(instructions.local_steps):
        idx = torch.from_numpy(sampler.sample(state.rng))
        step.step(tuple(x[idx] for x in data), denominator=sampler.denominator)
    if not reset_optimizer:
        state.optimizer_state = copy.deepcopy(inner.state_dict())
    rule = get_aggregation(instructions.aggregation)
    started = time.perf_counter()
    with torch.no_grad():
        submission = {name: rule.submission(manifold_of(p), theta[name], p.detach().unsqueeze(0))[0].clone()
                      for name, p in params.items()}
    return submission, time.perf_counter() - started
