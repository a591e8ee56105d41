"""An audit of distributed noise: K clients' one-step rounds, the server's decoded sum, and t colluders' shares.

The rounds run the clients' real code (:func:`~skfedriem.federated.client_round.run_round`
with a round's :class:`~skfedriem.privacy.mechanisms.discrete.DistributedEncoding`:
per-record gradients, clipping, rotation, rounding, the share) and the
server's (:class:`~skfedriem.federated.distributed_server.DistributedServer`:
the threshold of K − t answers, the sum, its decoding), on the two-block model
of :mod:`skfedriem.audit.client_rounds`:

* client 0 holds the canary and a zero record (B = 2, q = 1): on D the canary
  is s(e₁ + e₂)/√2 in both blocks, on D' s(e₁ − e₂)/√2, whose clipped
  gradients at θ = (e₁, e₁) are opposite along n = (e₂, e₂)/√2;
* every other client holds two zero records (zero gradients), so a
  colluder's release is its share, which the auditor subtracts from the sum;
  ``dropped`` honest clients never answer (with a dropout allowance, the
  server takes the answering clients' excess above the round's level out of
  the sum, and the auditor the colluders' own remaining release);
* the auditor (the server) scores the decoded sum along n, summed over the
  rounds it applied (a round the server discards reveals nothing: score 0);
  with ``regenerate=True`` it first subtracts the shares an honest client
  would draw from the round's public seed (harmless when the shares are
  secret, fatal when they are not).

The encoding's honest sum is calibrated to the Gaussian-equivalent
μ0 = Δ2 / √V; the certificate is the Skellam ledger of that V (Rényi DP),
the lower bound the Gaussian family's (:func:`~skfedriem.audit.bounds.audit_scores`).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from ..federated import client_round
from ..federated.client import ClientRecipe, ClientState
from ..federated.distributed_server import DistributedServer
from ..federated.instructions import ENCODED_RELEASE, EXCESS_NOISE, RoundInstructions
from ..privacy import PrivacyAccountant
from ..privacy.mechanisms import discrete as discrete_module
from ..privacy.mechanisms.discrete import decode_sum, remove_excess, sum_releases
from .bounds import AuditResult, audit_scores
from .client_rounds import TwoBlocks, _identity, _point, _records

__all__ = ["audit_distributed_rounds"]


def _shares_from_seed(encoding) -> np.ndarray:
    """The share a client would draw from the round's public seed (what ``regenerate`` subtracts)."""
    rng = np.random.default_rng(encoding.rotation_seed)
    return rng.poisson(encoding.share, encoding.length) - rng.poisson(encoding.share, encoding.length)


def _along_n(decoded: torch.Tensor) -> float:
    """The decoded sum along n = (e₂, e₂)/√2 (u's coordinates first, then v's)."""
    return float((decoded[1] + decoded[4]) / math.sqrt(2))


