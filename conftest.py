"""Doctest collection: skip the Flower modules when the optional ``flower`` extra is absent, and the old paths of
moved Flower modules always (each is the moved module itself, collected where it now lives)."""

import importlib.util

_OLD_FLOWER_PATHS = ["apps", "site_client", "site_worker", "run_config", "certificates", "loopback"]
collect_ignore_glob = [] if importlib.util.find_spec("flwr") else ["skfedriem/flower/*"]
collect_ignore = [f"skfedriem/flower/{name}.py" for name in _OLD_FLOWER_PATHS]
