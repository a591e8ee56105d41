"""Doctest collection: skip the Flower modules when the optional ``flower`` extra is absent."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("flwr") else ["skfedriem/flower/*"]
