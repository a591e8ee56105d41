"""Flat Euclidean space R^shape: the geometry of unconstrained parameters."""

from __future__ import annotations

import torch

from .base import Manifold, _prod

__all__ = ["Euclidean"]


class Euclidean(Manifold):
    """Euclidean space of tensors of a given shape (every map is trivial).

    Parameters
    ----------
    *shape : int
        Shape of one point, e.g. ``Euclidean(4, 3)`` for 4 x 3 matrices.

    Examples
    --------
    >>> import torch
    >>> M = Euclidean(3)
    >>> M.dim, M.ambient_dim
    (3, 3)
    >>> M.retr(torch.zeros(3), torch.ones(3))
    tensor([1., 1., 1.])
    """

    def __init__(self, *shape: int) -> None:
        if any(not isinstance(s, int) or s < 1 for s in shape):
            raise ValueError(f"The 'shape' of Euclidean must be positive integers. Got {shape!r} instead.")
        self.shape = tuple(shape)
        self.dim = self.ambient_dim = _prod(self.shape)

    def proj(self, Y: torch.Tensor) -> torch.Tensor:
        return Y

    def proju(self, X: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        return Z

    def retr(self, X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        return X + V

    def inv_retr(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        return Y - X

    def exp(self, X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        return X + V

    def log(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        return Y - X

    def _check_point_reason(self, X: torch.Tensor, atol: float) -> str | None:
        return None
