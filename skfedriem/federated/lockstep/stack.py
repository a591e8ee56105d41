"""The private steps of K clients as one computation over stacked parameters (clients in lockstep).

A round's simulated clients start from the same θ_t with the same
instructions; only their records, batches, noise and iterates differ. With
every trainable block stacked along a new leading client axis, ``(K, *shape)``,
their K forward and backward passes become one: a batch of shape
``(K, B, ...)`` goes through a model whose layers apply client k's
parameters to client k's records (one batched ``eigh`` for SPDNet instead of
K). Nothing is mixed across clients:

* every record's gradient, norm and clip factor is the one the client
  computes alone (no layer couples records, nor clients);
* each client's clipped sum is reduced on its own, with the code a lone
  client runs (:class:`~skfedriem.privacy.DenseGradients`);
* each client's noise is drawn from its own
  :class:`~skfedriem.privacy.SecretRandomness`, in the order its own step
  draws it (every block's noise, then the count of adaptive clipping), so
  a seeded client draws the same numbers in lockstep as alone, and an
  unseeded one keeps its full OS entropy on any device (the draws are made
  on the CPU by numpy and copied to the device; no device generator, no
  global generator);
* the tangent projections, the optimiser (element-wise, so client k's
  slice of a stacked SGD or Adam is client k's own optimiser) and the
  projection onto the manifold act per client.

Which modules can be stacked, and their stacked copy, is :mod:`skfedriem.federated.lockstep.modules`.

A stack's width is public: B under fixed-size sampling; under Poisson
sampling a width W computed from the clients' public sizes and rates, each
client's secret batch padded to it with weight-0 records and, where it is
larger, taken in further passes of the same width
(:mod:`skfedriem.federated.lockstep.widths`). Were the width the largest
batch drawn, rounding in batched kernels could carry that secret into the
other clients' releases.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from ...manifolds import ManifoldParameter, manifold_of
from ...privacy.layerwise import layerwise_per_sample_gradients
from ...privacy.mechanism import (DenseGradients, PerRecordGradients, check_count, clip_factors, noisy_clipped_count,
                        per_record_gradients, record_norms)
from ...privacy.per_sample import LossFn, per_sample_gradients, trainable_parameters
from ...privacy.randomness import SecretRandomness
from .modules import stacked_gradients_available, stacked_module, stacked_parameter, supports_stacking

__all__ = ["ClientStack", "StackedDenseGradients"]

#: How many of each client's records :meth:`ClientStack.verify` checks (with K ≥ 6 clients; K + 1 below).
CHECK_WIDTH = 6


class StackedDenseGradients(PerRecordGradients):
    """Per-record tangent gradients of K clients, ``(K, B, *shape)`` per block; each client reduced on its own.

    Parameters
    ----------
    grads : dict of str to torch.Tensor
        ``grads[name]`` has shape ``(K, B, *shape)``.
    """

    def __init__(self, grads: dict[str, torch.Tensor]) -> None:
        self.grads = grads

    def norms(self) -> torch.Tensor:
        """‖g_z‖ over all blocks, shape (K, B)."""
        return record_norms([g.flatten(start_dim=2) for g in self.grads.values()])

    def weighted_sum(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """Σ_z w_kz g_kz per client, shape ``(K, *shape)``: client k's sum is the lone client's sum of its records."""
        sums = [DenseGradients({name: g[k] for name, g in self.grads.items()}).weighted_sum(weights[k])
                for k in range(weights.shape[0])]
        return {name: torch.stack([s[name] for s in sums]) for name in self.grads}


def _one_hot(width: int, record: int, like: torch.Tensor) -> torch.Tensor:
    """Weights selecting one record of a batch of ``width`` (for every client of a stack when ``like`` is (K, B))."""
    weights = torch.zeros_like(like)
    weights[..., record] = 1.0
    return weights


def _close(stacked: torch.Tensor, alone: torch.Tensor, scale: float | None = None) -> bool:
    """Equal up to rounding at the dtype's resolution (√ε relative to ``scale``, by default the largest finite
    entry), with the same inf and NaN entries. A sum whose terms cancel is compared at its terms' scale: rounding
    is relative to them, not to what is left of their sum."""
    finite = torch.isfinite(alone)
    if stacked.shape != alone.shape or not torch.equal(finite, torch.isfinite(stacked)):
        return False
    if not (torch.equal(alone.isnan(), stacked.isnan()) and torch.equal(alone.isposinf(), stacked.isposinf())):
        return False
    if scale is None:
        scale = float(alone[finite].abs().max()) if bool(finite.any()) else 1.0
    resolution = math.sqrt(torch.finfo(alone.dtype).eps) if alone.dtype.is_floating_point else 0.0
    return torch.allclose(stacked[finite], alone[finite], rtol=resolution, atol=resolution * scale)


_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
         torch.float64: torch.int64}


def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit the same (their bit patterns: -0.0 is not 0.0, inf is not the largest float)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    bits = _BITS.get(a.dtype)
    if bits is None:
        return torch.equal(a, b)
    return torch.equal(a.contiguous().view(bits), b.contiguous().view(bits))


def _stacked_losses(loss_fn: LossFn):
    """``loss_fn`` for outputs and targets of shape (K, B, ...): the (K, B) per-record losses."""

    def losses(output: torch.Tensor, *targets: torch.Tensor) -> torch.Tensor:
        records = output.shape[:2]
        return loss_fn(output.flatten(0, 1), *(t.flatten(0, 1) for t in targets)).view(records)

    return losses


class ClientStack:
    """K clients' copies of a model's trainable blocks, stacked along a leading client axis, and their private step.

    Parameters
    ----------
    module : torch.nn.Module
        The clients' model (every client's is the same, from the same θ_t).
    n_clients : int
        K.

    Attributes
    ----------
    blocks : dict of str to torch.nn.Parameter
        Every trainable block, ``(K, *shape)``, tagged with its manifold.
    parameters : list of torch.nn.Parameter
        What the stacked optimiser steps, aligned index for index with
        ``module.parameters()`` (a frozen parameter is the module's own), so
        a client's optimiser state moves between the two.
    verified : bool
        Whether :meth:`verify` has passed (the ``torch.func`` route needs no check).

    Examples
    --------
    >>> import torch
    >>> from skfedriem.models import SPDNet
    >>> stack = ClientStack(SPDNet(6, 2, dims=(4,)), n_clients=3)
    >>> tuple(stack.blocks["features.1.weight"].shape)
    (3, 6, 4)
    """

    def __init__(self, module: nn.Module, n_clients: int) -> None:
        if not stacked_gradients_available(module):
            raise ValueError(f"{type(module).__name__} cannot be stacked (tied parameters, or per-record rules in "
                             "layers that do not declare supports_client_stacking): its clients run one by one.")
        self.module = module
        self.n_clients = int(n_clients)
        self.manifolds = {name: manifold_of(p) for name, p in trainable_parameters(module).items()}
        self.twin = stacked_module(module, n_clients) if supports_stacking(module) else None
        self.verified = self.twin is None
        if self.twin is not None:
            self.blocks = trainable_parameters(self.twin)
            self.parameters = list(self.twin.parameters())
        else:
            self.blocks = {name: stacked_parameter(p, n_clients) for name, p in trainable_parameters(module).items()}
            names = {id(p): name for name, p in module.named_parameters()}
            self.parameters = [self.blocks.get(names[id(p)], p) for p in module.parameters()]

    @torch.no_grad()
    def load(self, theta: dict[str, torch.Tensor]) -> None:
        """Every client's copy of every block := θ_t."""
        for name, block in self.blocks.items():
            block.copy_(theta[name].expand_as(block))

    @torch.no_grad()
    def project_(self) -> None:
        """Every client's manifold blocks := Π of themselves."""
        for block in self.blocks.values():
            if isinstance(block, ManifoldParameter):
                block.copy_(block.manifold.proj(block))

    def verify(self, loss_fn: LossFn, clients: list[tuple[torch.Tensor, ...]]) -> None:
        """Check, once, that each client's forward, per-record gradient norms and sums are a lone copy's, and that
        no client's depend on another's; else ValueError.

        The check runs on :data:`CHECK_WIDTH` of each client's records (K + 1
        for fewer clients: a width that is never K, so that a layer
        broadcasting one client's parameters over the record axis shows; and a
        fixed one, so that the check's cost grows with K, not K²), with each
        client's blocks moved apart by a fixed, public offset. Two comparisons: against a lone copy of each client, up
        to rounding at the dtype's resolution (a layer that computes something
        else); and, bit for bit, the other clients' results when the first's
        and the last's records and blocks change (a layer that mixes clients,
        however little: a share of 1e-6 of another client's value changes the
        bits). What it cannot see: a layer that behaves on these records and
        blocks and not on others. It leaves the blocks as they were and draws
        no randomness.

        Parameters
        ----------
        loss_fn : callable
        clients : list of tuple of torch.Tensor
            Each client's records (``(inputs, *targets)``).
        """
        if self.verified:
            return
        width = self.n_clients + 1 if self.n_clients < CHECK_WIDTH else CHECK_WIDTH
        batch = tuple(torch.stack([data[j][torch.arange(width) % data[j].shape[0]] for data in clients])
                      for j in range(len(clients[0])))
        saved = {name: block.detach().clone() for name, block in self.blocks.items()}
        try:
            with torch.no_grad():
                for name, block in self.blocks.items():
                    pattern = torch.linspace(-1, 1, block[0].numel(), dtype=block.dtype).view(block.shape[1:])
                    for k in range(self.n_clients):
                        block[k].add_(0.01 * (k + 1) * pattern.to(block.device))
            try:
                outputs, norms, sums = self._results(loss_fn, batch)
                gradients = self.per_record_gradients(loss_fn, batch)
            except RuntimeError as error:  # a layer that cannot take stacked parameters at all
                raise ValueError(f"{type(self.module).__name__} cannot run its clients in lockstep: its stacked "
                                 f"forward fails ({error}). Use lockstep=False.") from error
            # every record's gradient on its own: a layer that mixes a client's records changes the rows even where
            # their sum is unchanged, and a small block is compared at its own scale
            rows = [gradients.weighted_sum(_one_hot(width, z, norms)) for z in range(width)]
            for k in range(self.n_clients):
                lone = copy.deepcopy(self.module)
                with torch.no_grad():
                    for name, param in trainable_parameters(lone).items():
                        param.copy_(self.blocks[name][k])
                    lone_outputs = lone(batch[0][k])
                lone_gradients = per_record_gradients(lone, loss_fn, tuple(x[k] for x in batch))
                lone_sums = lone_gradients.weighted_sum(torch.ones(width, dtype=norms.dtype, device=norms.device))
                lone_rows = [lone_gradients.weighted_sum(_one_hot(width, z, norms[k])) for z in range(width)]
                checks = [("forward", outputs[k], lone_outputs, None),
                          ("gradient norms", norms[k], lone_gradients.norms(), None)]
                for name in lone_sums:
                    # a sum whose terms cancel is compared at its terms' scale, block by block: |Σ g_z| ≤ Σ ‖g_z‖
                    terms = sum(float(torch.linalg.vector_norm(row[name])) for row in lone_rows
                                if bool(torch.isfinite(row[name]).all()))
                    checks.append((f"gradient sum of {name!r}", sums[name][k], lone_sums[name], terms))
                    checks += [(f"record {z}'s gradient of {name!r}", rows[z][name][k], lone_rows[z][name], None)
                               for z in range(width)]
                for what, stacked, alone, scale in checks:
                    if not _close(stacked, alone, scale):
                        raise ValueError(
                            f"{type(self.module).__name__} cannot run its clients in lockstep: client {k}'s {what} "
                            "in the stack differs from a lone copy's (a layer that declares supports_client_stacking "
                            "mixes clients or records, or the loss is not per record). Use lockstep=False.")
            self._check_no_cross_talk(loss_fn, batch, (outputs, norms, sums))
        finally:
            self.load(saved)
        self.verified = True

    def _results(self, loss_fn: LossFn, batch: tuple[torch.Tensor, ...]) -> tuple:
        """The stack's forward outputs, per-record gradient norms and gradient sums on ``batch``."""
        with torch.no_grad():
            outputs = self._outputs(batch[0])
        gradients = self.per_record_gradients(loss_fn, batch)
        norms = gradients.norms()
        return outputs, norms, gradients.weighted_sum(torch.ones_like(norms))

    def _check_no_cross_talk(self, loss_fn: LossFn, batch: tuple[torch.Tensor, ...], results: tuple) -> None:
        """ValueError unless every other client's results stay bit for bit the same when one client's change."""
        outputs, norms, sums = results
        for changed in sorted({0, self.n_clients - 1}) if self.n_clients > 1 else ():
            moved = tuple(x.clone() for x in batch)
            for x in moved:
                x[changed] = x[changed].flip(0)
            saved = {name: block.detach().clone() for name, block in self.blocks.items()}
            with torch.no_grad():
                for block in self.blocks.values():
                    block[changed].mul_(1.5)
            try:
                new_outputs, new_norms, new_sums = self._results(loss_fn, moved)
            finally:
                self.load(saved)
            others = [k for k in range(self.n_clients) if k != changed]
            pairs = [("forward", outputs, new_outputs), ("gradient norms", norms, new_norms)]
            pairs += [(f"gradient sum of {name!r}", sums[name], new_sums[name]) for name in sums]
            for what, before, after in pairs:
                if not _identical(before[others], after[others]):
                    raise ValueError(f"{type(self.module).__name__} cannot run its clients in lockstep: the other "
                                     f"clients' {what} change when client {changed}'s records and parameters do (a "
                                     "layer that declares supports_client_stacking mixes clients). Use lockstep=False.")

    def _outputs(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.twin is not None:
            return self.twin(inputs)
        buffers = {name: b.detach() for name, b in self.module.named_buffers()}
        return torch.func.vmap(lambda weights, X: torch.func.functional_call(self.module, (weights, buffers), (X,)))(
            self.blocks, inputs)

    def _tangent(self, grads: dict[str, torch.Tensor], record_axes: int) -> dict[str, torch.Tensor]:
        """P_θk of each of client k's gradients (with ``record_axes`` axes of records after the client axis)."""
        out = {}
        for name, g in grads.items():
            block = self.blocks[name].detach()
            point = block.view(*block.shape[:1], *([1] * record_axes), *block.shape[1:])
            out[name] = self.manifolds[name].proju(point, g)
        return out

    def per_record_gradients(self, loss_fn: LossFn, batch: tuple[torch.Tensor, ...]) -> PerRecordGradients:
        """Every client's per-record tangent gradients, norms (K, B), by the route a lone client takes.

        Parameters
        ----------
        loss_fn : callable
        batch : tuple of torch.Tensor
            ``(K, B, ...)``: client k's records.

        Returns
        -------
        PerRecordGradients
            Norms of shape (K, B); weighted sums of shape ``(K, *shape)``.
        """
        if self.twin is not None:
            closed_form = getattr(self.twin, "per_sample_tangent_gradients", None)
            if callable(closed_form):
                return closed_form(*batch)
            of_loss = getattr(self.module, "per_record_tangent_gradients", None)
            tangent = of_loss(loss_fn, batch, record_dims=2, parameters=self.blocks) if callable(of_loss) else None
            if tangent is not None:
                return StackedDenseGradients(tangent)
            ambient = layerwise_per_sample_gradients(self.twin, _stacked_losses(loss_fn), batch, record_dims=2)
            if ambient is not None:
                return StackedDenseGradients(self._tangent(ambient, 1))
        ambient = per_sample_gradients(self.module, loss_fn, batch, stacked=self.blocks)
        return StackedDenseGradients(self._tangent(ambient, 1))

    def private_gradient(
        self,
        loss_fn: LossFn,
        batch: tuple[torch.Tensor, ...],
        *,
        clip: float,
        noise_std: float,
        denominator: float,
        randomness: list[SecretRandomness],
        count_noise_std: float = 0.0,
        counts: list[list[float]] | None = None,
        sizes: torch.Tensor | None = None,
        width: int | None = None,
    ) -> dict[str, torch.Tensor]:
        """Every client's g̃_k = P_θk((1/B) Σ_z clip_C(g_kz) + ξ_k), as :func:`~skfedriem.privacy.private_gradient`.

        Parameters
        ----------
        loss_fn : callable
            ``loss_fn(module(batch[0]), *batch[1:])`` -> per-record losses (B,).
        batch : tuple of torch.Tensor
            ``(K, B, ...)``: client k's records of this step; with ``sizes``,
            ``(K, P·W, ...)``, client k's ``sizes[k]`` records first, then padding.
        clip, noise_std, denominator : float
            C, σ and B (the expected batch under Poisson sampling), as for one client.
        randomness : list of SecretRandomness
            Client k's secret source of noise.
        count_noise_std : float, default=0.0
        counts : list of list of float, optional
            Client k's noisy counts (adaptive clipping), appended to after its noise.
        sizes : torch.Tensor of int, optional
            Poisson sampling: b_k, client k's number of records in its row
            (:func:`~skfedriem.federated.lockstep.widths.padded_picks`).
        width : int, optional
            W, the public width of each pass (with ``sizes``).

        Returns
        -------
        dict of str to torch.Tensor
            ``(K, *shape)`` per block.
        """
        passes = self._passes(batch, sizes, width)
        if math.isinf(clip) and noise_std == 0:
            return self._tangent(self._summed_gradients(loss_fn, passes, denominator), 0)
        sums, norms = self._clipped_sums(loss_fn, passes, clip)
        if counts is not None:
            check_count(count_noise_std, clip)
        noise: dict[str, list[torch.Tensor]] = {name: [] for name in sums}
        for k, source in enumerate(randomness):
            for name, block in self.blocks.items():
                if noise_std > 0:
                    noise[name].append(source.standard_normal(tuple(block.shape[1:]), block.dtype))
            if counts is not None:
                own = torch.cat([n[k] if real is None else n[k][real[k]] for n, (_, real) in zip(norms, passes)])
                counts[k].append(noisy_clipped_count(own, clip, count_noise_std, source))
        released = {}
        for name, total in sums.items():
            mean = total / denominator
            if noise_std > 0:
                mean = mean + noise_std * torch.stack(noise[name]).to(mean.device)
            released[name] = mean
        return self._tangent(released, 0)

    def _passes(self, batch: tuple[torch.Tensor, ...], sizes: torch.Tensor | None,
                width: int | None) -> list[tuple[tuple[torch.Tensor, ...], torch.Tensor | None]]:
        """The step's passes: each a ``(K, W, ...)`` batch and its (K, W) mask of real records (None: all real)."""
        if sizes is None:
            return [(batch, None)]
        sizes = sizes.to(batch[0].device)
        columns = torch.arange(width, device=batch[0].device)
        return [(tuple(x[:, start:start + width] for x in batch), columns < (sizes - start).unsqueeze(1))
                for start in range(0, batch[0].shape[1], width)]

    @staticmethod
    def _accumulate(totals: dict[str, torch.Tensor] | None, sums: dict[str, torch.Tensor],
                    real: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """Each client's running sums plus this pass's, where the pass holds any of its records (else its bits as
        they were: whether another client needed this pass never touches them)."""
        if totals is None:
            return sums
        present = real.any(dim=1)
        return {name: torch.where(present.view(-1, *[1] * (total.dim() - 1)), total + sums[name], total)
                for name, total in totals.items()}

    def _summed_gradients(self, loss_fn: LossFn, passes: list, denominator: float) -> dict[str, torch.Tensor]:
        """Without clipping or noise: the gradient of each client's summed loss over its records / B."""
        totals = None
        for chunk, real in passes:
            losses = _stacked_losses(loss_fn)(self._outputs(chunk[0]), *chunk[1:])
            if real is not None:
                losses = torch.where(real, losses, 0.0)
            grads = torch.autograd.grad(losses.sum() / denominator, list(self.blocks.values()))
            totals = self._accumulate(totals, dict(zip(self.blocks, grads)), real)
        return totals

    def _clipped_sums(self, loss_fn: LossFn, passes: list, clip: float) -> tuple[dict[str, torch.Tensor], list]:
        """Σ_z clip_C(g_kz) over client k's records, ``(K, *shape)`` per block, and each pass's (K, W) norms."""
        totals, norms = None, []
        for chunk, real in passes:
            gradients = self.per_record_gradients(loss_fn, chunk)
            norms.append(gradients.norms())
            factors = clip_factors(norms[-1], clip)
            if real is not None:  # a padded record adds exactly 0 (weighted_sum drops it)
                factors = torch.where(real, factors, 0.0)
            totals = self._accumulate(totals, gradients.weighted_sum(factors), real)
        return totals, norms
