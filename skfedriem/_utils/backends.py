"""How a run reaches its clients, by name (a registry with no heavy imports: the top-level package fills it)."""

from __future__ import annotations

from collections.abc import Callable

from .registry import Registry

__all__ = ["BACKENDS", "register_backend"]

#: How a run reaches its clients, by name: ``"local"`` (this process, or its worker processes) is the
#: trainer's own; ``"flower"`` (Flower's simulation engine) is registered by :mod:`skfedriem` when imported.
BACKENDS: Registry[Callable] = Registry("backend")


def register_backend(run: Callable, *, name: str, force: bool = False) -> Callable:
    """Make ``run(trainer, clients, names, client_seeds, server_seq)`` available as ``backend=name``.

    ``run`` must train ``trainer`` by calling :meth:`~skfedriem.federated.FederatedTrainer.serve`
    over a transport to the clients (see :func:`~skfedriem.federated.engine.run_locally`).

    Parameters
    ----------
    run : callable
    name : str
    force : bool, default=False
        Replace a backend already registered under that name.

    Returns
    -------
    run : callable
        The same object.
    """
    if not callable(run):
        raise TypeError(f"register_backend needs a callable. Got {type(run).__name__} instead.")
    return BACKENDS.register(run, name=name, force=force)
