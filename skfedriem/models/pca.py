"""The PCA objective as a torch module: one subspace parameter, loss −‖proj x‖²."""

from __future__ import annotations

import torch
from torch import nn

from ..manifolds import Grassmann, ManifoldParameter, Stiefel
from ..privacy.per_record.capabilities import ModelCapabilities
from ..privacy.per_record.gradients import PerRecordGradients, record_norms

__all__ = ["PCAProjector"]


class PCAProjector(nn.Module):
    """Subspace parameter whose forward pass returns each record's PCA loss.

    ``manifold="grassmann"``: a projector P on Gr(n, p), loss −xᵀPx.
    ``manifold="stiefel"``: a basis U on St(n, p), loss −‖Uᵀx‖².
    Minimising the mean loss finds the top-p eigenspace of the second moment.

    The per-record tangent gradients are closed form, provided by
    :meth:`per_sample_tangent_gradients` so the private step skips autograd and
    the per-record projections (B n³ work for Grassmann). Clients in lockstep
    stack the parameter as (K, n, n) or (K, n, p) and the records as (K, B, n).

    Parameters
    ----------
    n_features : int
    n_components : int
    manifold : {"grassmann", "stiefel"}
    generator : torch.Generator, optional
        Draws the (data-independent) initial point.
    dtype : torch.dtype, default=torch.float64
    basis : torch.Tensor of shape (n_features, n_components), optional
        A public initial subspace instead of a random one (its nearest
        orthonormal basis is used).
    """


    def __init__(
        self,
        n_features: int,
        n_components: int,
        manifold: str = "grassmann",
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float64,
        basis: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        if manifold == "grassmann":
            M = Grassmann(n_features, n_components)
        elif manifold == "stiefel":
            M = Stiefel(n_features, n_components)
        else:
            raise ValueError(f"The 'manifold' parameter must be 'grassmann' or 'stiefel'. Got {manifold!r} instead.")
        self.kind = manifold
        if basis is None:
            point = M.random_point(generator=generator, dtype=dtype)
        else:
            U = Stiefel(n_features, n_components).proj(basis.to(dtype))
            point = U @ U.T if manifold == "grassmann" else U
        self.weight = ManifoldParameter(point, M)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        if self.kind == "grassmann":
            return -((X @ self.weight) * X).sum(-1)
        return -(X @ self.weight).pow(2).sum(-1)

    def per_sample_tangent_gradients(self, X: torch.Tensor) -> PerRecordGradients:
        """P_θ of each record's gradient, in factored (rank <= 2) form.

        Grassmann: with a = Px and b = x − a, P_P(−x xᵀ) = −(a bᵀ + b aᵀ), of
        norm √(2 ‖a‖² ‖b‖² + 2 (a·b)²) (= √2 ‖a‖ ‖b‖ on the manifold, where a ⟂ b).
        Stiefel: with c = Uᵀx, P_U(−2 x cᵀ) = −2 (x − U c) cᵀ, of norm
        2 ‖x − U c‖ ‖c‖. Both identities hold for any symmetric P and any U, so
        the clipping stays exact even at a point the server sent off the
        manifold. Norms and weighted sums cost O(B n p) instead of the O(B n³)
        of projecting B dense matrices.
        """
        return _PCAGradients(self.kind, X, self.weight.detach())

    def _tangent_gradients(self, loss_fn, batch: tuple[torch.Tensor, ...], *, record_dims: int = 1,
                           parameters: dict[str, torch.Tensor] | None = None) -> PerRecordGradients:
        """The closed form as the private step reads it: records ``(*records, n)``, W its own or ``parameters``'."""
        W = (parameters or {}).get("weight", self.weight).detach()
        return _PCAGradients(self.kind, batch[0], W)

    #: Stacks (client k's point on its records), with every record's tangent gradient in closed form.
    capabilities = ModelCapabilities(tangent_gradients=_tangent_gradients, stacks=True)

    def components(self) -> torch.Tensor:
        """Orthonormal basis of the learnt subspace, shape (n_components, n_features)."""
        W = self.weight.detach()
        if self.kind == "grassmann":
            return self.weight.manifold.basis(W).flip(-1).T
        return W.T


class _PCAGradients(PerRecordGradients):
    """Per-record tangent gradients −(a bᵀ + b aᵀ) (Grassmann) or −2 r cᵀ (Stiefel).

    Records (B, n) and a point (n, n) or (n, p); or, for K clients in lockstep, (K, B, n) and (K, ...): norms
    are then (K, B) and weighted sums (K, ...), each client's computed as it would be alone.
    """

    def __init__(self, kind: str, X: torch.Tensor, W: torch.Tensor) -> None:
        self.kind = kind
        if kind == "grassmann":
            self.left = X @ W  # a = Px
            self.right = X - self.left  # b = (I − P)x
        else:
            c = X @ W
            self.left = X - c @ W.transpose(-1, -2)  # r = (I − UUᵀ)x
            self.right = c

    def norms(self) -> torch.Tensor:
        product = record_norms(self.left) * record_norms(self.right)
        if self.kind == "grassmann":  # √2 ‖a‖ ‖b‖ √(1 + cos²(a, b)), without squaring large norms
            cosine = (self.left * self.right).sum(-1) / product
            return 2**0.5 * product * (1 + torch.where(product > 0, cosine, 0.0) ** 2).sqrt()
        return 2.0 * product

    def weighted_sum(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        if weights.dim() > 1:  # clients in lockstep: each client's sum as it computes it alone
            return {"weight": torch.stack([_PCAGradients._from(self.kind, self.left[k], self.right[k])
                                           .weighted_sum(weights[k])["weight"] for k in range(weights.shape[0])])}
        left, right = self.left, self.right
        kept = weights != 0
        if not bool(kept.all()):  # a dropped record may hold inf or NaN
            weights, left, right = weights[kept], left[kept], right[kept]
        weighted = left * weights.to(left.dtype).unsqueeze(1)
        # a product w·a_i that is subnormal keeps a few bits; times a huge b it could carry the record to nearly 2C:
        # such a record weighs 0 (inside the clip ball: the sensitivity only shrinks)
        subnormal = ((weighted != 0) & (weighted.abs() < torch.finfo(weighted.dtype).tiny)).any(dim=1)
        if bool(subnormal.any()):
            weighted = torch.where(subnormal.unsqueeze(1), 0.0, weighted)
        if self.kind == "grassmann":
            ab = weighted.T @ right
            return {"weight": -(ab + ab.T)}
        return {"weight": -2 * weighted.T @ right}

    def scaled(self, factors: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every record's f_z g_z in closed form, ``(..., B, n, n)`` or ``(..., B, n, p)`` (records of any leading
        axes, K clients' too), each exactly what :meth:`weighted_sum` computes for that record alone."""
        f = factors.to(self.left.dtype)
        kept = (f != 0) & (f.abs() >= torch.finfo(f.dtype).tiny)
        weighted = torch.where(kept.unsqueeze(-1), self.left * f.unsqueeze(-1), 0.0)
        subnormal = ((weighted != 0) & (weighted.abs() < torch.finfo(weighted.dtype).tiny)).any(dim=-1)
        kept = kept & ~subnormal  # as in weighted_sum: such a record weighs 0
        right = torch.where(kept.unsqueeze(-1), self.right, 0.0)  # a dropped record may hold inf or NaN
        weighted = torch.where(kept.unsqueeze(-1), weighted, 0.0)
        outer = weighted.unsqueeze(-1) * right.unsqueeze(-2)
        return {"weight": -(outer + outer.transpose(-1, -2)) if self.kind == "grassmann" else -2 * outer}

    @classmethod
    def _from(cls, kind: str, left: torch.Tensor, right: torch.Tensor) -> _PCAGradients:
        gradients = cls.__new__(cls)
        gradients.kind, gradients.left, gradients.right = kind, left, right
        return gradients
