"""A client's second-moment matrix as a torch module: the one-shot PCA release as one private step.

A record's loss −⟨A, x xᵀ⟩ has the gradient −x xᵀ, whatever A. One private
step of SGD at learning rate 1 from A = 0, on a batch of all m records of a
client, therefore releases

    A_i = (1/m) Σ_x clip_C(x xᵀ) + σ ξ,

the client's clipped second moment plus Gaussian noise: the classic "Analyze
Gauss" mechanism (Dwork, Talwar, Thakurta & Zhang, 2014) run per client,
through the same private step, accountant, ledger and transports as every
other model. The gradient norm is ‖x xᵀ‖_F = ‖x‖², so clipping it at C is
clipping each record to norm √C: a clipped record's gradient is −z zᵀ with
‖z‖² <= C. Two of them are at most √2 C apart in Frobenius norm,

    ‖z zᵀ − w wᵀ‖_F² = ‖z‖⁴ + ‖w‖⁴ − 2 (zᵀw)² <= 2 C²,

with equality for orthogonal records of squared norm C (a dropped, non-finite
record contributes 0, at distance ‖z‖² <= C): the sensitivity of the clipped
mean is √2 C / m, not the 2C / m of gradients that may point anywhere, and
its :class:`~skfedriem.privacy.ModelCapabilities` (``diameter``) say so to the mechanism. The
noise is drawn on all d² entries of the ambient matrix, and the symmetric
part is kept. The server averages the clients' A_i; the principal subspace
is the top eigenvectors of that average (post-processing).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..privacy.per_record.capabilities import ModelCapabilities
from ..privacy.per_record.gradients import PerRecordGradients, record_norms

__all__ = ["SecondMoment"]


class SecondMoment(nn.Module):
    """A Euclidean d×d parameter A whose forward pass returns each record's loss −xᵀAx.

    Parameters
    ----------
    n_features : int
        d.
    dtype : torch.dtype, default=torch.float64

    Examples
    --------
    >>> import torch
    >>> moment = SecondMoment(3)
    >>> with torch.no_grad():
    ...     _ = moment.weight.copy_(torch.diag(torch.tensor([1.0, 3.0, 2.0], dtype=torch.float64)))
    >>> moment.components(2)
    tensor([[0., 1., 0.],
            [0., 0., 1.]], dtype=torch.float64)
    """


    def __init__(self, n_features: int, *, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_features, n_features, dtype=dtype))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return -((X @ self.weight) * X).sum(-1)

    def per_sample_tangent_gradients(self, X: torch.Tensor) -> PerRecordGradients:
        """Each record's gradient −x xᵀ, in factored form: norms ‖x‖², weighted sums −Xᵀ diag(w) X.

        The B dense d×d gradients are never formed (600 records at d = 1024
        would take 5 GB).
        """
        return _OuterProducts(X)

    #: Clipped records' gradients −z zᵀ (‖z‖² <= C) are at most √2 C apart (module docstring); their sums are
    #: formed without the B dense d×d gradients.
    capabilities = ModelCapabilities(diameter=math.sqrt(2.0), stacks=True,
                                     tangent_gradients=lambda model, loss_fn, batch, **_: _OuterProducts(batch[0]))

    def eigenvalues(self):
        """The eigenvalues of sym(A), decreasing.

        Returns
        -------
        ndarray of shape (n_features,)
        """
        A = self.weight.detach()
        return torch.linalg.eigvalsh((A + A.T) / 2).flip(-1).numpy()

    def components(self, n_components: int) -> torch.Tensor:
        """The top ``n_components`` eigenvectors of sym(A), by decreasing eigenvalue, shape (n_components, d)."""
        A = self.weight.detach()
        _, vectors = torch.linalg.eigh((A + A.T) / 2)
        return vectors[:, -n_components:].flip(-1).T


class _OuterProducts(PerRecordGradients):
    """Per-record gradients −x xᵀ of :class:`SecondMoment` (records (B, d), or K clients' (K, B, d))."""

    def __init__(self, X: torch.Tensor) -> None:
        self.X = X

    def norms(self) -> torch.Tensor:
        return record_norms(self.X) ** 2  # ‖x xᵀ‖_F = ‖x‖²

    def weighted_sum(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        if weights.dim() > 1:  # clients in lockstep: each client's sum as it computes it alone
            return {"weight": torch.stack([_OuterProducts(self.X[k]).weighted_sum(weights[k])["weight"]
                                           for k in range(weights.shape[0])])}
        X = self.X
        kept = weights != 0
        if not bool(kept.all()):  # a dropped record may hold inf or NaN
            weights, X = weights[kept], X[kept]
        return {"weight": -(X * weights.to(X.dtype).unsqueeze(1)).T @ X}

    def scaled(self, factors: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every record's −f_z x_z x_zᵀ, ``(..., B, d, d)``; 0 where f_z is 0 (its x_z may not be finite)."""
        f = factors.to(self.X.dtype)
        kept = (f != 0).unsqueeze(-1)
        X = torch.where(kept, self.X, 0.0)
        return {"weight": -(X * torch.where(kept, f.unsqueeze(-1), 0.0)).unsqueeze(-1) * X.unsqueeze(-2)}
