"""A new parameter geometry in one file: the oblique manifold, n × p matrices whose columns have unit norm.

It is a product of p spheres (a classifier's class directions, a dictionary's atoms). A parameter tagged
``ManifoldParameter(W, Oblique(n, p))`` is then stepped privately (its per-record gradients projected to the tangent
space, clipped, noised in the tangent space), aggregated by every rule and checked on receipt: nothing is registered,
the private step and the server read the geometry from the parameter.
"""

from __future__ import annotations

import torch

from skfedriem.manifolds import Manifold, Sphere


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
        self._columns = Sphere(n)  # each column lies on it

    def _repr_args(self) -> tuple:
        return (self.n, self.p)

    def proj(self, Y: torch.Tensor) -> torch.Tensor:
        return Y / Y.norm(dim=-2, keepdim=True)

    def proju(self, X: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        return Z - (X * Z).sum(-2, keepdim=True) * X

    # Exp, Log and the inverse retraction are the sphere's, column by column: only the baseline aggregations
    # ("retavg", "kfavg") need them.
    def inv_retr(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        return self._columns.inv_retr(X.mT, Y.mT).mT

    def exp(self, X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        return self._columns.exp(X.mT, V.mT).mT

    def log(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        return self._columns.log(X.mT, Y.mT).mT

    def _check_point_reason(self, X: torch.Tensor, atol: float) -> str | None:
        error = float((X.norm(dim=-2) - 1).abs().max())
        return None if error <= atol else f"a column has | ||x|| - 1 | = {error:.3g} > atol = {atol:g}"
