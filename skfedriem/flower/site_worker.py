"""Moved to :mod:`skfedriem.flower.deployment.site_worker` (this path works, with a ``FutureWarning``, until 0.3):
``python -m skfedriem.flower.site_worker`` still runs it."""

from ._moved import moved

_module = moved("skfedriem.flower.site_worker", "skfedriem.flower.deployment.site_worker")
if __name__ == "__main__":
    _module.main()
