"""Deliberately broken mechanisms, to show that an audit catches them.

An audit that never fails proves nothing. These context managers break the
private step in the ways a bug or an attack would, *while the server and the
accountant still believe the run is private*; an audit run inside them must
report a lower bound above the certified ε. They patch skfedriem's own
modules for the duration of the ``with`` block only and are not thread-safe:
never use them outside an audit. They break the one private step
(:func:`~skfedriem.privacy.mechanisms.mechanism.private_step`) or the one round routine
(:func:`~skfedriem.federated.client_round.run_round`), which lone clients,
clients in lockstep and deployed sites all run.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import numpy as np
import torch

from ..federated import client_round as round_module
from ..federated.client import ClientState
from ..privacy import PrivacyAccountant, WholeRunAccounting
from ..privacy.mechanisms import mechanism as mechanism_module
from ..privacy.per_record.gradients import StackedDenseGradients, dense_rows, record_norms
from ..federated.distributed_server import DistributedServer
from ..privacy.mechanisms import discrete as discrete_module
from ..privacy.mechanisms import distributed as distributed_module
from ..privacy.mechanisms.sampling import make_sampler
from ..privacy.mechanisms.step_mechanism import GAUSSIAN_STEPS
from ..privacy.mechanisms.units import RECORD

__all__ = ["excess_removed_whatever_dropped", "missing_share_counted", "noise_projected_alone", "personal_noise_scaled", "noise_scaled", "noise_stream_restarted",
           "per_block_clipping", "rounding_past_the_bound", "shares_from_a_public_seed", "shares_sized_by_clients",
           "site_charges_the_servers_numbers", "site_drops_invalid_records", "site_ignores_the_planned_size",
           "subjects_charged_as_records", "subjects_clipped_by_record"]


@contextmanager
def _patched(*patches) -> Iterator[None]:
    """Every ``(target, name, value)`` patched inside the block."""
    with contextlib.ExitStack() as stack:
        for target, name, value in patches:
            stack.enter_context(mock.patch.object(target, name, value))
        yield


@contextmanager
def noise_scaled(factor: float) -> Iterator[None]:
    """Clients add ``factor`` × σ of noise while the server and the accountant charge σ (0: no noise).

    Parameters
    ----------
    factor : float
        Multiplier of the clients' noise.

    Yields
    ------
    None
        Inside the ``with`` block the mutation is active.
    """
    honest = mechanism_module.draw_noise

    def miscalibrated(randomness, points):
        return {name: factor * noise for name, noise in honest(randomness, points).items()}

    with _patched((mechanism_module, "draw_noise", miscalibrated)):
        yield


@contextmanager
def personal_noise_scaled(factor: float) -> Iterator[None]:
    """A client's release of its own mean (``recentre="client"``) adds ``factor`` × σ while it is charged at σ.

    Parameters
    ----------
    factor : float
        Multiplier of the release's noise std.

    Yields
    ------
    None
    """
    from ..classification._recentring import PersonalMeans

    honest = PersonalMeans.noise_std

    def miscalibrated(self, units: int) -> float:
        return factor * honest(self, units)

    with _patched((PersonalMeans, "noise_std", miscalibrated)):
        yield


def _old_noisy_release(copies, sums, *, denominator, noise_std, randomness):
    points = copies.points()
    out = {name: total / denominator for name, total in sums.items()}
    if noise_std > 0:
        drawn = [mechanism_module.draw_noise(source, {name: point[k] for name, point in points.items()})
                 for k, source in enumerate(randomness)]
        out = {name: mean + copies.manifolds[name].proju(
            points[name], noise_std * torch.stack([d[name] for d in drawn]).to(mean.device))
            for name, mean in out.items()}
    return out


@contextmanager
def noise_projected_alone() -> Iterator[None]:
    """The step before the fix: ḡ + P_θ(ξ) instead of P_θ(ḡ + ξ).

    The same law when θ is on the manifold; not private when a server sends a
    θ off it, because P_θ can shrink the noise where a clipped gradient keeps
    its norm.
    """
    with _patched((mechanism_module, "noisy_release", _old_noisy_release)):
        yield


@dataclasses.dataclass(frozen=True)
class _ServersNumbers:
    """The steps of a round as the pre-fix client took them: charged from the instructions, run from their floor."""

    n_records: int
    batch_size: float
    local_steps: int
    clip: float
    noise_std: float
    sampling: str

    private = property(lambda self: self.noise_std > 0)
    sample_rate = property(lambda self: min(1.0, self.batch_size / self.n_records))
    count_noise_std = property(lambda self: 0.0)  # the pre-fix client released no count
    unit = property(lambda self: RECORD)  # and protected records only
    encoding = property(lambda self: None)  # and added its noise locally
    mechanism = property(lambda self: GAUSSIAN_STEPS)
    denominator = property(lambda self: float(int(self.batch_size)))  # what the sampler really divides by
    mu0 = property(lambda self: 2 * self.clip / (self.batch_size * self.noise_std) if self.private else float("inf"))

    def sampler(self):
        return make_sampler(self.sampling, self.n_records, int(self.batch_size))

    def release(self) -> PrivacyAccountant:
        ledger = PrivacyAccountant()
        ledger.step(mu0=self.mu0, sample_rate=min(1.0, self.batch_size / self.n_records),
                    num_steps=int(self.local_steps), sampling=self.sampling)
        return ledger

    local_release = deviating_release = release  # local noise: the same against anyone


def _servers_numbers(instructions, n_records, module, unit=RECORD):
    return _ServersNumbers(n_records, instructions.batch_size, instructions.local_steps, instructions.clip,
                           instructions.noise_std, instructions.sampling)


@contextmanager
def site_charges_the_servers_numbers() -> Iterator[None]:
    """Clients charge μ0 = 2C/(Bσ) and q = B/m with the B the server sent, and run batches of ⌊B⌋ (the pre-fix site).

    With B = 1.999 such a client charged a per-step μ0 of 2C/(1.999σ) and ran
    2C/σ: half of what it spent. The malicious-server property test
    (``tests/flower/test_malicious_server.py``) must catch it.
    """
    from ..flower.protocol import client_app as _client_app

    with _patched((round_module, "step_plan", _servers_numbers), (_client_app, "step_plan", _servers_numbers)):
        yield


@contextmanager
def site_drops_invalid_records() -> Iterator[None]:
    """A deployed site leaves out the records that fail validation in the run's dtype (the pre-fix site).

    Its record count, which it reports for free, then depends on the run
    configuration: two queries tell a server how many of its records are
    near-singular. The malicious-server property test must catch it.
    """
    from ..base import FederatedEstimatorMixin

    honest = FederatedEstimatorMixin.prepare_records

    def dropping(self, X, y=None, *, classes=None, site=False):
        if not site:
            return honest(self, X, y, classes=classes)
        X = np.asarray(X)
        kept = np.array([self._is_valid_record(X[i : i + 1]) for i in range(len(X))], dtype=bool)
        inputs = torch.from_numpy(np.ascontiguousarray(self._check_records(X[kept])))
        if y is None:
            return (inputs,)
        return inputs, self._encode_targets(np.asarray(y)[kept], classes, ignore_unknown=True)

    with _patched((FederatedEstimatorMixin, "prepare_records", dropping)):
        yield


@contextmanager
def site_ignores_the_planned_size() -> Iterator[None]:
    """A client runs a round whatever size the server planned it for (the pre-fix site that restarted smaller).

    The site's own ledger still charges what it runs; the server's certificate,
    computed for the planned size, does not cover it.
    """
    from ..flower.protocol import client_app as _client_app

    honest = round_module.step_plan

    def ignoring(instructions, n_records, module, unit=RECORD):
        return honest(dataclasses.replace(instructions, planned_records=0), n_records, module, unit)

    with _patched((round_module, "step_plan", ignoring), (_client_app, "step_plan", ignoring)):
        yield


@contextmanager
def noise_stream_restarted() -> Iterator[None]:
    """Every round, a client draws its batches and noise from where its stream stood at its first round.

    Each round on its own is calibrated and charged as usual; but a server that
    changes θ or the clip between two rounds then sees the same noise twice and
    subtracts it. In-process clients only.
    """
    honest = round_module.run_round

    def restarted(recipe, theta, clients, states, instructions):
        return honest(recipe, theta, clients, [ClientState.from_bytes(s.to_bytes()) for s in states], instructions)

    with _patched((round_module, "run_round", restarted)):
        yield


def _blocks_clipped_alone(gradients, clip: float, real) -> dict[str, torch.Tensor]:
    """Each block's per-record gradients clipped to C on its own (the whole gradient then reaches C √(blocks))."""
    rows = dense_rows(gradients)
    if rows is None:
        raise ValueError("The per-block clipping mutation needs dense per-record gradients.")
    sums = {}
    for name, g in rows.items():
        factors = mechanism_module.clip_factors(record_norms(g.reshape(*g.shape[:2], -1)), clip)
        factors = factors if real is None else torch.where(real, factors, 0.0)
        sums[name] = StackedDenseGradients({name: g}).weighted_sum(factors)[name]
    return sums


