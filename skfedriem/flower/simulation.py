"""``backend="flower"``: a FederatedTrainer run on Flower's simulation engine.

The ServerApp runs :meth:`FederatedTrainer.serve` (in a thread of this
process, so it trains the estimator's module in place); each client is a
virtual SuperNode whose ClientApp runs in a Ray worker process. Each client's
records go to a private temporary file read only by that client's ClientApp,
so messages carry θ_t and submissions only.
"""

from __future__ import annotations

import copy
import logging
import os
import tempfile
import warnings
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

try:
    import ray  # noqa: F401 - Flower's simulation engine runs the virtual clients on Ray
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError('backend="flower" needs Flower\'s simulation engine: pip install "skfedriem[flower]".') from exc
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation
from ..federated.client import ClientRecipe
from ..federated.fixed_features import on_fixed_features
from ..federated.progress import verbosity
from .protocol.client_app import ClientSetup, make_client_app
from .protocol.messages import FlowerTransport, NodeDirectory

__all__ = ["run_trainer_in_simulation"]

# Per Ray worker process: records and working copies already loaded, by file.
_LOADED: dict[str, ClientSetup] = {}


@dataclass
class _SimulationClients:
    """Builds client i's setup inside a Ray worker (pickled with every message: keep it small)."""

    folder: str
    names: list[str]
    seeds: list[np.random.SeedSequence | None]
    secure_mode: bool
    timings: bool
    recipe: ClientRecipe

    def __call__(self, context: Context) -> ClientSetup:
        i = int(context.node_config["partition-id"])
        path = os.path.join(self.folder, f"client-{i}.pt")
        if path not in _LOADED:
            torch.set_num_threads(1)  # one core per virtual client
            recipe, (data,) = on_fixed_features(copy.deepcopy(self.recipe), [tuple(torch.load(path, weights_only=True))])
            _LOADED[path] = ClientSetup(self.names[i], data, recipe, seed=self.seeds[i],
                                        secure_mode=self.secure_mode, timings=self.timings)
        return _LOADED[path]


@contextmanager
def _quiet_flower(verbose: int):
    """Flower and Ray log every message at INFO; keep them quiet unless verbose > 1."""
    loggers = [logging.getLogger(name) for name in ("flwr", "ray")]
    levels = [lg.level for lg in loggers]
    if verbose <= 1:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def run_trainer_in_simulation(trainer, clients: Sequence[tuple[torch.Tensor, ...]], names: list,
                              client_seeds: list[np.random.SeedSequence | None],
                              server_seq: np.random.SeedSequence, *, cpus_per_client: float = 1.0) -> None:
    """Run ``trainer``'s rounds with one Flower virtual SuperNode per client.

    Same seeds as the local backend: client i's secret randomness comes from
    ``client_seeds[i]`` (or the secure generator in ``trainer.settings.secure_mode``)
    and the server's selection from ``server_seq``, so a run without noise
    reproduces the local backend's model to float tolerance, and ε is the same.

    Parameters
    ----------
    trainer : FederatedTrainer
        Planned and initialised; it is trained in place.
    clients : sequence of tuple of Tensor
        Client i's records.
    names : list
        Client i's name (distinct as strings).
    client_seeds : list of SeedSequence or None
        Client i's seed; None: OS entropy.
    server_seq : SeedSequence
        Seeds the server's client selection.
    cpus_per_client : float, default=1.0
        Flower's per-SuperNode CPU reservation.
    """
    str_names = [str(n) for n in names]
    if len(set(str_names)) != len(str_names):
        raise ValueError(f"Client names must be distinct as strings for the Flower backend. Got {names!r}.")
    failure: list[BaseException] = []
    with tempfile.TemporaryDirectory(prefix="skfedriem-flower-") as folder:
        for i, data in enumerate(clients):
            torch.save(tuple(x.contiguous() for x in data), Path(folder) / f"client-{i}.pt")
        setup = _SimulationClients(folder, str_names, list(client_seeds), trainer.settings.secure_mode, trainer.settings.client_timings,
                                   trainer.client_recipe())
        server = ServerApp()

        @server.main()
        def main(grid: Grid, context: Context) -> None:
            try:
                directory = NodeDirectory(grid)
                _, sizes, _ = directory.discover(len(clients), timeout=300.0, order=str_names)
                trainer.serve(FlowerTransport(directory, str_names, sizes, on_failure="raise"), sizes, list(names), server_seq)
            except BaseException as exc:  # re-raised in the caller's thread below
                failure.append(exc)
                raise

        level = verbosity(trainer.settings.verbose)
        with _quiet_flower(level), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Tip: In future versions of Ray", category=FutureWarning)
            try:
                run_simulation(server, make_client_app(setup), num_supernodes=len(clients),
                               backend_config={"client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0},
                                               "init_args": {"log_to_driver": level > 1}})
            except BaseException:
                if not failure:
                    raise
    if failure:
        raise failure[0]
    if not hasattr(trainer, "history_") or len(trainer.history_) != trainer.settings.n_rounds:
        raise RuntimeError("The Flower simulation ended before the last round; see Flower's log above.")
