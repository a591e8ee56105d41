"""Simulated clients in lockstep: a round's clients with the same instructions take their steps as one computation.

On ``backend="local"`` the clients of a round run on this machine (in this
process, or in each worker process of ``n_jobs``). Clients given the same
:class:`~skfedriem.federated.instructions.RoundInstructions` (the common case:
same B, τ, C, σ and learning rate) take their τ local steps together, over
the model's blocks stacked along a client axis (:class:`ClientStack`): one
forward and backward pass, one batched eigendecomposition, for K clients,
instead of K of each. The round routine is the one a lone client runs
(:func:`~skfedriem.federated.client_round.run_round`), and so is the private
step (:func:`~skfedriem.privacy.mechanisms.mechanism.private_step`): this package only
makes the stack, checks it once (:func:`~skfedriem.federated.lockstep.check.check_stack`)
and lays out Poisson batches at a public width (:mod:`~skfedriem.federated.lockstep.widths`).

A model whose per-record gradients a stack cannot compute as a lone client
does, or an optimiser not registered as element-wise, runs its clients one
by one, and the estimator says why once (:func:`stacking_obstacle`). Whether
a round's clients may run in lockstep is one rule, :func:`lockstep_eligible`.
"""

from .modules import (lockstep_eligible, stacked_gradients_available, stacked_module, stacking_obstacle,
                      supports_stacking)
from .stack import ClientStack

__all__ = [
    "ClientStack",
    "lockstep_eligible",
    "stacked_gradients_available",
    "stacked_module",
    "stacking_obstacle",
    "supports_stacking",
]
