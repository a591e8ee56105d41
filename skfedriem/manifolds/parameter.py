"""Tagging torch parameters with the manifold they live on."""

from __future__ import annotations

import copy

import torch
from torch import nn

from .base import Manifold
from .euclidean import Euclidean

__all__ = ["ManifoldParameter", "manifold_of", "project_parameters_"]


class ManifoldParameter(nn.Parameter):
    """A :class:`torch.nn.Parameter` that knows its manifold (as in geoopt).

    The federated engine and the private step read ``param.manifold`` to
    project gradients, noise and iterates; untagged parameters are Euclidean.
    Survives ``copy.deepcopy``, ``pickle`` and ``torch.save``.

    Parameters
    ----------
    data : torch.Tensor
        Initial value; must be a point of ``manifold`` (it is not projected).
    manifold : Manifold
    requires_grad : bool, default=True

    Examples
    --------
    >>> import torch
    >>> from skfedriem.manifolds import Stiefel
    >>> St = Stiefel(4, 2)
    >>> W = ManifoldParameter(St.random_point(generator=torch.Generator().manual_seed(0)), St)
    >>> W.manifold
    Stiefel(4, 2)
    """

    manifold: Manifold

    def __new__(cls, data: torch.Tensor, manifold: Manifold, requires_grad: bool = True):
        if not isinstance(manifold, Manifold):
            raise TypeError(f"The 'manifold' of a ManifoldParameter must be a Manifold. Got {manifold!r} instead.")
        shape = tuple(data.shape[data.dim() - len(manifold.shape):])
        if shape != manifold.shape:
            raise ValueError(f"A point of {manifold!r} has shape {manifold.shape}; got data of shape {tuple(data.shape)}.")
        instance = super().__new__(cls, data, requires_grad)
        instance.manifold = manifold
        return instance

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        result = type(self)(
            self.data.clone(memory_format=torch.preserve_format),
            copy.deepcopy(self.manifold, memo),
            self.requires_grad,
        )
        memo[id(self)] = result
        return result

    def __reduce_ex__(self, protocol):
        return _rebuild_manifold_parameter, (self.data, self.manifold, self.requires_grad)

    def __repr__(self) -> str:
        return f"ManifoldParameter on {self.manifold!r} containing:\n{torch.Tensor.__repr__(self.data)}"


def _rebuild_manifold_parameter(data, manifold, requires_grad):
    return ManifoldParameter(data, manifold, requires_grad)


def manifold_of(param: torch.Tensor) -> Manifold:
    """The manifold of a parameter: its tag, or Euclidean of its shape.

    Parameters
    ----------
    param : torch.Tensor
        A parameter, tagged (:class:`ManifoldParameter`) or not.

    Returns
    -------
    manifold : Manifold
    """
    manifold = getattr(param, "manifold", None)
    return manifold if manifold is not None else Euclidean(*param.shape)


@torch.no_grad()
def project_parameters_(module: nn.Module) -> None:
    """Replace every manifold parameter of ``module`` by Π of itself, in place.

    Parameters
    ----------
    module : torch.nn.Module
    """
    for param in module.parameters():
        if isinstance(param, ManifoldParameter):
            param.copy_(param.manifold.proj(param))
