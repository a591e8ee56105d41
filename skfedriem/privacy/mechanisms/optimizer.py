"""Any torch optimiser driven by the private gradient, then projected back onto the manifold."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ..per_record.copies import LoneClient
from .mechanism import private_step
from ..per_record.per_sample import LossFn
from .randomness import SecretRandomness, SeededRandomness

__all__ = ["PrivateManifoldOptimizer"]


class PrivateManifoldOptimizer:
    """Wrap a ``torch.optim`` optimiser to take private steps on manifolds.

    One :meth:`step` computes the privatised tangent gradient g̃ of the batch
    (:func:`~skfedriem.privacy.private_step` of the module as a
    :class:`~skfedriem.privacy.LoneClient`), writes it into ``.grad``,
    lets the wrapped optimiser (SGD, Adam, ... with any LR scheduler attached
    to :attr:`optimizer`) return its update u on the ambient tensors, and
    projects manifold blocks back: θ ← Π(θ − u). Euclidean blocks keep
    θ ← θ − u. The optimiser only post-processes g̃, so it costs no privacy.

    Parameters
    ----------
    module : torch.nn.Module
    optimizer : torch.optim.Optimizer
        Built over ``module``'s trainable parameters.
    loss_fn : callable
        ``loss_fn(module(batch[0]), *batch[1:])`` -> per-record losses (B,).
    clip : float
        Per-sample clip norm C over all blocks (``inf``: no clipping).
    noise_std : float
        σ of each ambient noise coordinate (0: no noise).
    randomness : SecretRandomness, optional
        The client's secret source of noise; default fresh OS entropy.
    count_noise_std : float, default=0.0
        σ_b > 0: every step also releases the noisy count of its unclipped
        records (:func:`~skfedriem.privacy.mechanisms.mechanism.noisy_clipped_count`),
        appended to :attr:`noisy_counts` (adaptive clipping).

    Examples
    --------
    >>> import torch
    >>> from skfedriem.manifolds import ManifoldParameter, Sphere
    >>> class Direction(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.u = ManifoldParameter(torch.tensor([1.0, 0.0]), Sphere(2))
    ...     def forward(self, x):
    ...         return -(x @ self.u) ** 2
    >>> model = Direction()
    >>> opt = PrivateManifoldOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1),
    ...                                loss_fn=lambda out: out, clip=1.0, noise_std=0.0)
    >>> opt.step((torch.tensor([[0.0, 1.0], [0.1, 0.9]]),), denominator=2)
    >>> float(model.u.detach().norm())
    1.0
    """

    def __init__(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        loss_fn: LossFn,
        clip: float,
        noise_std: float,
        randomness: SecretRandomness | None = None,
        count_noise_std: float = 0.0,
    ) -> None:
        if not (clip > 0):
            raise ValueError(f"The 'clip' parameter must be > 0 (inf disables clipping). Got {clip!r} instead.")
        if not (noise_std >= 0 and math.isfinite(noise_std)):
            raise ValueError(f"The 'noise_std' parameter must be a finite float >= 0. Got {noise_std!r} instead.")
        self.module = module
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.clip = float(clip)
        self.noise_std = float(noise_std)
        self.randomness = randomness if randomness is not None else SeededRandomness(np.random.SeedSequence())
        self.count_noise_std = float(count_noise_std)
        #: The noisy centred counts released so far (with ``count_noise_std > 0``).
        self.noisy_counts: list[float] = []
        self._copies = LoneClient(module)

    def step(self, batch: tuple[torch.Tensor, ...], *, denominator: float,
             segments: torch.Tensor | None = None) -> None:
        """One private local step on the sampled ``batch``.

        Parameters
        ----------
        batch : tuple of torch.Tensor
            The records drawn by the sampler for this step.
        denominator : float
            The sampler's B (fixed size, or expected size under Poisson).
        segments : torch.Tensor of int, optional
            Subject-level steps: each record's subject among the step's
            (:func:`~skfedriem.privacy.private_gradient`).
        """
        batch = tuple(x.unsqueeze(0) for x in batch)
        released = private_step(self._copies, self.loss_fn, [(batch, None)], clip=self.clip, noise_std=self.noise_std,
                                denominator=denominator, randomness=[self.randomness],
                                count_noise_std=self.count_noise_std,
                                counts=[self.noisy_counts] if self.count_noise_std > 0 else None, segments=segments)
        self._copies.step_(self.optimizer, released)
