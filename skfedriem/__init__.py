"""skfedriem: scikit-learn estimators for federated learning on Riemannian
manifolds with record-level differential privacy.

Implements DP-RFedProj of Pautrel, Bouchard, Ginolhac, Mian & Bellet,
"Projection-Based Federated Learning on Compact Submanifolds with
Geometry-Independent Differential Privacy" (arXiv 2610.33712, 2026).

The estimators are imported when first used (``from skfedriem import
FederatedPCA``): importing the package itself loads neither torch nor
scikit-learn, which a deployed site's ClientApp, started for every message,
relies on.
"""

import importlib

from ._utils.backends import register_backend as _register_backend

__version__ = "0.1.0"
__all__ = ["FederatedEEGNetClassifier", "FederatedPCA", "FederatedSPDNetClassifier", "FederatedTangentSpaceClassifier",
           "__version__"]

_ESTIMATORS = {"FederatedEEGNetClassifier": ".classification", "FederatedSPDNetClassifier": ".classification",
               "FederatedTangentSpaceClassifier": ".classification", "FederatedPCA": ".decomposition"}


def __getattr__(name: str):
    if name in _ESTIMATORS:
        return getattr(importlib.import_module(_ESTIMATORS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _flower_simulation(trainer, clients, names, client_seeds, server_seq) -> None:
    """``backend="flower"``: imported when first used (Flower and Ray take seconds to import)."""
    from .flower.simulation import run_trainer_in_simulation

    run_trainer_in_simulation(trainer, clients, names, client_seeds, server_seq)


_register_backend(_flower_simulation, name="flower")
