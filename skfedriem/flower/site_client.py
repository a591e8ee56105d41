"""Moved to :mod:`skfedriem.flower.deployment.site_client` (this path works, with a ``FutureWarning``, until 0.3): Flower App
projects made before the move name its apps here."""

from ._moved import moved

_module = moved(__name__, "skfedriem.flower.deployment.site_client")
# one plain assignment each: Flower checks a project's app by reading this file for it
pca_client_app = _module.pca_client_app
spdnet_client_app = _module.spdnet_client_app
eegnet_client_app = _module.eegnet_client_app
tangent_client_app = _module.tangent_client_app
