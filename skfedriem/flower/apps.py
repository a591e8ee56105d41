"""Moved to :mod:`skfedriem.flower.deployment.apps` (this path works, with a ``FutureWarning``, until 0.3): Flower App
projects made before the move name its apps here."""

from ._moved import moved

_module = moved(__name__, "skfedriem.flower.deployment.apps")
# one plain assignment each: Flower checks a project's app by reading this file for it
pca_server_app = _module.pca_server_app
spdnet_server_app = _module.spdnet_server_app
eegnet_server_app = _module.eegnet_server_app
tangent_server_app = _module.tangent_server_app
