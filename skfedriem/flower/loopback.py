"""Moved to :mod:`skfedriem.flower.operations.loopback` (this path works, with a ``FutureWarning``, until 0.3):
``python -m skfedriem.flower.loopback`` still runs it."""

from ._moved import moved

_module = moved("skfedriem.flower.loopback", "skfedriem.flower.operations.loopback")
if __name__ == "__main__":
    _module.main()
