"""The manifold contract every parameter geometry implements.

A parameter lives on a compact submanifold ``M`` of a Euclidean space of
matrices, with the metric induced by the Frobenius inner product (docs: the method, geometry,
after Pautrel et al., 2026). Each concrete manifold supplies only the
projection ``proj`` (Π, nearest point of M) and the tangent projection
``proju`` (P_X); the retraction and the lifting are derived from them. The
baseline aggregators additionally need ``inv_retr``, ``exp`` and ``log``.

All maps act on torch tensors and broadcast over leading (batch) dimensions,
in the style of geoopt's ``Manifold``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch

__all__ = ["Manifold", "ConvergenceError", "sym"]


class ConvergenceError(RuntimeError):
    """An iterative manifold map (e.g. the Stiefel logarithm) did not converge."""


def sym(A: torch.Tensor) -> torch.Tensor:
    """Symmetric part ``(A + Aᵀ) / 2`` of a batch of square matrices.

    Parameters
    ----------
    A : torch.Tensor of shape ``(..., n, n)``

    Returns
    -------
    torch.Tensor of shape ``(..., n, n)``
    """
    return 0.5 * (A + A.transpose(-1, -2))


class Manifold(ABC):
    """Compact embedded submanifold with the induced (Frobenius) metric.

    Subclasses set :attr:`shape`, :attr:`dim` and :attr:`ambient_dim` and
    implement :meth:`proj` and :meth:`proju`; everything else has a default.

    Attributes
    ----------
    shape : tuple of int
        Shape of one point (the trailing dimensions of every tensor argument).
    dim : int
        Intrinsic dimension d_M.
    ambient_dim : int
        Dimension D of the ambient Euclidean space the manifold sits in.
    """

    shape: tuple[int, ...]
    dim: int
    ambient_dim: int

    # ----------------------------------------------------------- required maps
    @abstractmethod
    def proj(self, Y: torch.Tensor) -> torch.Tensor:
        """Nearest point Π(Y) of the manifold to an ambient tensor ``Y``."""

    @abstractmethod
    def proju(self, X: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        """Orthogonal projection P_X(Z) of an ambient ``Z`` onto T_X M."""

    @abstractmethod
    def _check_point_reason(self, X: torch.Tensor, atol: float) -> str | None:
        """Return why ``X`` is not on the manifold, or None when it is."""

    # ------------------------------------------------------------ derived maps
    def retr(self, X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        """Projective retraction R_X(V) = Π(X + V)."""
        return self.proj(X + V)

    def lift(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """Lifting L_X(Y) = P_X(Y − X) of a point ``Y`` to T_X M."""
        return self.proju(X, Y - X)

    def inner(self, X: torch.Tensor, U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        """Induced metric ⟨U, V⟩_X = ⟨U, V⟩_F, reduced over the point dims."""
        return (U * V).flatten(start_dim=U.dim() - len(self.shape)).sum(-1)

    def norm(self, X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        """Induced norm of the tangent vector ``V`` at ``X``."""
        return self.inner(X, V, V).clamp_min(0).sqrt()

    def inv_retr(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`retr`: the tangent V at X with R_X(V) = Y."""
        raise NotImplementedError(f"{type(self).__name__} has no inverse retraction.")

    def exp(self, X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        """Riemannian exponential map of the induced metric."""
        raise NotImplementedError(f"{type(self).__name__} has no exponential map.")

    def log(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """Riemannian logarithm of the induced metric (inverse of :meth:`exp`)."""
        raise NotImplementedError(f"{type(self).__name__} has no logarithm.")

    # ---------------------------------------------------------------- sampling
    def random_point(
        self,
        *batch_shape: int,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float64,
    ) -> torch.Tensor:
        """Draw Π(G) for an ambient standard Gaussian G (uniform on St, S, Gr).

        Parameters
        ----------
        *batch_shape : int
            Leading dimensions of the returned batch of points.
        generator : torch.Generator, optional
            Source of randomness; the global torch RNG when None.
        dtype : torch.dtype, default=torch.float64
        """
        G = torch.randn(*batch_shape, *self._gaussian_shape, generator=generator, dtype=dtype)
        return self.proj(G)

    def random_tangent(
        self, X: torch.Tensor, *, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """P_X(G) for an ambient standard Gaussian G: N(0, I) on T_X M."""
        G = torch.randn(X.shape, generator=generator, dtype=X.dtype, device=X.device)
        return self.proju(X, G)

    @property
    def _gaussian_shape(self) -> tuple[int, ...]:
        return self.shape

    # ------------------------------------------------------------------ checks
    def check_point(self, X: torch.Tensor, atol: float = 1e-6, explain: bool = False):
        """Whether ``X`` (or every point of a batch) lies on the manifold.

        Parameters
        ----------
        X : torch.Tensor of shape ``(..., *shape)``
        atol : float, default=1e-6
            Absolute tolerance on the defining equations.
        explain : bool, default=False
            Return ``(ok, reason)`` instead of ``ok``.

        Returns
        -------
        ok : bool
        reason : str or None
            Only when ``explain`` is True.
        """
        if tuple(X.shape[X.dim() - len(self.shape):]) != self.shape:
            reason = f"expected trailing shape {self.shape}, got {tuple(X.shape)}"
        elif not torch.isfinite(X).all():
            reason = "contains NaN or inf"
        else:
            reason = self._check_point_reason(X, atol)
        ok = reason is None
        return (ok, reason) if explain else ok

    def __repr__(self) -> str:
        args = ", ".join(str(s) for s in self._repr_args())
        return f"{type(self).__name__}({args})"

    def _repr_args(self) -> tuple:
        return self.shape

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._repr_args() == other._repr_args()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._repr_args()))


def _max_abs(A: torch.Tensor) -> float:
    return float(A.abs().max()) if A.numel() else 0.0


def _prod(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
