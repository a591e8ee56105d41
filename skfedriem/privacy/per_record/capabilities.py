"""What a model or a layer tells the private step about itself: one declaration, read by one function.

A module declares a :class:`ModelCapabilities` as a class attribute
``capabilities`` of its own class (a subclass does not inherit it: a subclass
may change what its parent computed), or one is registered for a class it
cannot be written into (torch's own layers: :func:`register_capabilities`).
Every question the private step, the lockstep clients and the planner ask of a
model is answered by :func:`capabilities_of`:

* ``diameter``: how far apart two records' clipped gradients can be, in units
  of C (what a step's sensitivity is; 2 for gradients that may point anywhere);
* ``tangent_gradients``: a closed form of every record's tangent gradient (the
  private step's first route);
* ``per_record_rule`` (a layer): each record's gradient of the layer's own
  parameters from its input and output gradient, after one backward pass of
  the batch (:mod:`skfedriem.privacy.per_record.layerwise`);
* ``stacks`` and ``stacked``: the layer applies K clients' parameters
  ``(K, *shape)`` to their records ``(K, B, ...)`` itself, or ``stacked(layer)``
  is a copy that does (clients in lockstep, :mod:`skfedriem.federated.lockstep`);
* ``fixed_features``: a public feature map the clients compute once per fit,
  and the trained rest of the model (:mod:`skfedriem.federated.fixed_features`).

A module declaring nothing is any torch module: per-record gradients by
``torch.func``, diameter 2, stacked only through ``torch.func`` too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

__all__ = ["ModelCapabilities", "capabilities_of", "register_capabilities"]


@dataclass(frozen=True)
class ModelCapabilities:
    """What a module supports, declared once (module docstring).

    Parameters
    ----------
    diameter : float, default=2.0
        The largest ‖clip_C(g_z) − clip_C(g_z')‖ over two records, in units of
        C, in (0, 2]: a model whose clipped per-record gradients lie in a
        smaller set says so (the rank-one second moments of
        :class:`~skfedriem.models.SecondMoment`, √2). The noise is calibrated,
        and every ledger charged, from it.
    tangent_gradients : callable, optional
        ``tangent_gradients(module, loss_fn, batch, *, record_dims, parameters)``
        -> :class:`~skfedriem.privacy.PerRecordGradients` of every record's
        tangent gradient P_θ ∇f(θ; z), or None where the closed form does not
        apply (the next route runs). ``record_dims`` leading axes index records
        (2 for clients in lockstep); ``parameters``, when given, are the values
        to differentiate at, by name (K clients' stacked blocks).
    per_record_rule : callable, optional
        A layer's rule ``per_record_rule(layer, X, grad_output)`` ->
        ``{local parameter name: (*records, *shape)}``.
    rule_input_dims : int, optional
        How many trailing axes of the layer's input the rule expects after the
        record axes (None: any); on other inputs the ``torch.func`` route runs.
    stacks : bool, default=False
        The module's forward (and its rule) apply K stacked parameters to K
        clients' records, client k's to client k's, and mix nothing across
        clients or records. A stack checks the claim once
        (:meth:`~skfedriem.federated.lockstep.ClientStack.verify`).
    stacked : callable, optional
        ``stacked(module)`` -> a module with the same parameters that stacks,
        for a layer whose own forward does not (``nn.Linear``).
    fixed_features : callable, optional
        ``fixed_features(module)`` -> ``(feature_map, head)``: the public map of
        each record's features (no parameter, nothing but public values), and
        the module training every parameter of ``module`` on them.

    Examples
    --------
    >>> import math
    >>> ModelCapabilities(diameter=math.sqrt(2)).stacks
    False
    """

    diameter: float = 2.0
    tangent_gradients: Callable | None = None
    per_record_rule: Callable | None = None
    rule_input_dims: int | None = None
    stacks: bool = False
    stacked: Callable[[nn.Module], nn.Module] | None = None
    fixed_features: Callable[[nn.Module], tuple[Callable, nn.Module]] | None = None

    def __post_init__(self) -> None:
        diameter = self.diameter
        if isinstance(diameter, bool) or not isinstance(diameter, (int, float)) or not 0 < diameter <= 2:
            raise ValueError("A model's clipped-gradient 'diameter' must be in (0, 2]: two clipped gradients are at "
                             f"most 2C apart. Got {diameter!r} instead.")
        object.__setattr__(self, "diameter", float(diameter))

    @property
    def can_stack(self) -> bool:
        """Whether K clients' copies of the module run as one (by its own forward, or by ``stacked``)."""
        return self.stacks or self.stacked is not None


_NOTHING = ModelCapabilities()
_REGISTERED: dict[type, ModelCapabilities] = {}


def register_capabilities(cls: type[nn.Module], capabilities: ModelCapabilities, *, force: bool = False) -> None:
    """Declare what the modules of class ``cls`` (exactly that class) support, for a class one cannot edit.

    Parameters
    ----------
    cls : type
        A subclass of ``torch.nn.Module``.
    capabilities : ModelCapabilities
    force : bool, default=False
        Replace a declaration already registered for ``cls``.

    Examples
    --------
    >>> import torch
    >>> capabilities_of(torch.nn.ReLU()).stacks   # an element-wise layer without parameters
    True
    """
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"register_capabilities needs a torch.nn.Module class. Got {cls!r} instead.")
    if not isinstance(capabilities, ModelCapabilities):
        raise TypeError(f"register_capabilities needs a ModelCapabilities. Got {type(capabilities).__name__} instead.")
    if cls in _REGISTERED and not force:
        raise ValueError(f"Capabilities are registered for {cls.__name__} already; pass force=True to replace them.")
    _REGISTERED[cls] = capabilities


def capabilities_of(module: nn.Module) -> ModelCapabilities:
    """What ``module`` supports: its own class's ``capabilities``, else its class's registration, else nothing.

    Parameters
    ----------
    module : torch.nn.Module

    Returns
    -------
    ModelCapabilities
    """
    declared = vars(type(module)).get("capabilities")
    if declared is not None:
        if not isinstance(declared, ModelCapabilities):
            raise TypeError(f"{type(module).__name__}.capabilities must be a ModelCapabilities. "
                            f"Got {type(declared).__name__} instead.")
        return declared
    return _REGISTERED.get(type(module), _NOTHING)
