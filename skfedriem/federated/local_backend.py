"""``backend="local"``: the clients on this machine, in this process or in worker processes (``n_jobs``).

The backend registers itself under ``"local"``; the round loop
(:meth:`~skfedriem.federated.FederatedTrainer.serve`) runs over the
in-process transport or the worker processes', unaware of which.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .._utils.backends import register_backend
from ..privacy.mechanisms.units import unit_count
from .client import ClientState
from .fixed_features import on_fixed_features
from .parallel import ParallelTransport, effective_n_jobs
from .transport import LocalTransport

__all__ = ["run_locally"]


def run_locally(trainer, clients: Sequence[tuple[torch.Tensor, ...]], names: list,
                client_seeds: list[np.random.SeedSequence | None], server_seq: np.random.SeedSequence) -> None:
    """``backend="local"``: the clients in this process, or in ``n_jobs`` worker processes.

    Parameters
    ----------
    trainer : FederatedTrainer
    clients : sequence of tuple of Tensor
        Client i's records.
    names : list
    client_seeds : list of SeedSequence or None
        Client i's secret seed (None: OS entropy, or the secure generator).
    server_seq : SeedSequence
        The server's selection stream.
    """
    sizes = [unit_count(c, trainer.settings.unit) for c in clients]
    states = [ClientState.fresh(seed, secure_mode=trainer.settings.secure_mode) for seed in client_seeds]
    n_jobs = min(effective_n_jobs(trainer.settings.n_jobs), trainer.clients_per_round(len(clients)))
    recipe = trainer.client_recipe(simulated=True)
    device = next(recipe.module.parameters(), torch.empty(0)).device
    recipe, clients = on_fixed_features(recipe, [tuple(t.to(device) for t in records) for records in clients])
    if n_jobs == 1:
        trainer.serve(LocalTransport(recipe, clients, states), sizes, names, server_seq)
        return
    with ParallelTransport(recipe, clients, states, n_jobs=n_jobs) as transport:
        trainer.serve(transport, sizes, names, server_seq)


register_backend(run_locally, name="local")
