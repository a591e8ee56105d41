"""SPDNet (Huang & Van Gool, 2017, "A Riemannian network for SPD matrix learning").

Covariance matrices go through L BiRe blocks (BiMap X ↦ WᵀXW with W on the
Stiefel manifold, then ReEig), LogEig, Vech and a linear classifier (user guide, "The method").
No layer couples the records of a batch (no batch normalisation), so the
per-record sensitivity of the private step holds, and every trainable layer declares its
per-sample gradient rule for :mod:`skfedriem.privacy.per_record.layerwise`.
"""

from __future__ import annotations

from collections.abc import Sequence
import torch
from torch import nn

from ..manifolds import ManifoldParameter, Stiefel, manifold_of
from ..privacy.per_record.capabilities import ModelCapabilities
from ..privacy.per_record.gradients import DenseGradients, PerRecordGradients, StackedDenseGradients
from ..privacy.per_record.hooks import has_hooks
from ..privacy.per_record.per_sample import LossFn
from .recentring import Recentre
from .spdnet_gradients import bire_tangent_gradients, upper_triangle
from .spectral import log_eig, log_re_eig, re_eig

__all__ = ["BiMap", "LogEig", "LogReEig", "ReEig", "SPDNet", "TraceNormalize", "Vech"]


class BiMap(nn.Module):
    """X ↦ Wᵀ X W with W on the Stiefel manifold St(n_in, n_out).

    Clients in lockstep (:mod:`skfedriem.federated.lockstep`) stack their
    weights as (K, n_in, n_out) and their records as (K, B, n_in, n_in):
    client k's W then maps client k's matrices.

    Parameters
    ----------
    n_in, n_out : int
        Input and output matrix sizes, ``n_out <= n_in``.
    generator : torch.Generator, optional
        Draws the (data-independent) initial W uniformly on St(n_in, n_out).
    dtype : torch.dtype, default=torch.float32
    """

    def __init__(
        self,
        n_in: int,
        n_out: int,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        manifold = Stiefel(n_in, n_out)
        self.weight = ManifoldParameter(manifold.random_point(generator=generator, dtype=dtype), manifold)

    def _weight(self, X: torch.Tensor) -> torch.Tensor:
        """W, or its stack over clients (K, n_in, n_out) viewed to meet inputs (K, B, ..., n_in, n_in) per client."""
        W = self.weight
        return W if W.dim() == 2 else W.view(W.shape[0], *[1] * (X.dim() - 3), *W.shape[1:])

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        W = self._weight(X)
        return W.transpose(-1, -2) @ X @ W

    def per_sample_parameter_gradients(self, X: torch.Tensor, grad_output: torch.Tensor) -> dict[str, torch.Tensor]:
        """∂ℓ_z/∂W = X_z W (G_z + G_zᵀ) for each record z, G_z = ∂ℓ_z/∂Y_z (X_z symmetric)."""
        G = grad_output + grad_output.transpose(-1, -2)
        return {"weight": X @ (self._weight(X).detach() @ G)}

    #: Stacks (K clients' W on their records); its per-record rule is for inputs ``(*records, n_in, n_in)``, other
    #: shapes take the vmap route.
    capabilities = ModelCapabilities(per_record_rule=per_sample_parameter_gradients, rule_input_dims=2, stacks=True)

    def extra_repr(self) -> str:
        n_in, n_out = self.weight.shape
        return f"n_in={n_in}, n_out={n_out}"


class ReEig(nn.Module):
    """X ↦ U max(Λ, ε_R) Uᵀ, the rectified eigenvalue layer (stable backward).

    Parameters
    ----------
    eps : float, default=1e-4
        ε_R, the eigenvalue floor.
    """

    capabilities = ModelCapabilities(stacks=True)

    def __init__(self, eps: float = 1e-4) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return re_eig(X, self.eps)

    def extra_repr(self) -> str:
        return f"eps={self.eps}"


class LogEig(nn.Module):
    """X ↦ U log(Λ) Uᵀ, the matrix logarithm (stable backward).

    No parameters.
    """

    capabilities = ModelCapabilities(stacks=True)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return log_eig(X)


class LogReEig(nn.Module):
    """ReEig then LogEig with a single eigendecomposition: X ↦ U log(max(Λ, ε_R)) Uᵀ.

    Parameters
    ----------
    eps : float, default=1e-4
        ε_R, the eigenvalue floor.
    """

    capabilities = ModelCapabilities(stacks=True)

    def __init__(self, eps: float = 1e-4) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return log_re_eig(X, self.eps)

    def extra_repr(self) -> str:
        return f"eps={self.eps}"


class Vech(nn.Module):
    """Upper triangle (diagonal included) of each matrix, row by row: n(n+1)/2 values.

    No parameters.
    """

    capabilities = ModelCapabilities(stacks=True)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        # index_select on the flattened matrices: 5 µs where X[..., rows, cols] takes 35 (64 matrices of 16×16),
        # and its backward is an index_add rather than an index_put
        return X.flatten(start_dim=-2).index_select(-1, upper_triangle(X.shape[-1], X.device))


class TraceNormalize(nn.Module):
    """X ↦ n X / tr(X): each record on its own scale, mean eigenvalue 1.

    EEG covariances in V² have eigenvalues near 1e-10, below any sensible ReEig
    floor. Dividing each trial by its own trace uses no statistic shared across
    records, so it leaves record-level privacy intact (a dataset-wide scale
    would not). No parameters.
    """

    capabilities = ModelCapabilities(stacks=True)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        trace = X.diagonal(dim1=-2, dim2=-1).sum(-1)
        return X * (X.shape[-1] / trace)[..., None, None]


class SPDNet(nn.Module):
    """SPDNet classifier: [Recentre] → [TraceNormalize] → (BiMap → ReEig) x L → LogEig → Vech → Linear.

    The last ReEig and the LogEig share one eigendecomposition
    (:class:`LogReEig`), the same function with one eigendecomposition instead of two.

    Parameters
    ----------
    n_channels : int
        Size C of the input covariance matrices.
    n_classes : int
        Number of output logits.
    dims : sequence of int, default=(16,)
        Output size of each BiMap; non-increasing, the first <= C.
    reeig_eps : float, default=1e-4
        ReEig floor ε_R.
    normalize : bool, default=True
        Divide each input by its trace / C first (see :class:`TraceNormalize`).
    reference : torch.Tensor of shape (C, C), optional
        A public SPD reference point R: each input is first whitened by it,
        X ↦ R^{-1/2} X R^{-1/2} (:class:`~skfedriem.models.recentring.Recentre`;
        R is trace-normalised first), so that inputs near R reach the BiMap near
        the identity. None: no re-centring (:meth:`at_reference` sets one later).
    generator : torch.Generator, optional
        Source of the initial weights.
    dtype : torch.dtype, default=torch.float32

    Attributes
    ----------
    recentre : Recentre or torch.nn.Identity
        The re-centring at ``reference`` (its buffers ``recentre.reference``
        and ``recentre.whitener``), or the identity map.

    Examples
    --------
    >>> net = SPDNet(22, 4, dims=(16,))
    >>> sum(p.numel() for p in net.parameters())
    900
    """

    def __init__(
        self,
        n_channels: int,
        n_classes: int,
        dims: Sequence[int] = (16,),
        reeig_eps: float = 1e-4,
        *,
        normalize: bool = True,
        reference: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.recentre: nn.Module = nn.Identity()
        dims = tuple(int(d) for d in dims)
        if not dims or any(d < 1 for d in dims):
            raise ValueError(f"The 'dims' parameter must be a non-empty sequence of positive ints. Got {dims!r} instead.")
        sizes = (int(n_channels), *dims)
        if any(b > a for a, b in zip(sizes, sizes[1:])):
            raise ValueError(
                f"The 'dims' parameter must be non-increasing and start at most at n_channels={n_channels}. "
                f"Got {dims!r} instead."
            )
        layers: list[nn.Module] = [TraceNormalize()] if normalize else []
        for n_in, n_out in zip(sizes, sizes[1:]):
            layers += [BiMap(n_in, n_out, generator=generator, dtype=dtype), ReEig(reeig_eps)]
        layers[-1] = LogReEig(reeig_eps)
        self.features = nn.Sequential(*layers, Vech())
        d = dims[-1]
        # skip_init: nn.Linear's own init would draw from the global RNG
        self.classifier = nn.utils.skip_init(nn.Linear, d * (d + 1) // 2, n_classes, dtype=dtype)
        with torch.no_grad():  # torch's default init law, drawn from `generator`
            bound = (d * (d + 1) // 2) ** -0.5
            self.classifier.weight.uniform_(-bound, bound, generator=generator)
            self.classifier.bias.uniform_(-bound, bound, generator=generator)
        if reference is not None:
            self.at_reference(torch.as_tensor(reference, dtype=dtype))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """Logits, shape (n_matrices, n_classes), for X of shape (n_matrices, C, C)."""
        return self.classifier(self.features(self.recentre(X)))

    #: The name of the reference point's buffer in :meth:`state_dict` (once one is set).
    reference_buffer = "recentre.reference"

    def reference_point(self) -> torch.Tensor:
        """The (trace-normalised) reference point the inputs are whitened by; the identity without one."""
        if isinstance(self.recentre, Recentre):
            return self.recentre.reference
        weight = self.classifier.weight
        return torch.eye(self._n_channels(), dtype=weight.dtype, device=weight.device)

    def _n_channels(self) -> int:
        return self.features[1 if isinstance(self.features[0], TraceNormalize) else 0].weight.shape[0]

    def at_reference(self, reference: torch.Tensor) -> None:
        """Whiten every input by another public reference point (before training: the inputs change with it).

        Parameters
        ----------
        reference : torch.Tensor of shape (C, C)
            SPD; divided by its trace / C first.
        """
        n_channels = self._n_channels()
        dtype = self.classifier.weight.dtype
        reference = torch.as_tensor(reference, dtype=dtype, device=self.classifier.weight.device)
        if reference.shape != (n_channels, n_channels):
            raise ValueError(f"The reference point must have shape ({n_channels}, {n_channels}) like the inputs. "
                             f"Got {tuple(reference.shape)} instead.")
        self.recentre = Recentre(TraceNormalize()(reference))

    def per_record_tangent_gradients(self, loss_fn: LossFn, batch: tuple[torch.Tensor, ...], *, record_dims: int = 1,
                                     parameters: dict[str, torch.Tensor] | None = None
                                     ) -> dict[str, torch.Tensor] | None:
        """Every record's tangent gradient of ``loss_fn``, in closed form; None where it does not apply.

        The private step's route for this model
        (:func:`~skfedriem.models.spdnet_gradients.bire_tangent_gradients`): the
        same per-record gradients as the layer rules, projected onto the tangent
        space, with one forward pass and a hand-written backward. It applies to an
        SPDNet as built: this class itself, not a subclass; ``features`` a plain
        Sequential of its layers in their order, each once; a Linear classifier
        with a bias; no hooks (a module's or global ones), no forward set on an
        instance, no parameter shared by two layers, and no trainable parameter
        but the BiMaps' W and the classifier's. Anything else, inputs
        other than ``(*records, C, C)``, or a loss that is not one value per
        record, returns None (the layer rules or ``torch.func`` then run).

        Parameters
        ----------
        loss_fn : callable
            ``loss_fn(logits, *targets)`` -> per-record losses.
        batch : tuple of torch.Tensor
            ``(inputs, *targets)``, inputs ``(*records, C, C)``.
        record_dims : int, default=1
            Leading axes that index records (2 for clients in lockstep).
        parameters : dict of str to torch.Tensor, optional
            Values instead of this model's own, by name (K clients' stacked
            blocks, ``(K, *shape)``).

        Returns
        -------
        dict of str to torch.Tensor or None
            ``(*records, *shape)`` per trainable parameter, in the order of
            ``named_parameters()``.
        """
        named = dict(self.named_parameters())  # a parameter shared by two layers is named once
        layout = self._closed_form_layout(named)
        if layout is None:
            return None
        normalize, blocks = layout
        values = {name: p.detach() for name, p in {**named, **(parameters or {})}.items()}
        trained = [name for name, p in named.items() if p.requires_grad]
        whitener = self.recentre.whitener if isinstance(self.recentre, Recentre) else None
        return bire_tangent_gradients(loss_fn, batch, normalize=normalize, blocks=blocks, values=values,
                                      trained=trained, record_dims=record_dims, whitener=whitener)

    def _closed_form_layout(self, named: dict[str, nn.Parameter]) -> tuple[bool, list[tuple[str, str, float]]] | None:
        """(normalize, [(BiMap's weight name, spectral kind, floor)]) of an SPDNet as built, else None.

        ``named`` is ``dict(self.named_parameters())``.
        """
        if not _built_as_declared(self):
            return None
        layers = list(self.features._modules.items())  # as the Sequential runs them: a layer listed twice runs twice
        normalize = bool(layers) and type(layers[0][1]) is TraceNormalize
        blocks = _bire_blocks(layers[1:] if normalize else layers)
        if blocks is None:
            return None
        covered = {name for name, _, _ in blocks} | {"classifier.weight", "classifier.bias"}
        if not covered <= set(named) or any(p.requires_grad and name not in covered for name, p in named.items()):
            return None
        return normalize, blocks

    def _tangent_gradients(self, loss_fn: LossFn, batch: tuple[torch.Tensor, ...], *, record_dims: int = 1,
                           parameters: dict[str, torch.Tensor] | None = None) -> PerRecordGradients | None:
        """:meth:`per_record_tangent_gradients` as the private step reads them (its capabilities' closed form)."""
        grads = self.per_record_tangent_gradients(loss_fn, batch, record_dims=record_dims, parameters=parameters)
        if grads is None:
            return None
        return DenseGradients(grads) if record_dims == 1 else StackedDenseGradients(grads)

    #: Stacks (client k's W on its records), with every record's tangent gradient in closed form.
    capabilities = ModelCapabilities(tangent_gradients=_tangent_gradients, stacks=True)


def _built_as_declared(net: SPDNet) -> bool:
    """Whether ``net`` computes what SPDNet's layers declare: the class itself, a plain Sequential of layers each
    listed once, a Linear classifier with a bias, no hook, no forward set on an instance."""
    if type(net) is not SPDNet or type(net.features) is not nn.Sequential or not _plain_classifier(net.classifier):
        return False
    if has_hooks(net) or any("forward" in vars(sub) for sub in net.modules()):
        return False
    if type(net.recentre) not in (nn.Identity, Recentre):
        return False
    layers = list(net.features._modules.values())
    return len({id(layer) for layer in layers}) == len(layers)


def _plain_classifier(classifier: nn.Module) -> bool:
    """A torch Linear layer with a bias, and Euclidean parameters."""
    if type(classifier) is not nn.Linear or classifier.bias is None:
        return False
    return all(getattr(p, "manifold", None) is None for p in classifier.parameters())


def _bire_blocks(layers: list[tuple[str, nn.Module]]) -> list[tuple[str, str, float]] | None:
    """(BiMap weight's name, spectral kind, floor) of each BiRe block of ``layers`` (BiMap, ReEig)..., BiMap,
    LogReEig, Vech; None for any other list."""
    if len(layers) < 3 or len(layers) % 2 != 1 or type(layers[-1][1]) is not Vech:
        return None
    pairs = list(zip(layers[:-1:2], layers[1:-1:2]))
    blocks = [_bire_block(bimap, spectral, position == len(pairs) - 1)
              for position, (bimap, spectral) in enumerate(pairs)]
    return None if None in blocks else blocks


def _bire_block(bimap: tuple[str, nn.Module], spectral: tuple[str, nn.Module],
                last: bool) -> tuple[str, str, float] | None:
    """(BiMap weight's name, spectral kind, floor) of a BiMap on the Stiefel manifold followed by a ReEig (the last
    block: a LogReEig); None for anything else."""
    (name, bimap), (_, spectral) = bimap, spectral
    if type(bimap) is not BiMap or type(spectral) is not (LogReEig if last else ReEig):
        return None
    if not isinstance(manifold_of(bimap.weight), Stiefel):
        return None
    floor = spectral.eps.detach() if torch.is_tensor(spectral.eps) else spectral.eps
    return f"features.{name}.weight", "log_reeig" if last else "reeig", float(floor)
