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

from ..manifolds import Manifold

__all__ = ["AGGREGATIONS", "Aggregation", "get_aggregation"]


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


AGGREGATIONS: dict[str, Aggregation] = {
    "projavg": Aggregation("projavg", lambda M, t, x: x, lambda M, t, m: M.proj(m)),
    "rlavg": Aggregation("rlavg", lambda M, t, x: M.lift(t, x), lambda M, t, m: M.retr(t, m)),
    "retavg": Aggregation("retavg", lambda M, t, x: M.inv_retr(t, x), lambda M, t, m: M.retr(t, m)),
    "kfavg": Aggregation("kfavg", lambda M, t, x: M.log(t, x), lambda M, t, m: M.exp(t, m)),
}


def get_aggregation(name: str) -> Aggregation:
    """The aggregation rule called ``name``.

    Parameters
    ----------
    name : str
        ``"projavg"``, ``"rlavg"`` or ``"retavg"``.

    Returns
    -------
    Aggregation

    Raises
    ------
    ValueError
        For an unknown name, listing the valid ones.

    Examples
    --------
    >>> get_aggregation("projavg").name
    'projavg'
    """
    try:
        return AGGREGATIONS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"The 'aggregation' parameter must be one of {sorted(AGGREGATIONS)}. Got {name!r} instead."
        ) from None
