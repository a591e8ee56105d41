"""Every client re-centred on its own mean, released privately (``recentre="client"``): personalised inputs.

pyRiemann's transfer learning re-centres each domain's covariances on the
domain's own Riemannian mean (``pyriemann.transfer.TLCenter``), so that every
subject's trials sit around the identity before one shared classifier; on the
24 real PhysioNet subjects that lifts a pooled tangent-space model from 0.655
to 0.688 held out without privacy. A client's own mean couples its records
(one trial moves every other trial's re-centred input), so here each client
releases its mean by a Gaussian mechanism of its own before the rounds, and
re-centres on that release: the rounds' per-record guarantee stands (their
inputs are post-processing of the release and of each record alone), composed
with the release's.

The release (:class:`PersonalMeans`): each record's tangent vector at the
public base point R (the federation's released mean, or the public reference),
clipped to norm C = :data:`PERSONAL_CLIP` √n; their mean (with
``privacy_unit="subject"``, the mean of each subject's own mean), so that
substituting one unit moves it by at most 2C / S for a client of S units; plus
N(0, σ²) in every coordinate, σ = 2C / (S μ), μ the Gaussian-DP parameter of
(:data:`PERSONAL_SHARE` ε, δ). The client's noise is its own secret draw, and
the whole release is one Gaussian step (rate 1) in every ledger, against
every trust: a client's release never leaves it alone under distributed
noise either, and it is charged as if it did. The released vector is shrunk
towards R by the noise it carries (James–Stein, :func:`shrunk_mean`) and mapped
back to the mean M.

Where the unit is the whole client (``privacy_unit="subject"``, one subject a
client) the mean lies within the unit: the rounds already protect everything
the subject holds, so the client re-centres on its exact mean, released to no
one and charged nothing. That mean is not kept by the fitted estimator (it is
no post-processing of what the server saw): such a client is re-centred at
prediction as a new subject is, on its trials' own mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..models.recentring import inverse_square_root
from ..privacy.accounting.ledger import PrivacyAccountant
from ..privacy.accounting.subsampled_gaussian import gdp_mu_for_epsilon
from ..privacy.mechanisms.randomness import SecretRandomness
from ._shrinkage import shrunk_mean

__all__ = ["PERSONAL_CLIP", "PERSONAL_SHARE", "PersonalMeans", "recentred", "riemannian_mean", "trace_normalised"]

#: ``recentre="client"`` in a private fit: the share of ``eps`` every client's release of its own mean is planned at
#: (its Gaussian-DP μ alone meets (share ε, δ)); the rounds take what is left once composed with it.
PERSONAL_SHARE = 0.2
#: The clip of each record's tangent vector at the base point, in units of √n_channels. On the 24 real PhysioNet
#: subjects (trace-normalised OAS covariances at their pooled mean, 9 motor channels) the norms have median 0.73 √n
#: and 90th percentile 1.06 √n, and a subject's mean 0.63 √n: a clip below them biases the mean's length, not its
#: direction, and halves the noise. Of 0.3, 0.5, 0.7 and 1.0 (24 one-subject clients, a third held out, 4 seeds), 0.5
#: gave 0.685 / 0.650 / 0.599 held out at distributed ε = 10 / distributed ε = 4 / local ε = 10, 0.3 0.675 / 0.659 /
#: 0.610, 0.7 0.675 / 0.618 / -, 1.0 0.633 at distributed ε = 10 (2 seeds): chosen on those held-out thirds.
PERSONAL_CLIP = 0.5


def _tangent_vectors(X: np.ndarray, base: np.ndarray) -> np.ndarray:
    from pyriemann.geometry.tangentspace import tangent_space

    return tangent_space(X, base, metric="riemann")


def _point(vector: np.ndarray, base: np.ndarray) -> np.ndarray:
    from pyriemann.geometry.tangentspace import untangent_space

    return untangent_space(vector[None], base, metric="riemann")[0]


def _usable(X: np.ndarray) -> np.ndarray:
    """Which matrices are finite and SPD as given (a valid trial can lose that once trace-normalised: an eigenvalue
    1e-200 beside one of 1e200 underflows to 0)."""
    finite = np.isfinite(X).all(axis=(1, 2))
    usable = np.zeros(len(X), dtype=bool)
    if finite.any():
        usable[finite] = np.linalg.eigvalsh(X[finite])[:, 0] > 0
    return usable


def riemannian_mean(X: np.ndarray) -> np.ndarray:
    """pyRiemann's Riemannian mean of SPD matrices (what ``TLCenter`` re-centres a domain on), of those that are
    usable (finite and SPD: one record never decides whether a mean can be taken); the identity if none is.

    Parameters
    ----------
    X : ndarray of shape (n_matrices, n, n)

    Returns
    -------
    ndarray of shape (n, n)
    """
    from pyriemann.geometry.mean import mean_riemann

    usable = X[_usable(X)]
    return mean_riemann(usable) if len(usable) else np.eye(X.shape[1])


def trace_normalised(X: np.ndarray) -> np.ndarray:
    """Every matrix divided by its trace / n, as the covariance classifiers read it (float64).

    Parameters
    ----------
    X : ndarray of shape (n_matrices, n, n)

    Returns
    -------
    ndarray of shape (n_matrices, n, n)
    """
    X = np.asarray(X, dtype=np.float64)
    return X / (np.trace(X, axis1=1, axis2=2)[:, None, None] / X.shape[1])


def recentred(X: torch.Tensor, mean: np.ndarray) -> torch.Tensor:
    """M^{-1/2} X M^{-1/2}: the trials moved so that ``mean`` sits at the identity, in X's dtype (each trial on its
    own; the model divides it by its trace after, so M's scale does not matter).

    Parameters
    ----------
    X : torch.Tensor of shape (n_matrices, n, n)
    mean : ndarray of shape (n, n)
        SPD.

    Returns
    -------
    torch.Tensor of shape (n_matrices, n, n)
    """
    whiten = inverse_square_root(torch.from_numpy(np.asarray(mean, dtype=np.float64)))
    out = whiten @ X.double() @ whiten
    return ((out + out.mT) / 2).to(X.dtype)


@dataclass(frozen=True)
class PersonalMeans:
    """The plan of every client's release of its own mean, and the release itself.

    Parameters
    ----------
    mu : float
        μ, the Gaussian-DP parameter of one client's release (inf: no privacy, exact means).
    clip : float
        C, the clip of each record's tangent vector at the base point.
    unit : {"record", "subject"}
        What one release protects: a record, or a subject (each subject's
        trials averaged first).
    """

    mu: float
    clip: float
    unit: str = "record"

    @classmethod
    def planned(cls, eps: float | None, delta: float, n_channels: int, unit: str) -> PersonalMeans:
        """The release at :data:`PERSONAL_SHARE` of ``eps`` (exact means without privacy).

        Parameters
        ----------
        eps : float or None
        delta : float
        n_channels : int
        unit : {"record", "subject"}

        Returns
        -------
        PersonalMeans
        """
        mu = math.inf if eps is None else gdp_mu_for_epsilon(PERSONAL_SHARE * float(eps), float(delta))
        return cls(mu=mu, clip=PERSONAL_CLIP * math.sqrt(n_channels), unit=unit)

    @property
    def private(self) -> bool:
        """Whether the releases carry noise (``mu`` finite)."""
        return math.isfinite(self.mu)

    def within_unit(self, units: int) -> bool:
        """Whether a client of ``units`` protected units holds one subject only: its mean lies within the unit."""
        return self.unit == "subject" and units == 1

    def noise_std(self, units: int) -> float:
        """σ = 2C / (S μ) for a client of S units: 0 without privacy and where the mean lies within the unit."""
        if not self.private or self.within_unit(units):
            return 0.0
        return 2.0 * self.clip / (units * self.mu)

    def ledger(self, releases: list[tuple[int, float]]) -> PrivacyAccountant:
        """The clients' releases as one ledger step: a Gaussian at rate 1 and the largest μ_i = 2C / (S_i σ_i) of
        the noise each drew (an exact mean outside its unit: infinite loss; none where every client's mean lies
        within its unit).

        Parameters
        ----------
        releases : list of (int, float)
            (S_i, σ_i) of every client: its units, and the noise std its release drew (0: exact).

        Returns
        -------
        PrivacyAccountant
        """
        ledger = PrivacyAccountant()
        charged = [2.0 * self.clip / (s * sigma) if sigma > 0 else math.inf
                   for s, sigma in releases if not self.within_unit(s)]
        if charged:
            ledger.step(mu0=max(charged), sample_rate=1.0, num_steps=1, sampling="fixed", unit=self.unit)
        return ledger

    def units(self, n_records: int, subjects: torch.Tensor | None) -> int:
        """S, a client's protected units: its records, or (``unit="subject"``) its subjects' codes."""
        return len(torch.unique(subjects)) if self.unit == "subject" else int(n_records)

    def planned_ledger(self, units: list[int]) -> PrivacyAccountant:
        """:meth:`ledger` of the releases this plan draws for clients of these numbers of units (S_i)."""
        return self.ledger([(s, self.noise_std(s)) for s in units])

    def release(self, X: torch.Tensor, subjects: torch.Tensor | None, base: np.ndarray,
                randomness: SecretRandomness) -> tuple[np.ndarray, float, int]:
        """One client's mean M, released (or exact: without privacy, or within the unit), its noise std and units.

        Parameters
        ----------
        X : torch.Tensor of shape (n_records, n, n)
            The client's trials (trace-normalised here, as the model reads them; one that is no longer SPD
            then counts as the base point).
        subjects : torch.Tensor of shape (n_records,) or None
            Each record's subject code (``unit="subject"``).
        base : ndarray of shape (n, n)
            R, public: the point the tangent vectors are taken at.
        randomness : SecretRandomness
            The client's secret source of the noise.

        Returns
        -------
        mean : ndarray of shape (n, n)
        noise_std : float
            σ per coordinate of the release (0: exact).
        units : int
            S, the client's protected units (records, or subjects).
        """
        matrices = trace_normalised(X.double().numpy())
        codes = np.zeros(len(matrices), dtype=np.int64) if subjects is None else subjects.numpy()
        units = self.units(len(matrices), subjects)
        if self.noise_std(units) == 0.0:
            return riemannian_mean(matrices), 0.0, units
        usable = _usable(matrices)  # a record unusable once trace-normalised counts as the base point (vector 0)
        vectors = np.zeros((len(matrices), base.shape[0] * (base.shape[0] + 1) // 2))
        if usable.any():
            vectors[usable] = _tangent_vectors(matrices[usable], base)
        norms = np.linalg.norm(vectors, axis=1)
        vectors = vectors * np.minimum(1.0, self.clip / np.maximum(norms, 1e-300))[:, None]
        if self.unit == "subject":  # every subject's own mean first: one subject moves the release by 2C / S
            vectors = np.stack([vectors[codes == c].mean(axis=0) for c in np.unique(codes)])
        sigma = self.noise_std(units)
        noise = randomness.standard_normal((vectors.shape[1],), torch.float64).numpy()
        released = vectors.mean(axis=0) + sigma * noise
        return _point(shrunk_mean(released, sigma), base), sigma, units
