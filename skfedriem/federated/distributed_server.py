"""The server's side of a round of distributed noise: the sum of the releases, decoded, and one projected step.

With ``noise="distributed"`` every client of a round starts from the same
θ_t and takes one step, so the round's update is a function of the sum of
their clipped gradients alone: the server (which learns only that sum, from
secure aggregation; in process it adds the releases modulo 2^bits, where a
deployment's pairwise masks would cancel) decodes it, divides it by the
public total batch B_total = Σ_k B_k of the clients that answered, projects
it onto the tangent space at θ_t and steps its optimiser there, then Π:

    θ_{t+1} = Π(θ_t − η P_θt(Σ_k Σ_z clip_C(g_kz) / B_total + noise)).

This is the tangent-space average of the clients' one-step gradients,
weighted by their batches: for τ = 1 every rule of the local-noise protocol
(ProjAvg, RLAvg, RetAvg) averages the clients' steps from the one point θ_t,
and averaging their gradients there before the one retraction is DP-SGD on
the union of the batches, what a trusted curator holding every record would
run. It needs only the sum, which is all the server may learn; a rule that
needs each client's own iterate cannot run on it.

With a dropout allowance d, each client's release carries the share of
level d and its excess components travel apart: once the round's answers are
in, the server takes out the answering clients' components above the round's
level min(K − answered, d) (:func:`~skfedriem.privacy.mechanisms.discrete.remove_excess`),
so that the noise is what the budget needs, whoever of up to t + d clients
did not answer. Releases without components (a deployed round, whose sites
drew their level's share from the announced lists) are summed as they are.

A round is discarded (θ unchanged, the round still charged: the clients
released) when fewer than K − t − d clients answered (the noise would fall
short of what the budget needs) or when the decoded sum wrapped around the
modulus (:func:`~skfedriem.privacy.mechanisms.discrete.decode_sum`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..manifolds import manifold_of, project_parameters_
from ..privacy.mechanisms.discrete import DistributedEncoding, decode_count, decode_sum, remove_excess, sum_releases
from ..privacy.per_record.per_sample import trainable_parameters
from .optimizers import make_optimizer

__all__ = ["DistributedServer"]


class DistributedServer:
    """Sums, decodes and applies the releases of rounds of distributed noise to a model, with its own optimiser.

    Parameters
    ----------
    module : torch.nn.Module
        The server's model, stepped in place.
    optimizer : str or callable
        The run's optimiser (``"sgd"``, ``"adam"``...), which runs at the
        server on the decoded gradients (post-processing); its state lives
        here, from round to round of this run.
    """

    def __init__(self, module: nn.Module, optimizer) -> None:
        self.module = module
        self.params = trainable_parameters(module)
        self.optimizer = make_optimizer(optimizer, list(self.params.values()), 0.0)

    def apply(self, theta: dict[str, torch.Tensor], releases: list[torch.Tensor], denominator: float,
              encoding: DistributedEncoding, lr: float,
              excess: list[torch.Tensor] | None = None) -> tuple[str | None, float | None]:
        """One round's update from the releases that arrived: why it was discarded (or None), and the sum's noisy
        count of records within the clip (an encoding with a count, in a round applied; else None).

        Parameters
        ----------
        theta : dict of str to Tensor
            θ_t.
        releases : list of Tensor
            The answering clients' encoded releases.
        denominator : float
            B_total of the answering clients.
        encoding : DistributedEncoding
            The round's.
        lr : float
            η of the round.
        excess : list of Tensor, optional
            The answering clients' excess components (a dropout allowance, in process), in the order of
            ``releases``.

        Returns
        -------
        discarded : str or None
        count : float or None
        """
        total = self.summed(releases, encoding, excess)
        if total is None:
            return (f"{len(releases)} of the {encoding.clients} clients answered, fewer than the K − t − d = "
                    f"{encoding.fewest_answers} whose shares the noise needs"), None
        decoded, wrapped = decode_sum(total, encoding)
        if wrapped:
            return "the sum wrapped around the modulus", None
        self._step(theta, decoded / denominator, lr)
        return None, decode_count(total, encoding) if encoding.count_scale else None

    @staticmethod
    def summed(releases: list[torch.Tensor], encoding: DistributedEncoding,
               excess: list[torch.Tensor] | None = None) -> np.ndarray | None:
        """What the server learns of a round: the releases' sum less the excess over its level (None when fewer
        than K − t − d answered: secure aggregation reveals nothing then)."""
        if len(releases) < encoding.fewest_answers:
            return None
        total = sum_releases([r.numpy() for r in releases], encoding)
        if excess is None:
            return total
        if len(excess) != len(releases):
            raise ValueError(f"{len(excess)} clients' excess components for {len(releases)} releases.")
        return remove_excess(total, [e.numpy() for e in excess], encoding, encoding.clients - len(releases))

    def _step(self, theta: dict[str, torch.Tensor], mean: torch.Tensor, lr: float) -> None:
        """θ ← Π(θ − η P_θ(mean)) with the server's optimiser, ``mean`` flattened over the blocks in order."""
        offset = 0
        with torch.no_grad():
            for name, p in self.params.items():
                block = mean[offset:offset + p.numel()].reshape(p.shape)
                offset += p.numel()
                point = theta[name].to(torch.float64)
                g = manifold_of(p).proju(point.unsqueeze(0), block.unsqueeze(0))[0]
                p.grad = g.to(p.dtype).contiguous()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        project_parameters_(self.module)
