"""A new parameter geometry in one file: the oblique manifold, n × p matrices whose columns have unit norm.

It is a product of p spheres (a classifier's class directions, a dictionary's atoms). A parameter tagged
``ManifoldParameter(W, Oblique(n, p))`` is then stepped privately (its per-record gradients projected to the tangent
space, clipped, noised in the tangent space), aggregated by every rule and checked on receipt: nothing is registered,
the private step and the server read the geometry from the parameter.
"""

from __future__ import annotations

import torch

from skfedriem.manifolds import Manifold


class Oblique(Manifold):
    """{X in R^(n × p) : ||X[:, j]|| = 1 for every column j}, with the induced metric.

    Π(Y) normalises each column, P_X(Z) = Z − X diag(diag(XᵀZ)), d_M = (n − 1) p.

    Parameters
    ----------
    n : int
        Rows (n >= 2).
    p : int
        Columns (p >= 1).
    """

    def __init__(self, n: int, p: int) -> None:
        if not isinstance(n, int) or not isinstance(p, int) or n < 2 or p < 1:
            raise ValueError(f"Oblique needs ints n >= 2 and p >= 1. Got n={n!r}, p={p!r} instead.")
        self.n, self.p = n, p
        self.shape = (n, p)
        self.dim = (n - 1) * p
        self.ambient_dim = n * p

    def _repr_args(self) -> tuple:
        return (self.n, self.p)

    def proj(self, Y: torch.Tensor) -> torch.Tensor:
        return Y / Y.norm(dim=-2, keepdim=True)

    def proju(self, X: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        return Z - (X * Z).sum(-2, keepdim=True) * X

    # Exp, Log and the inverse retraction, column by column as on the sphere: only the baseline aggregations
    # ("retavg", "kfavg") need them.
    def inv_retr(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        return Y / (X * Y).sum(-2, keepdim=True) - X

    def exp(self, X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        theta = V.norm(dim=-2, keepdim=True)
        sinc = torch.where(theta > 1e-8, torch.sin(theta) / theta.clamp_min(1e-300), 1 - theta**2 / 6)
        return torch.cos(theta) * X + sinc * V

    def log(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        cos = (X * Y).sum(-2, keepdim=True).clamp(-1.0, 1.0)
        U = Y - cos * X
        theta, norm = torch.acos(cos), U.norm(dim=-2, keepdim=True)
        return torch.where(norm > 1e-12, theta / norm.clamp_min(1e-300), 1 + theta**2 / 6) * U

    def _check_point_reason(self, X: torch.Tensor, atol: float) -> str | None:
        error = float((X.norm(dim=-2) - 1).abs().max())
        return None if error <= atol else f"a column has | ||x|| - 1 | = {error:.3g} > atol = {atol:g}"
