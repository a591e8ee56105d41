"""The Stiefel manifold St(n, p) of n x p matrices with orthonormal columns."""

from __future__ import annotations

import numpy as np
import scipy.linalg
import torch

from .base import ConvergenceError, Manifold, _max_abs, sym

__all__ = ["Stiefel"]


def _eye_like(X: torch.Tensor, p: int) -> torch.Tensor:
    return torch.eye(p, dtype=X.dtype, device=X.device)


def solve_lyapunov_batched(A: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Solve A S + S Aᵀ = C for S, batched over leading dimensions.

    Bartels–Stewart (``scipy.linalg.solve_continuous_lyapunov``) on each
    batch element: O(p³) each. The alternative, a batched torch solve of the
    p² x p² Kronecker system, is O(p⁶) and, with torch 2.13's MKL on this
    platform, batched LU returns wrong solutions from p² ≳ 200 on (an MKL
    DLASWP error); this runs on the server, outside autograd.
    """
    A, C = torch.broadcast_tensors(A, C)
    batch = A.shape[:-2]
    A_np = A.detach().reshape(-1, *A.shape[-2:]).cpu().numpy()
    C_np = C.detach().reshape(-1, *C.shape[-2:]).cpu().numpy()
    S = np.stack([scipy.linalg.solve_continuous_lyapunov(a, c) for a, c in zip(A_np, C_np)])
    return torch.from_numpy(S).to(dtype=A.dtype, device=A.device).reshape(*batch, *A.shape[-2:])


class Stiefel(Manifold):
    """Stiefel manifold St(n, p) = {X in R^{n x p} : XᵀX = I_p}, induced metric.

    Π is the polar factor U Vᵀ of the thin SVD (the nearest point in Frobenius
    norm; not a QR retraction), P_X(Z) = Z − X sym(XᵀZ), and
    d_M = np − p(p+1)/2. The inverse of the polar retraction solves the
    Lyapunov equation (XᵀY) S + S (XᵀY)ᵀ = 2 I (docs: the method, geometry; Bartels–Stewart); Exp is Edelman,
    Arias & Smith's (1998) closed form for the embedded metric; Log has no
    closed form and is computed by a shooting iteration (see :meth:`log`).

    Parameters
    ----------
    n, p : int
        Matrix shape, 1 <= p <= n.

    Examples
    --------
    >>> import torch
    >>> St = Stiefel(5, 2)
    >>> X = St.random_point(generator=torch.Generator().manual_seed(0))
    >>> St.check_point(X), St.dim, St.ambient_dim
    (True, 7, 10)
    """

    def __init__(self, n: int, p: int) -> None:
        if not (isinstance(n, int) and isinstance(p, int) and 1 <= p <= n):
            raise ValueError(f"Stiefel(n, p) needs integers 1 <= p <= n. Got n={n!r}, p={p!r} instead.")
        self.n, self.p = n, p
        self.shape = (n, p)
        self.dim = n * p - p * (p + 1) // 2
        self.ambient_dim = n * p

    def proj(self, Y: torch.Tensor) -> torch.Tensor:
        U, _, Vh = torch.linalg.svd(Y, full_matrices=False)
        return U @ Vh

    def proju(self, X: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        return Z - X @ sym(X.transpose(-1, -2) @ Z)

    def inv_retr(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        A = X.transpose(-1, -2) @ Y
        C = 2 * _eye_like(X, self.p).expand_as(A)
        S = solve_lyapunov_batched(A, C)
        return Y @ S - X

    def exp(self, X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        p = self.p
        X, V = torch.broadcast_tensors(X, V)
        A = X.transpose(-1, -2) @ V
        S = V.transpose(-1, -2) @ V
        eye = _eye_like(X, p).expand_as(A)
        block = torch.cat([torch.cat([A, -S], -1), torch.cat([eye, A], -1)], -2)
        E = torch.linalg.matrix_exp(block)[..., :, :p] @ torch.linalg.matrix_exp(-A)
        return torch.cat([X, V], -1) @ E

    def log(
        self,
        X: torch.Tensor,
        Y: torch.Tensor,
        *,
        tol: float | None = None,
        max_iter: int = 200,
    ) -> torch.Tensor:
        """Riemannian logarithm of the embedded metric, by a shooting iteration.

        No closed form exists for the embedded (Euclidean) metric. We solve
        Exp_X(V) = Y for tangent V by the fixed-point iteration
        V ← V + P_X(Y − Exp_X(V)) started at the inverse polar retraction
        (a second-order approximation). Near the solution the error contracts
        by a factor O(||V||), so it converges for points within the distances
        that local updates produce; it raises instead of returning a wrong
        answer otherwise (the single-shooting scheme surveyed by Zimmermann &
        Hüper, 2022, SIAM J. Matrix Anal. Appl. 43(2)).

        Parameters
        ----------
        X, Y : torch.Tensor, shape (..., n, p)
            Points of St(n, p).
        tol : float, optional
            Stop when max ||Y − Exp_X(V)||_F <= tol. Default: 1e-10 in
            float64, 1e-5 in float32.
        max_iter : int, default=200

        Returns
        -------
        V : torch.Tensor, shape (..., n, p)

        Raises
        ------
        ConvergenceError
            When the residual does not fall below ``tol`` in ``max_iter``
            iterations (points too far apart, beyond the injectivity radius).
        """
        if tol is None:
            tol = 1e-10 if X.dtype == torch.float64 else 1e-5
        V = self.inv_retr(X, Y)
        residual = float("nan")
        for _ in range(max_iter):
            R = Y - self.exp(X, V)
            residual = float(R.flatten(start_dim=R.dim() - 2).norm(dim=-1).max())
            if not residual == residual or residual > 1e3:  # NaN or blow-up
                break
            if residual <= tol:
                return V
            V = V + self.proju(X, R)
        raise ConvergenceError(
            f"Stiefel log did not converge: residual {residual:.3g} > tol={tol:g} after "
            f"max_iter={max_iter} iterations (are X and Y too far apart?)."
        )

    def _check_point_reason(self, X: torch.Tensor, atol: float) -> str | None:
        err = _max_abs(X.transpose(-1, -2) @ X - _eye_like(X, self.p))
        return None if err <= atol else f"max |XᵀX - I| = {err:.3g} > atol = {atol:g}"