def _per_block_clipped_sums(copies, loss_fn, passes, clip, segments=None):
    if segments is not None:
        raise ValueError("The per-block clipping mutation clips records (subject-level steps are not audited here).")
    totals, kept = None, []
    for batch, real in passes:
        gradients = copies.per_record_gradients(loss_fn, batch)
        sums = _blocks_clipped_alone(gradients, clip, real)
        totals = sums if totals is None else {name: totals[name] + sums[name] for name in sums}
        kept.append(mechanism_module.real_records(gradients.norms(), real))
    return totals, [torch.cat(own) for own in zip(*kept)]


@contextmanager
def per_block_clipping() -> Iterator[None]:
    """Each parameter block's per-record gradient is clipped to C separately instead of all blocks jointly.

    The accountant assumes the whole per-record gradient has norm at most C;
    with k blocks it reaches C√k, and the step's sensitivity grows with it.
    """
    with _patched((mechanism_module, "clipped_sums", _per_block_clipped_sums)):
        yield


@contextmanager
def subjects_clipped_by_record() -> Iterator[None]:
    """A subject-level step clips each of its records' gradients instead of the subject's mean gradient.

    The step still divides by the number of subjects sampled and is charged as
    subject-level, but a subject of k records then moves its clipped sum by up
    to 2kC, not 2C: its sensitivity grows with the subject's number of trials.
    """
    honest = mechanism_module.clipped_sums

    def by_record(copies, loss_fn, passes, clip, segments=None):
        return honest(copies, loss_fn, passes, clip, None)

    with _patched((mechanism_module, "clipped_sums", by_record)):
        yield


