"""skfedriem: scikit-learn estimators for federated learning on Riemannian
manifolds with record-level differential privacy.

Implements DP-RFedProj of Pautrel, Bouchard, Ginolhac, Mian & Bellet,
"Projection-Based Federated Learning on Compact Submanifolds with
Geometry-Independent Differential Privacy" (arXiv 2610.33712, 2026).
"""

__version__ = "0.1.0"

from . import baselines  # noqa: E402, F401 - registers accounting="prirfed"
from .classification import FederatedEEGNetClassifier, FederatedSPDNetClassifier  # noqa: E402
from .decomposition import FederatedPCA  # noqa: E402
from .federated import register_backend  # noqa: E402


def _flower_simulation(trainer, clients, names, client_seeds, server_seq) -> None:
    """``backend="flower"``: imported when first used (Flower and Ray take seconds to import)."""
    from .flower.simulation import run_trainer_in_simulation

    run_trainer_in_simulation(trainer, clients, names, client_seeds, server_seq)


register_backend(_flower_simulation, name="flower")

__all__ = ["FederatedEEGNetClassifier", "FederatedPCA", "FederatedSPDNetClassifier", "__version__"]
