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

__all__ = ["FederatedEEGNetClassifier", "FederatedPCA", "FederatedSPDNetClassifier", "__version__"]
