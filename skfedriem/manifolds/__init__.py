"""Parameter geometries: compact embedded manifolds with the induced metric."""

from .base import ConvergenceError, Manifold, sym
from .euclidean import Euclidean
from .grassmann import Grassmann
from .optim import ProjectedAdam, ProjectedOptimizerMixin, ProjectedSGD
from .parameter import ManifoldParameter, manifold_of, project_parameters_
from .sphere import Sphere
from .stiefel import Stiefel

__all__ = [
    "ConvergenceError",
    "Euclidean",
    "Grassmann",
    "Manifold",
    "ManifoldParameter",
    "ProjectedAdam",
    "ProjectedOptimizerMixin",
    "ProjectedSGD",
    "Sphere",
    "Stiefel",
    "manifold_of",
    "project_parameters_",
    "sym",
]