@contextmanager
def subjects_charged_as_records() -> Iterator[None]:
    """Runs of k records a subject (``records_per_subject``) are calibrated and charged as if a subject were one record.

    The step is the honest one: each subject still gives k records, each
    clipped alone; but the noise is calibrated for one record and the ledger
    forgets the group, so a subject whose k records are all sampled moves the
    step by k clipped gradients while the run reports ε for one.
    """
    honest_step, honest_calibrate = PrivacyAccountant.step, WholeRunAccounting.calibrate

    def step(self, *args, group_size: int = 1, **kw):
        return honest_step(self, *args, **kw)

    def calibrate(self, *args, group_size: int = 1, **kw):
        return honest_calibrate(self, *args, **kw)

    with _patched((PrivacyAccountant, "step", step), (WholeRunAccounting, "calibrate", calibrate)):
        yield


@contextmanager
def shares_sized_by_clients() -> Iterator[None]:
    """Distributed noise: every share sized V / (2K), as if all K clients were honest, while the ledger charges the
    K − t honest shares with V: with t colluders the honest noise falls to (K − t) / K of what is charged."""
    honest = discrete_module.plan_encoding

    def by_clients(dimension, clip, total_batch, clients, colluders, calibrate, count_share=0.0, dropouts=0):
        encoding = honest(dimension, clip, total_batch, clients, colluders, calibrate, count_share, dropouts)
        return dataclasses.replace(encoding, share=encoding.share * (clients - colluders) / clients)

    with _patched((discrete_module, "plan_encoding", by_clients)):
        yield


@contextmanager
def shares_from_a_public_seed() -> Iterator[None]:
    """Distributed noise: every client draws its share from the round's public rotation seed, which the server
    knows and can regenerate (the rounding still uses its secret randomness)."""
    honest = distributed_module.encode_clients

    def seeded(rows, encoding, clip, randomness, counts=None):
        # the releases without a share (Poisson(1e-300) is 0), plus the share every client draws from the public seed
        without = honest(rows, dataclasses.replace(encoding, share=1e-300), clip, randomness, counts)
        rng = np.random.default_rng(encoding.rotation_seed)
        public = rng.poisson(encoding.share, encoding.length) - rng.poisson(encoding.share, encoding.length)
        return [np.mod(release + public, encoding.modulus) for release in without]

    with _patched((distributed_module, "encode_clients", seeded)):
        yield


@contextmanager
def missing_share_counted() -> Iterator[None]:
    """Distributed noise: the server decodes a sum that fewer than K − t clients answered, as if every missing
    client's share were in it."""
    honest = DistributedServer.apply

    def counted(self, theta, releases, denominator, encoding, lr, excess=None):
        present = dataclasses.replace(encoding, colluders=encoding.clients - max(len(releases), 1), dropouts=0)
        return honest(self, theta, releases, denominator, present, lr)  # any excess left in

    with _patched((DistributedServer, "apply", counted)):
        yield


@contextmanager
def excess_removed_whatever_dropped() -> Iterator[None]:
    """Distributed noise with a dropout allowance: the server takes every answering client's excess out of the sum,
    down to the share of a round no client missed, however many did: the K − t − j honest shares of a round j
    clients missed are left with λ_0 each, (K − t − j) / (K − t) of the noise charged."""
    with _patched((discrete_module.DistributedEncoding, "level", lambda self, dropped: 0)):
        yield


@contextmanager
def rounding_past_the_bound() -> Iterator[None]:
    """Distributed noise: randomized rounding kept on the first try, whatever its norm (no conditioning), while the
    ledger charges the bound R."""

    def unconditional(scaled, bound, randomness):
        floor = np.floor(scaled)
        draws = np.stack([source.uniform(scaled[0].size).reshape(scaled.shape[1:]) for source in randomness])
        return (floor + (draws < scaled - floor)).astype(np.int64)

    with _patched((discrete_module, "_conditional_round", unconditional)):
        yield