def _run_score(side: int, encoding, seed: np.random.SeedSequence, answering: int, colluders: int, n_rounds: int,
               regenerate: bool, clip: float) -> float:
    """One run's score: the decoded sums (less the colluders' shares) along −n, over the rounds the server applied."""
    seeds = seed.spawn(answering + 1)
    public = np.random.default_rng(seeds[-1])
    states = [ClientState.fresh(s) for s in seeds[:answering]]
    server = DistributedServer(TwoBlocks(), "sgd")
    score = 0.0
    for _ in range(n_rounds):
        round_encoding = encoding.with_seed(int(public.integers(2 ** 62)))
        instructions = RoundInstructions(lr=1e-7, local_steps=1, batch_size=2, clip=clip, noise_std=0.0,
                                         sampling="fixed", aggregation="projavg", encoding=round_encoding)
        releases, excess = [], []
        for k in range(answering):
            records = _records(side, clip) if k == 0 else torch.zeros(2, 6, dtype=torch.float64)
            [(reply, _)] = client_round.run_round(ClientRecipe(TwoBlocks(), _identity), _point(0), [(records,)],
                                                  [states[k]], instructions)
            releases.append(reply[ENCODED_RELEASE])
            if EXCESS_NOISE in reply:
                excess.append(reply[EXCESS_NOISE])
        kept = excess or None
        if server.apply(_point(0), releases, 2.0 * answering, round_encoding, 0.0, kept)[0] is not None:
            continue  # discarded: secure aggregation reveals nothing
        missing = round_encoding.clients - answering
        # the colluders' releases, less what the server took out of them, are their shares
        known = [r.numpy() if kept is None else remove_excess(r.numpy(), [e.numpy()], round_encoding, missing)
                 for r, e in zip(releases[1:colluders + 1], (kept or releases)[1:colluders + 1])]
        if regenerate:
            known += [_shares_from_seed(round_encoding)] * (answering - colluders)
        total = server.summed(releases, round_encoding, kept)
        if total is None:  # a server that decoded a sum short of its honest shares (a mutation) learned it whole
            total = sum_releases([r.numpy() for r in releases], round_encoding)
        residual = np.mod(total - sum_releases(known, round_encoding), round_encoding.modulus)
        decoded, _ = decode_sum(residual, round_encoding)
        score -= _along_n(decoded)  # D's canary pulls the sum against n
    return score


def audit_distributed_rounds(mu0: float = 1.4, *, clients: int = 6, colluders: int = 3, dropped: int = 0,
                             dropouts: int = 0, n_rounds: int = 2, n_runs: int = 300, regenerate: bool = False, clip: float = 1.0,
                             delta: float = 1e-5, random_state: int | None = None,
                             confidence: float = 0.95) -> AuditResult:
    """Audit ``n_runs`` runs of ``n_rounds`` distributed rounds on D and as many on D' (module docstring).

    Parameters
    ----------
    mu0 : float, default=1.4
        Δ2 / √V of the honest shares' sum, a round (the calibration).
    clients : int, default=6
        K.
    colluders : int, default=3
        t: the encoding's, and how many clients (1 .. t) collude: the auditor
        subtracts their shares.
    dropped : int, default=0
        Honest clients (the last ones) that never answer.
    dropouts : int, default=0
        d, the encoding's dropout allowance.
    n_rounds : int, default=2
    n_runs : int, default=300
    regenerate : bool, default=False
        Also subtract the shares regenerated from each round's public seed.
    clip : float, default=1.0
    delta : float, default=1e-5
    random_state : int, optional
        Seeds run j's clients and public seeds with ``random_state + j``; None: OS entropy.
    confidence : float, default=0.95

    Returns
    -------
    AuditResult
    """
    if not 0 <= dropped <= clients - colluders - 1:
        raise ValueError(f"The 'dropped' parameter must leave client 0 and the colluders answering: in [0, "
                         f"{clients - colluders - 1}]. Got {dropped!r} instead.")
    started = time.perf_counter()
    target = {}

    def calibrate(l2: float, l1: float) -> float:
        target.update(variance=(l2 / mu0) ** 2, l2=l2, l1=l1)
        return target["variance"]

    encoding = discrete_module.plan_encoding(6, clip, 2 * clients, clients, colluders, calibrate, dropouts=dropouts)
    scores: dict[int, list[float]] = {1: [], -1: []}
    for side, offset in ((1, 0), (-1, n_runs)):
        for j in range(n_runs):
            seed = np.random.SeedSequence() if random_state is None else np.random.SeedSequence(
                random_state + offset + j)
            scores[side].append(_run_score(side, encoding, seed, clients - dropped, colluders, n_rounds, regenerate,
                                           clip))
    ledger = PrivacyAccountant()
    ledger.step(mu0=mu0, sample_rate=1.0, num_steps=n_rounds,
                skellam=(target["variance"], target["l2"], target["l1"]))
    return audit_scores(scores[1], scores[-1], mu0=mu0, sample_rate=1.0, steps=n_rounds, sampling="fixed",
                        delta=delta, epsilon_certified=ledger.get_epsilon(delta), confidence=confidence,
                        threshold=0.0, seconds=time.perf_counter() - started)
