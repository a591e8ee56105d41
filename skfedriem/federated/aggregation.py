"""Server aggregation rules, applied per parameter block (docs: the method, the protocol).

Each rule is a pair of maps: the client submission Sub(θ_t, θ_i) and the
server output Out(θ_t, Δ̄) of the mean submission. All k submissions of a
block are handled in one batched call. On a Euclidean block every rule
reduces to the arithmetic mean (FedAvg).

| rule    | Sub(θ_t, θ_i)         | Out(θ_t, Δ̄)      |
|---------|-----------------------|------------------|
| projavg | θ_i                   | Π(Δ̄)             |
| rlavg   | P_{θ_t}(θ_i − θ_t)    | Π(θ_t + Δ̄)       |
| retavg  | R⁻¹_{θ_t}(θ_i)        | R_{θ_t}(Δ̄)       |
| kfavg   | Log_{θ_t}(θ_i)        | Exp_{θ_t}(Δ̄)     |

ProjAvg and RLAvg are the paper's methods; RetAvg (PriRFed's) and KFAvg
(Karcher-flow step) are baselines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .._utils.registry import Registry, registered_name
from ..manifolds import Manifold

__all__ = ["AGGREGATIONS", "Aggregation", "get_aggregation", "register_aggregation"]


@dataclass(frozen=True)
class Aggregation:
    """A named pair (Sub, Out) of maps.

    Parameters
    ----------
    name : str
        The name estimators take as ``aggregation=``.
    submission : callable
        ``submission(manifold, theta, local)`` with ``theta`` of shape
        ``(*shape)`` and ``local`` of shape ``(k, *shape)`` -> ``(k, *shape)``.
    output : callable
        ``output(manifold, theta, mean_submission)`` -> new θ, shape ``(*shape)``.
    """

    name: str
    submission: Callable[[Manifold, torch.Tensor, torch.Tensor], torch.Tensor]
    output: Callable[[Manifold, torch.Tensor, torch.Tensor], torch.Tensor]

    def __call__(self, manifold: Manifold, theta: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        """θ_{t+1} from θ_t and the stacked local models of the k clients."""
        return self.output(manifold, theta, self.submission(manifold, theta, local).mean(0))


#: The aggregation rules estimators and clients know by name (:func:`register_aggregation` adds one).
AGGREGATIONS: Registry[Aggregation] = Registry("aggregation", Aggregation)


def register_aggregation(rule: Aggregation, *, name: str | None = None, force: bool = False) -> Aggregation:
    """Make ``rule`` available as ``aggregation=rule.name`` (to estimators, trainers and clients alike).

    Parameters
    ----------
    rule : Aggregation
    name : str, optional
        The name it is registered under: the rule's own (clients look rules
        up by the name the server sends), so a name given must be ``rule.name``.
    force : bool, default=False
        Replace a rule already registered under that name.

    Returns
    -------
    rule : Aggregation
        The same object.

    Examples
    --------
    >>> plain = Aggregation("example_projavg", lambda M, t, x: x, lambda M, t, m: M.proj(m))
    >>> register_aggregation(plain).name in AGGREGATIONS.names()
    True
    """
    return AGGREGATIONS.register(rule, name=registered_name(rule, name), force=force)


def get_aggregation(rule: str | Aggregation) -> Aggregation:
    """The aggregation rule called ``rule`` (a registered rule passes through).

    Parameters
    ----------
    rule : str or Aggregation
        A registered name (``"projavg"``, ``"rlavg"``, ``"retavg"``, ``"kfavg"``...) or a registered rule.

    Returns
    -------
    Aggregation

    Raises
    ------
    ValueError
        For an unknown name, or a rule that is not the one registered under its name (clients look
        rules up by name), listing the registered names.

    Examples
    --------
    >>> get_aggregation("projavg").name
    'projavg'
    """
    found = AGGREGATIONS.get(rule.name if isinstance(rule, Aggregation) else rule)
    if isinstance(rule, Aggregation) and found is not rule:
        raise ValueError(f"The aggregation rule {rule.name!r} is not the one registered under that name: clients "
                         "look rules up by name, so register it first (register_aggregation).")
    return found


for _rule in (
    Aggregation("projavg", lambda M, t, x: x, lambda M, t, m: M.proj(m)),
    Aggregation("rlavg", lambda M, t, x: M.lift(t, x), lambda M, t, m: M.retr(t, m)),
    Aggregation("retavg", lambda M, t, x: M.inv_retr(t, x), lambda M, t, m: M.retr(t, m)),
    Aggregation("kfavg", lambda M, t, x: M.log(t, x), lambda M, t, m: M.exp(t, m)),
):
    register_aggregation(_rule)
