"""Spectral functions of symmetric matrices, X ↦ U f(Λ) Uᵀ, with a stable backward.

``torch.linalg.eigh``'s backward divides by λ_i − λ_j and returns NaN or inf as
soon as two eigenvalues coincide, which is the rule in SPDNet: ReEig clamps
many eigenvalues to the same floor ε_R (all of them for raw EEG covariances in
V², ~1e-10), and the identity has one eigenvalue of multiplicity n. The
derivative of a spectral function does not need the eigenvectors of a repeated
eigenvalue to be differentiable, only its Loewner matrix (Daleckii & Krein,
1965; Ionescu et al., 2015, "Matrix backpropagation"):

    dF = U (L ∘ (Uᵀ dX U)) Uᵀ,   L_ij = (f(λ_i) − f(λ_j)) / (λ_i − λ_j),  L_ii = f'(λ_i),

where the divided difference is replaced by (f'(λ_i) + f'(λ_j)) / 2 when λ_i and
λ_j are equal to working precision. That is the whole backward, written by hand
below because torch offers no spectral-function primitive with this backward.

The custom Function declares ``setup_context`` and ``generate_vmap_rule`` so it
also works under ``torch.func`` (per-sample gradients by ``vmap(grad(...))``).
"""

from __future__ import annotations

import torch

__all__ = ["finite_eigh", "log_eig", "log_re_eig", "re_eig", "spectral_function"]


_KINDS = ("log", "reeig", "log_reeig")


def _values(kind: str, eigenvalues: torch.Tensor, floor: float) -> torch.Tensor:
    if kind == "log":
        return eigenvalues.log()
    if kind == "reeig":
        return eigenvalues.clamp_min(floor)
    return eigenvalues.clamp_min(floor).log()


def _derivatives(kind: str, eigenvalues: torch.Tensor, floor: float) -> torch.Tensor:
    if kind == "log":
        return eigenvalues.reciprocal()
    active = (eigenvalues > floor).to(eigenvalues.dtype)
    if kind == "reeig":
        return active
    return active / eigenvalues.clamp_min(floor)


def loewner_matrix(kind: str, eigenvalues: torch.Tensor, floor: float = 0.0) -> torch.Tensor:
    """L_ij = divided difference of f at (λ_i, λ_j), safe for equal eigenvalues.

    Parameters
    ----------
    kind : {"log", "reeig", "log_reeig"}
        f = log, f = max(·, floor), or f = log ∘ max(·, floor).
    eigenvalues : torch.Tensor, shape (..., n)
    floor : float
        ε_R of ReEig (ignored for ``"log"``).

    Returns
    -------
    L : torch.Tensor, shape (..., n, n)
    """
    values = _values(kind, eigenvalues, floor)
    # each n x n array is one pass over memory, so what can be is formed on the n eigenvalues first: the tolerance
    # (100 ε |λ| then the larger of two, the same bits as 100 ε times the larger) and the half slopes
    tolerance = 100 * torch.finfo(eigenvalues.dtype).eps * eigenvalues.abs()
    half_slopes = _derivatives(kind, eigenvalues, floor) / 2
    gap = eigenvalues.unsqueeze(-1) - eigenvalues.unsqueeze(-2)
    # equal to working precision: the quotient would be 0/0 or cancellation noise, and is not taken
    close = gap.abs() <= tolerance.unsqueeze(-1).maximum(tolerance.unsqueeze(-2))
    quotient = (values.unsqueeze(-1) - values.unsqueeze(-2)) / gap
    return torch.where(close, half_slopes.unsqueeze(-1) + half_slopes.unsqueeze(-2), quotient)


