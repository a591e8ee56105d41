"""The unit sphere S^{n-1} in R^n."""

from __future__ import annotations

import torch

from .base import Manifold, _max_abs

__all__ = ["Sphere"]


class Sphere(Manifold):
    """Unit sphere {x in R^n : ||x|| = 1} with the induced metric.

    Π(y) = y/||y||, P_x(z) = z − (xᵀz)x, d_M = n − 1. Exp, Log and the inverse
    retraction are closed form.

    Parameters
    ----------
    n : int
        Ambient dimension (n >= 2).

    Examples
    --------
    >>> import torch
    >>> S = Sphere(3)
    >>> S.proj(torch.tensor([3.0, 0.0, 4.0]))
    tensor([0.6000, 0.0000, 0.8000])
    """

    def __init__(self, n: int) -> None:
        if not isinstance(n, int) or n < 2:
            raise ValueError(f"The 'n' parameter of Sphere must be an int >= 2. Got {n!r} instead.")
        self.n = n
        self.shape = (n,)
        self.dim = n - 1
        self.ambient_dim = n

    def _repr_args(self) -> tuple:
        return (self.n,)

    def proj(self, Y: torch.Tensor) -> torch.Tensor:
        return Y / Y.norm(dim=-1, keepdim=True)

    def proju(self, X: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        return Z - (X * Z).sum(-1, keepdim=True) * X

    def inv_retr(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        # X + V = t Y with V ⟂ X gives t = 1 / <X, Y> (defined for <X, Y> > 0).
        return Y / (X * Y).sum(-1, keepdim=True) - X

    def exp(self, X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        theta = V.norm(dim=-1, keepdim=True)
        # sin(θ)/θ → 1 as θ → 0: use the series where θ is tiny.
        sinc = torch.where(theta > 1e-8, torch.sin(theta) / theta.clamp_min(1e-300), 1 - theta**2 / 6)
        return torch.cos(theta) * X + sinc * V

    def log(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        cos = (X * Y).sum(-1, keepdim=True).clamp(-1.0, 1.0)
        U = Y - cos * X
        theta = torch.acos(cos)
        unorm = U.norm(dim=-1, keepdim=True)
        scale = torch.where(unorm > 1e-12, theta / unorm.clamp_min(1e-300), 1 + theta**2 / 6)
        return scale * U

    def _check_point_reason(self, X: torch.Tensor, atol: float) -> str | None:
        err = _max_abs(X.norm(dim=-1) - 1)
        return None if err <= atol else f"| ||x|| - 1 | = {err:.3g} > atol = {atol:g}"
