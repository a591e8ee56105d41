"""Running skfedriem's protocol on Flower (https://flower.ai), the federated engine.

* ``backend="flower"`` on any estimator: Flower's in-process simulation engine.
* :mod:`skfedriem.flower.apps`: the ServerApp and ClientApp of a real
  deployment of each estimator (``flower-superlink``, one ``flower-supernode``
  per site, ``flwr run``), with their Flower App projects (:data:`~skfedriem.flower.apps.APP_DIRS`);
  :mod:`skfedriem.flower.loopback` runs one on this host, with TLS and
  authenticated SuperNodes.

Needs the optional dependencies: ``pip install "skfedriem[flower]"``.
"""

try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError('The Flower backend needs Flower: pip install "skfedriem[flower]".') from exc

from ._client_app import ClientSetup, PrivacyBudgetExceeded, SiteGuard, make_client_app
from ._protocol import ClientInfo, FlowerTransport, NodeDirectory

__all__ = ["ClientInfo", "ClientSetup", "FlowerTransport", "NodeDirectory", "PrivacyBudgetExceeded", "SiteGuard",
           "make_client_app"]
