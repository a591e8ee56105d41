"""Running skfedriem's protocol on Flower (https://flower.ai), the federated engine.

* ``backend="flower"`` on any estimator: Flower's in-process simulation engine.
* :mod:`skfedriem.flower.apps`: the ServerApp and ClientApp of a real
  deployment of each estimator (``flower-superlink``, one ``flower-supernode``
  per site, ``flwr run``), with their Flower App projects (:data:`~skfedriem.flower.apps.APP_DIRS`);
  a deployed site's SuperNode runs the light ClientApp of :mod:`skfedriem.flower.site_client`,
  which hands each message to the site's resident worker (:mod:`skfedriem.flower.site_worker`);
  :mod:`skfedriem.flower.loopback` runs a deployment on this host, with TLS and
  authenticated SuperNodes.

Needs the optional dependencies: ``pip install "skfedriem[flower]"``. The names
below are imported when first used, so that the site's ClientApp, which a
SuperNode starts for every message, imports neither torch nor the estimators.
"""

import importlib

try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError('The Flower backend needs Flower: pip install "skfedriem[flower]".') from exc

__all__ = ["ClientInfo", "ClientSetup", "FlowerTransport", "NodeDirectory", "PrivacyBudgetExceeded", "SiteGuard",
           "make_client_app"]

_WHERE = {"ClientSetup": "._client_app", "PrivacyBudgetExceeded": "._client_app", "SiteGuard": "._client_app",
          "make_client_app": "._client_app", "ClientInfo": "._protocol", "FlowerTransport": "._protocol",
          "NodeDirectory": "._protocol"}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
