"""Where a deployed site keeps its files: read by the site app (which imports torch) and by the light ClientApp
(which must not), so it lives apart from both."""

from __future__ import annotations

__all__ = ["default_ledger_path"]


def default_ledger_path(node_config) -> str:
    """The site's ledger file: ``ledger-path``, else next to its data file (``<data-path>.privacy-ledger.json``).

    Parameters
    ----------
    node_config : mapping
        The SuperNode's node configuration.

    Returns
    -------
    str
    """
    return str(node_config.get("ledger-path", str(node_config["data-path"]) + ".privacy-ledger.json"))
