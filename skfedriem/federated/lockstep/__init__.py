"""Simulated clients in lockstep: a round's clients with the same instructions take their steps as one computation.

On ``backend="local"`` the clients of a round run on this machine (in this
process, or in each worker process of ``n_jobs``). Clients given the same
:class:`~skfedriem.federated.client.RoundInstructions` (the common case:
same B, τ, C, σ and learning rate) take their τ local steps together, over
the model's blocks stacked along a client axis
(:class:`ClientStack`): one forward and backward
pass, one batched eigendecomposition, for K clients, instead of K of each.
Per client, and exactly as it would alone:

* its plan (:func:`~skfedriem.federated.client.step_plan`, from its own size)
  and its check of θ_t;
* its sampler, drawing its batches from its own secret randomness;
* its per-record gradients, clipping, noise (its own draws, in its own
  order) and counts;
* its optimiser: the stacked optimiser is element-wise
  (:func:`~skfedriem.federated.optimizers.is_elementwise`), so client k's slice
  of it is client k's SGD or Adam, and a client that keeps its optimiser state
  between rounds keeps its own slice (Adam's moments);
* its submission Sub(θ_t, θ_k), computed for it alone, and its fraction of unclipped records.

What may differ from the clients run one by one is floating-point rounding
where a batched kernel reduces in another order than the single one (see the
user guide, "Speed"); the noise draws, batches and clip decisions are the same,
and so is every ledger, which charges each client's own plan.

Clients with other instructions (e.g. their own batch size when
``batch_size=None``), or whose kept optimiser state is at another step count,
form their own group. Clients that sample by Poisson run in lockstep too,
at a width computed from their public sizes and rates, each secret batch
padded to it with weight-0 records and, where larger, taken in further
passes of that width (:mod:`skfedriem.federated.lockstep.widths`): no
client's release depends on another's batch size. A model whose per-record
gradients a stack cannot compute as a lone client does, or an optimiser not
registered as element-wise, runs its clients one by one; a model that claims
it can be stacked is checked once (:meth:`ClientStack.verify`). Whether a
round's clients may run in lockstep is one rule, :func:`lockstep_eligible`.
"""

from .modules import StackedLinear, lockstep_eligible, stacked_gradients_available, stacked_module, supports_stacking
from .rounds import client_stack, lockstep_groups, run_clients, run_lockstep
from .stack import ClientStack, StackedDenseGradients

__all__ = [
    "ClientStack",
    "StackedDenseGradients",
    "StackedLinear",
    "client_stack",
    "lockstep_eligible",
    "lockstep_groups",
    "run_clients",
    "run_lockstep",
    "stacked_gradients_available",
    "stacked_module",
    "supports_stacking",
]
