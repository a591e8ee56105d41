"""Running skfedriem's protocol on Flower (https://flower.ai), the federated engine.

* ``backend="flower"`` on any estimator: Flower's in-process simulation engine.
* :mod:`skfedriem.flower.pca_app`: the ServerApp and ClientApp of a real
  FederatedPCA deployment (``flower-superlink``, one ``flower-supernode`` per
  site, ``flwr run``); :mod:`skfedriem.flower.loopback` runs one on this host.

Needs the optional dependencies: ``pip install "skfedriem[flower]"``.
"""

try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError('The Flower backend needs Flower: pip install "skfedriem[flower]".') from exc

from ._client_app import ClientSetup, PrivacyBudgetExceeded, make_client_app
from ._protocol import FlowerTransport, discover_clients

__all__ = ["ClientSetup", "FlowerTransport", "PrivacyBudgetExceeded", "discover_clients", "make_client_app"]
