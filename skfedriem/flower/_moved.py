"""The module paths of ``skfedriem.flower`` before its modules were grouped by role: each old path is the new module
(the same object), with a ``FutureWarning``, until 0.3.

Flower App projects made before the move name ``skfedriem.flower.apps`` and ``skfedriem.flower.site_client``, and
Flower checks such a name by reading the module's file for a plain assignment: those two old modules therefore
assign each app by name (the standard library only here, so the site's light ClientApp stays light).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from types import ModuleType

#: Each old module of ``skfedriem.flower`` (a file of its own, which only points here) and where it is now.
MOVED = {"apps": "deployment.apps", "site_client": "deployment.site_client", "site_worker": "deployment.site_worker",
         "run_config": "deployment.run_config", "certificates": "operations.certificates",
         "loopback": "operations.loopback"}


def moved(old: str, new: str) -> ModuleType:
    """Import ``new``, make it the module ``old`` names too (``sys.modules``), and warn that ``old`` moved.

    Parameters
    ----------
    old, new : str
        Absolute module names.

    Returns
    -------
    module
        ``new``.
    """
    warnings.warn(f"{old} moved to {new}; the old path works until 0.3.", FutureWarning, stacklevel=3)
    module = importlib.import_module(new)
    sys.modules[old] = module
    return module
