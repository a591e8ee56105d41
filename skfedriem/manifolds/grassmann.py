"""The Grassmann manifold Gr(n, p) as rank-p orthogonal projectors in Sym(n)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .base import Manifold, _max_abs, sym

__all__ = ["Grassmann"]


class Grassmann(Manifold):
    """Grassmann manifold of p-planes of R^n, as projectors P = Pᵀ = P², tr P = p.

    Points are n x n matrices in Sym(n) (ambient dimension n(n+1)/2) with the
    Frobenius metric (docs: the method, geometry). Π(Y) is the projector on the top-p eigenvectors
    of sym(Y); P_P(Z) = P S (I − P) + (I − P) S P with S = sym(Z); the
    intrinsic dimension is p(n − p). Exp, Log and the inverse retraction are
    closed form through principal angles (Absil, Mahony & Sepulchre, 2004).

    Parameters
    ----------
    n, p : int
        1 <= p < n.

    Examples
    --------
    >>> Gr = Grassmann(40, 4)
    >>> Gr.dim, Gr.ambient_dim
    (144, 820)
    """

    def __init__(self, n: int, p: int) -> None:
        if not (isinstance(n, int) and isinstance(p, int) and 1 <= p < n):
            raise ValueError(f"Grassmann(n, p) needs integers 1 <= p < n. Got n={n!r}, p={p!r} instead.")
        self.n, self.p = n, p
        self.shape = (n, n)
        self.dim = p * (n - p)
        self.ambient_dim = n * (n + 1) // 2

    def _repr_args(self) -> tuple:
        return (self.n, self.p)

    # -------------------------------------------------------------- basics
    def basis(self, P: torch.Tensor) -> torch.Tensor:
        """An orthonormal basis U (n x p) of the range of the projector P."""
        _, vecs = torch.linalg.eigh(sym(P))
        return vecs[..., -self.p:]

    def proj(self, Y: torch.Tensor) -> torch.Tensor:
        U = self.basis(Y)
        return U @ U.transpose(-1, -2)

    def proju(self, X: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        S = sym(Z)
        XS = X @ S
        return XS + XS.transpose(-1, -2) - 2 * XS @ X

    # ------------------------------------------ maps through principal angles
    def _horizontal(self, P: torch.Tensor, Q: torch.Tensor, f: Callable) -> torch.Tensor:
        """Tangent U Hᵀ + H Uᵀ with H = Q̃ f(tan Θ) Vᵀ, where the thin SVD
        (I − UUᵀ) Y (UᵀY)⁻¹ = Q̃ tan(Θ) Vᵀ holds the principal angles Θ
        between range(P) = span U and range(Q) = span Y."""
        U, Y = self.basis(P), self.basis(Q)
        M = U.transpose(-1, -2) @ Y
        K = torch.linalg.solve(M.transpose(-1, -2), (Y - U @ M).transpose(-1, -2)).transpose(-1, -2)
        Qt, tan, Vh = torch.linalg.svd(K, full_matrices=False)
        H = (Qt * f(tan).unsqueeze(-2)) @ Vh
        UH = U @ H.transpose(-1, -2)
        return UH + UH.transpose(-1, -2)

    def log(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        return self._horizontal(X, Y, torch.atan)

    def inv_retr(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """Inverse of R_P(Δ) = Π(P + Δ), defined for principal angles < π/4.

        In each principal plane, P + Δ acts as [[1, s], [s, 0]], whose top
        eigenvector makes an angle θ with tan θ = s / λ₊(s); inverting gives
        s = t / (1 − t²) with t = tan θ (i.e. s = tan(2θ)/2).
        """
        def f(t: torch.Tensor) -> torch.Tensor:
            if bool((t >= 1).any()):
                raise ValueError(
                    "Grassmann inv_retr is only defined for principal angles below pi/4; "
                    f"got tan(theta) up to {float(t.max()):.3g}."
                )
            return t / (1 - t * t)

        return self._horizontal(X, Y, f)

    def exp(self, X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        U = self.basis(X)
        H = sym(V) @ U  # horizontal lift: V = U Hᵀ + H Uᵀ with UᵀH = 0
        Qt, sigma, Vh = torch.linalg.svd(H, full_matrices=False)
        V_ = Vh.transpose(-1, -2)
        U1 = (U @ V_) * torch.cos(sigma).unsqueeze(-2) @ Vh + (Qt * torch.sin(sigma).unsqueeze(-2)) @ Vh
        return U1 @ U1.transpose(-1, -2)

    # --------------------------------------------------------------- checks
    @property
    def _gaussian_shape(self) -> tuple[int, ...]:
        return (self.n, self.n)

    def _check_point_reason(self, X: torch.Tensor, atol: float) -> str | None:
        asym = _max_abs(X - X.transpose(-1, -2))
        if asym > atol:
            return f"not symmetric: max |P - Pᵀ| = {asym:.3g} > atol = {atol:g}"
        idem = _max_abs(X @ X - X)
        if idem > atol:
            return f"not idempotent: max |P² - P| = {idem:.3g} > atol = {atol:g}"
        trace_err = _max_abs(torch.diagonal(X, dim1=-2, dim2=-1).sum(-1) - self.p)
        if trace_err > atol * self.n:
            return f"trace differs from p={self.p} by {trace_err:.3g}"
        return None
