"""Running skfedriem's protocol on Flower (https://flower.ai), the federated engine; the modules by role:

* :mod:`skfedriem.flower.simulation`: ``backend="flower"`` on any estimator, Flower's in-process simulation engine.
* :mod:`skfedriem.flower.deployment`: a real deployment of each estimator (``flower-superlink``, one
  ``flower-supernode`` per site, ``flwr run``): its ServerApp and site ClientApp
  (:mod:`~skfedriem.flower.deployment.apps`, with their Flower App projects,
  :data:`~skfedriem.flower.deployment.apps.APP_DIRS`), the run configuration, and the light ClientApp a site's
  SuperNode runs (:mod:`~skfedriem.flower.deployment.site_client`), which hands each message to the site's
  resident worker (:mod:`~skfedriem.flower.deployment.site_worker`).
* :mod:`skfedriem.flower.operations`: test certificates and keys, and a secured deployment on this host
  (:mod:`~skfedriem.flower.operations.loopback`).
* :mod:`skfedriem.flower.protocol`: what the simulation and the deployments share (the messages, the ClientApp
  around a client's round and what a site refuses), and secure aggregation on deployed sites for rounds of
  distributed noise (:mod:`~skfedriem.flower.protocol.secure_site`, :mod:`~skfedriem.flower.protocol.secure_rounds`).

The modules' paths before this grouping (``skfedriem.flower.apps``, ``site_client``, ``site_worker``, ``run_config``,
``certificates``, ``loopback``) are the new modules, with a ``FutureWarning``, until 0.3.

Needs the optional dependencies: ``pip install "skfedriem[flower]"``. The names
below are imported when first used, so that the site's ClientApp, which a
SuperNode starts for every message, imports neither torch nor the estimators.
"""

import importlib

try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError('The Flower backend needs Flower: pip install "skfedriem[flower]".') from exc

__all__ = ["ClientInfo", "ClientSetup", "DistributedNoise", "FlowerTransport", "NodeDirectory", "PrivacyBudgetExceeded",
           "SecureAggregation", "SiteGuard", "make_client_app"]

_WHERE = {"ClientSetup": ".protocol.client_app", "PrivacyBudgetExceeded": ".protocol.client_app",
          "SiteGuard": ".protocol.client_app", "make_client_app": ".protocol.client_app",
          "ClientInfo": ".protocol.messages", "FlowerTransport": ".protocol.messages",
          "NodeDirectory": ".protocol.messages", "DistributedNoise": ".protocol.secure_site",
          "SecureAggregation": ".protocol.secure_rounds"}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
