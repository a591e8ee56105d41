"""Audits of a client's rounds on a two-block manifold model, against a static and an adaptive server.

The PCA audits have one parameter block, so a mechanism that clips each block
on its own passes them; they send the same θ every round, so a client whose
noise stream starts over at every round passes them too. These audits run the
client's real round (:func:`~skfedriem.federated.client.run_client_round`:
step plan, sampler, per-record gradients, joint clipping, noise, projection,
optimiser, Sub) round after round with its persistent
:class:`~skfedriem.federated.client.ClientState`, as a server sees it:

* the model, :class:`TwoBlocks`, has two manifold blocks u, v ∈ St(3, 1) and
  the loss −(aᵀu)² − (bᵀv)² of a record (a, b);
* the client holds the canary and a zero record (zero gradient), B = 2
  (q = 1, where the audit is tight); D's canary is s(e₁ + e₂)/√2 in both blocks,
  D''s is s(e₁ − e₂)/√2: at u = v = e₁ their clipped gradients are exactly
  opposite along n = (e₂, e₂)/√2, with the full norm C shared by the blocks;
* the server reads each round's release g̃ off the submission (RLAvg at a
  tiny step: Sub = −η g̃ to first order).

``server="static"`` sends θ = (e₁, e₁) every round and scores Σ_t ⟨g̃_t, n⟩,
the likelihood-ratio test of the composed rounds (per-block clipping makes the
shift √2 larger). ``server="adaptive"`` sends θ = (e₁, e₁) with clip C, then
θ = (e₃, e₃), where the canary's gradient is zero, with clip 2C and twice the
noise (the same μ0): the second release is noise alone, seen through a tangent
space that still contains n, and the score ⟨g̃₁, n⟩/σ₁ − ⟨g̃₂, n⟩/σ₂ cancels
that noise exactly when the client drew it again.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
from torch import nn

from ..federated.client import ClientRecipe, ClientState
from ..federated import client_round
from ..federated.instructions import RoundInstructions
from ..manifolds import ManifoldParameter, Stiefel
from ..privacy import epsilon_spent
from .bounds import AuditResult, audit_scores

__all__ = ["TwoBlocks", "audit_client_rounds"]


class TwoBlocks(nn.Module):
    """Two blocks u, v ∈ St(3, 1); a record (a, b) ∈ R⁶ has loss −(aᵀu)² − (bᵀv)²."""

    def __init__(self) -> None:
        super().__init__()
        manifold = Stiefel(3, 1)
        e1 = torch.tensor([[1.0], [0.0], [0.0]], dtype=torch.float64)
        self.u = ManifoldParameter(e1.clone(), manifold)
        self.v = ManifoldParameter(e1.clone(), manifold)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return -(X[:, :3] @ self.u).squeeze(1) ** 2 - (X[:, 3:] @ self.v).squeeze(1) ** 2


def _identity(losses: torch.Tensor) -> torch.Tensor:
    return losses


def _records(sign: int, clip: float) -> torch.Tensor:
    s = math.sqrt(100 * clip)  # the canary's gradient s² per block, far above C: clipped to exactly C in all
    canary = s / math.sqrt(2) * torch.tensor([1.0, sign, 0.0], dtype=torch.float64)
    return torch.stack([torch.cat([canary, canary]), torch.zeros(6, dtype=torch.float64)])


def _point(axis: int) -> dict[str, torch.Tensor]:
    e = torch.zeros(3, 1, dtype=torch.float64)
    e[axis, 0] = 1.0
    return {"u": e, "v": e.clone()}


def _along_n(release: dict[str, torch.Tensor]) -> float:
    return float((release["u"][1, 0] + release["v"][1, 0]) / math.sqrt(2))


def audit_client_rounds(mu0: float = 1.0, *, server: str = "static", n_rounds: int = 4, n_runs: int = 500,
                        clip: float = 1.0, lr: float = 1e-7, delta: float = 1e-5, random_state: int | None = None,
                        confidence: float = 0.95) -> AuditResult:
    """Audit ``n_runs`` sequences of client rounds on D and as many on D' (see the module docstring).

    Parameters
    ----------
    mu0 : float, default=1.0
        Every round's per-step μ0 = 2C/(Bσ), as an honest server calibrates it.
    server : {"static", "adaptive"}, default="static"
        ``"adaptive"`` runs 2 rounds (θ and clip changed in between); ``n_rounds`` is then not used.
    n_rounds : int, default=4
        Rounds of one local step each (``"static"``).
    n_runs : int, default=500
        Sequences on each side.
    clip : float, default=1.0
        C of the first round.
    lr : float, default=1e-7
        The client's SGD rate (small: the release is read to first order).
    delta : float, default=1e-5
    random_state : int, optional
        Seeds run j's client with ``random_state + j``; None: OS entropy.
    confidence : float, default=0.95

    Returns
    -------
    AuditResult
    """
    if server not in ("static", "adaptive"):
        raise ValueError(f"The 'server' parameter must be 'static' or 'adaptive'. Got {server!r} instead.")
    rounds = [(0, clip)] * n_rounds if server == "static" else [(0, clip), (2, 2 * clip)]
    scores: dict[int, list[float]] = {1: [], -1: []}
    started = time.perf_counter()
    for side, offset in ((1, 0), (-1, n_runs)):
        records = (_records(side, clip),)
        for j in range(n_runs):
            seed = None if random_state is None else np.random.SeedSequence(random_state + offset + j)
            state, client = ClientState.fresh(seed), ClientRecipe(TwoBlocks(), _identity)
            along = []
            for axis, c in rounds:
                sigma = 2 * c / (2 * mu0)
                instructions = RoundInstructions(lr=lr, local_steps=1, batch_size=2, clip=c, noise_std=sigma,
                                                 sampling="fixed", aggregation="rlavg")
                [(submission, _)] = client_round.run_round(client, _point(axis), [records], [state], instructions)
                along.append(-_along_n(submission) / lr / sigma)  # ⟨g̃, n⟩ / σ
            score = sum(along) if server == "static" else along[0] - along[1]
            scores[side].append(-score)  # D's canary pulls the release against n
    steps = len(rounds)
    return audit_scores(scores[1], scores[-1], mu0=mu0, sample_rate=1.0, steps=steps, sampling="fixed",
                        delta=delta, epsilon_certified=epsilon_spent(mu0, 1.0, steps, delta), confidence=confidence,
                        threshold=0.0, seconds=time.perf_counter() - started)
