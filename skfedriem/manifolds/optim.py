"""torch optimisers that keep manifold parameters on their manifold: for centralised, non-private training.

The same update as one private local step without clipping and noise:
the gradient of every :class:`~skfedriem.manifolds.ManifoldParameter` is
projected onto its tangent space, the wrapped optimiser steps on the ambient
tensor, and the parameter is projected back, θ ← Π(θ − u). Euclidean
parameters are untouched. They are ordinary ``torch.optim.Optimizer``
classes, so skorch and any torch training loop take them as they are::

    skorch.NeuralNetClassifier(SPDNet, module__n_channels=22, module__n_classes=4,
                               optimizer=ProjectedAdam, lr=1e-2, ...)
"""

from __future__ import annotations

import torch

from .parameter import ManifoldParameter

__all__ = ["ProjectedAdam", "ProjectedOptimizerMixin", "ProjectedSGD"]


class ProjectedOptimizerMixin:
    """Put before a ``torch.optim.Optimizer`` class: tangent gradients in, manifold parameters out."""

    def step(self, closure=None):
        manifold_params = [p for group in self.param_groups for p in group["params"]
                           if isinstance(p, ManifoldParameter)]
        with torch.no_grad():
            for p in manifold_params:
                if p.grad is not None:
                    p.grad.copy_(p.manifold.proju(p, p.grad))
        loss = super().step(closure)
        with torch.no_grad():
            for p in manifold_params:
                p.copy_(p.manifold.proj(p))
        return loss


class ProjectedSGD(ProjectedOptimizerMixin, torch.optim.SGD):
    """SGD with projection onto the manifold (Riemannian SGD with the projective retraction).

    Takes the arguments of :class:`torch.optim.SGD`, unchanged; only
    :class:`~skfedriem.manifolds.ManifoldParameter` tensors are treated
    differently (tangent gradient in, projection out).

    Examples
    --------
    >>> import torch
    >>> from skfedriem.manifolds import ManifoldParameter, Sphere
    >>> u = ManifoldParameter(torch.tensor([1.0, 0.0]), Sphere(2))
    >>> opt = ProjectedSGD([u], lr=0.5)
    >>> (-(u @ torch.tensor([0.6, 0.8])) ** 2).backward()
    >>> opt.step()
    >>> round(float(u.detach().norm()), 6)
    1.0
    """


class ProjectedAdam(ProjectedOptimizerMixin, torch.optim.Adam):
    """Adam on the ambient tensors, tangent gradients in and projection out (as the private step does).

    Takes the arguments of :class:`torch.optim.Adam`, unchanged; only
    :class:`~skfedriem.manifolds.ManifoldParameter` tensors are treated
    differently. Adam's moments live in the ambient space: the update is the
    one a private local step with ``optimizer="adam"`` takes, without clipping
    and noise.
    """
