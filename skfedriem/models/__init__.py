"""Torch modules with manifold-tagged parameters."""

from .pca import PCAProjector

__all__ = ["PCAProjector"]