def finite_eigh(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.linalg.eigh`` of every matrix; one with a non-finite entry gets NaN eigenvalues and eigenvectors.

    ``eigh`` fails for the whole batch when one matrix holds an inf or a NaN
    (an input of 1e38 whose BiMap overflowed, say): one record would then
    fail every client's step. Here, when it fails, such a record's output is
    NaN, so its gradient is not finite and the private step clips it to zero,
    as it does any record whose gradient overflows (a non-finite matrix that
    ``eigh`` does not refuse gives a record whose gradient, whatever it is,
    the step clips like any other).

    Parameters
    ----------
    X : torch.Tensor, shape (..., n, n)
        Symmetric matrices.

    Returns
    -------
    eigenvalues : torch.Tensor, shape (..., n)
    eigenvectors : torch.Tensor, shape (..., n, n)
    """
    if not _functorch_active():  # eager: eigh alone, the masked form only when the batch holds a failing matrix
        try:  # (torch.func cannot branch on data: it always takes the masked form)
            return torch.linalg.eigh(X)
        except torch.linalg.LinAlgError:
            pass
    finite = torch.isfinite(X).all(-1).all(-1)
    eye = torch.eye(X.shape[-1], dtype=X.dtype, device=X.device)
    eigenvalues, U = torch.linalg.eigh(torch.where(finite[..., None, None], X, eye))
    return (torch.where(finite[..., None], eigenvalues, torch.nan),
            torch.where(finite[..., None, None], U, torch.nan))


class _SpectralFunction(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(X: torch.Tensor, kind: str, floor: float):  # type: ignore[override]
        eigenvalues, U = finite_eigh(X)
        output = (U * _values(kind, eigenvalues, floor).unsqueeze(-2)) @ U.transpose(-1, -2)
        return output, eigenvalues, U

    @staticmethod
    def setup_context(ctx, inputs, outputs) -> None:  # type: ignore[override]
        _, kind, floor = inputs
        _, eigenvalues, U = outputs
        ctx.mark_non_differentiable(eigenvalues, U)
        ctx.save_for_backward(eigenvalues, U)
        ctx.kind, ctx.floor = kind, floor

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor, _grad_values, _grad_vectors):  # type: ignore[override]
        eigenvalues, U = ctx.saved_tensors
        G = (grad_output + grad_output.transpose(-1, -2)) / 2
        inner = U.transpose(-1, -2) @ G @ U
        grad = U @ (loewner_matrix(ctx.kind, eigenvalues, ctx.floor) * inner) @ U.transpose(-1, -2)
        return grad, None, None


class _EagerSpectralFunction(torch.autograd.Function):
    """The same function for plain autograd: ``apply`` of a Function with ``setup_context`` binds its
    arguments with ``inspect.signature`` on every call (0.1 ms, 4 % of an SPDNet step), this one does not."""

    @staticmethod
    def forward(ctx, X: torch.Tensor, kind: str, floor: float):  # type: ignore[override]
        output, eigenvalues, U = _SpectralFunction.forward(X, kind, floor)
        _SpectralFunction.setup_context(ctx, (X, kind, floor), (output, eigenvalues, U))
        return output, eigenvalues, U

    backward = _SpectralFunction.backward


# Whether torch.func (vmap, grad) is tracing: only then is the setup_context form needed. Private torch
# API (what Function.apply itself asks); without it, always take the form that works everywhere.
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: True)


def spectral_function(X: torch.Tensor, kind: str, floor: float = 0.0) -> torch.Tensor:
    """U f(Λ) Uᵀ for symmetric ``X`` (..., n, n), differentiable and stable.

    The backward pass uses the Daleckii–Krein formula with divided differences
    of f, so it stays finite when eigenvalues coincide.

    Parameters
    ----------
    X : torch.Tensor, shape (..., n, n)
        Symmetric matrices (only the lower triangle is read by ``eigh``).
    kind : {"log", "reeig", "log_reeig"}
        f = log, f = max(·, floor), or f = log ∘ max(·, floor).
    floor : float, default=0.0
        ε_R for ``"reeig"`` and ``"log_reeig"``.

    Returns
    -------
    torch.Tensor, shape (..., n, n)

    Examples
    --------
    >>> import torch
    >>> spectral_function(torch.diag(torch.tensor([1.0, 4.0])), "reeig", floor=2.0)
    tensor([[2., 0.],
            [0., 4.]])
    """
    if kind not in _KINDS:
        raise ValueError(f"The 'kind' parameter must be one of {_KINDS}. Got {kind!r} instead.")
    function = _SpectralFunction if _functorch_active() else _EagerSpectralFunction
    return function.apply(X, kind, float(floor))[0]


def re_eig(X: torch.Tensor, floor: float) -> torch.Tensor:
    """ReEig: U max(Λ, ε_R) Uᵀ (Huang & Van Gool, 2017).

    Parameters
    ----------
    X : torch.Tensor, shape (..., n, n)
        Symmetric matrices.
    floor : float
        ε_R.

    Returns
    -------
    torch.Tensor, shape (..., n, n)
    """
    return spectral_function(X, "reeig", floor)


def log_eig(X: torch.Tensor) -> torch.Tensor:
    """LogEig: U log(Λ) Uᵀ, the matrix logarithm of an SPD matrix.

    Parameters
    ----------
    X : torch.Tensor, shape (..., n, n)
        SPD matrices.

    Returns
    -------
    torch.Tensor, shape (..., n, n)
    """
    return spectral_function(X, "log")


def log_re_eig(X: torch.Tensor, floor: float) -> torch.Tensor:
    """LogEig ∘ ReEig in one eigendecomposition: U log(max(Λ, ε_R)) Uᵀ.

    ReEig keeps the eigenvectors, so the eigendecomposition LogEig would
    compute is already known; fusing halves the eigh calls of a BiRe block
    followed by LogEig.

    Parameters
    ----------
    X : torch.Tensor, shape (..., n, n)
        Symmetric matrices.
    floor : float
        ε_R.

    Returns
    -------
    torch.Tensor, shape (..., n, n)
    """
    return spectral_function(X, "log_reeig", floor)
