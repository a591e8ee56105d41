"""``backend="flower"``: a FederatedTrainer run on Flower's simulation engine.

The ServerApp runs :meth:`FederatedTrainer.serve` (in a thread of this
process, so it trains the estimator's module in place); each client is a
virtual SuperNode whose ClientApp runs in a Ray worker process. Each client's
records go to a private temporary file read only by that client's ClientApp,
so messages carry θ_t and submissions only.

With distributed noise the virtual clients are sites of the deployed protocol:
each gets a fresh signing key and the roster of the others' public keys, its
own ledgers in the temporary folder (no budget: the caller's trainer certifies
the run) and consents to rounds of the plan's K and t, and every round runs the
deployed secure aggregation (keys and shares, masked releases, unmasking) over
Flower's messages, every release from fresh OS entropy as a deployed site's (so
such a run is not reproducible, whatever its seeds). Nothing of it outlives the
run.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

try:
    import ray  # Flower's simulation engine runs the virtual clients on Ray
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError('backend="flower" needs Flower\'s simulation engine: pip install "skfedriem[flower]".') from exc
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation
from ..federated.client import ClientRecipe
from ..federated.fixed_features import on_fixed_features
from ..federated.progress import verbosity
from ..privacy.mechanisms.units import unit_count
from ..secure_aggregation import SiteIdentity
from .protocol.client_app import ClientSetup, SiteGuard, make_client_app
from .protocol.messages import FlowerTransport, NodeDirectory
from .protocol.secure_site import DistributedNoise

__all__ = ["run_trainer_in_simulation"]

# Per Ray worker process: records and working copies already loaded, by file.
_LOADED: dict[str, ClientSetup] = {}


@dataclass(frozen=True)
class _SecureSites:
    """What the virtual sites of a run of distributed noise share: the round's K and t, and the roster (each site
    reads its own signing key from the run's temporary folder)."""

    clients: int
    colluders: int
    dropouts: int
    roster: dict[str, bytes]  # name -> public key, PEM

    @classmethod
    def make(cls, folder: str, names: list[str], clients: int, colluders: int, dropouts: int) -> _SecureSites:
        """A fresh P-384 key pair per site (the private key in ``folder``, readable by this account alone)."""
        roster = {}
        for name in names:
            key = ec.generate_private_key(ec.SECP384R1())
            path = Path(folder) / f"{_safe(name)}.key"
            path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
            path.chmod(0o600)
            roster[name] = key.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo)
        return cls(clients, colluders, dropouts, roster)

    def guard(self, folder: str, name: str, delta: float) -> SiteGuard:
        """Site ``name``'s guard: its ledgers in ``folder``, no budget of its own, consent to the run's K, t and d."""
        signing = serialization.load_pem_private_key((Path(folder) / f"{_safe(name)}.key").read_bytes(), None)
        roster = {site: serialization.load_pem_public_key(pem) for site, pem in self.roster.items()}
        consent = DistributedNoise(SiteIdentity(name, signing, roster), self.clients, self.colluders, self.dropouts)
        return SiteGuard(ledger_path=str(Path(folder) / f"{_safe(name)}.ledger.json"), max_epsilon=math.inf,
                         delta=delta, distributed=consent)


def _safe(name: str) -> str:
    """A file name for a client's name: the hex of its UTF-8 (any name, never a path)."""
    return name.encode().hex()


@dataclass
class _SimulationClients:
    """Builds client i's setup inside a Ray worker (pickled with every message: keep it small)."""

    folder: str
    names: list[str]
    seeds: list[np.random.SeedSequence | None]
    secure_mode: bool
    timings: bool
    recipe: ClientRecipe
    secure: _SecureSites | None = None
    delta: float = 1e-5

    def __call__(self, context: Context) -> ClientSetup:
        i = int(context.node_config["partition-id"])
        path = os.path.join(self.folder, f"client-{i}.pt")
        if path not in _LOADED:
            torch.set_num_threads(1)  # one core per virtual client
            recipe, (data,) = on_fixed_features(copy.deepcopy(self.recipe), [tuple(torch.load(path, weights_only=True))])
            guard = None if self.secure is None else self.secure.guard(self.folder, self.names[i], self.delta)
            _LOADED[path] = ClientSetup(self.names[i], data, recipe, seed=self.seeds[i],
                                        secure_mode=self.secure_mode, timings=self.timings, guard=guard)
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


@contextmanager
def _normal_priority_workers() -> Iterator[None]:
    """Ray starts its workers at niceness 15: beside two busy processes on two cores a virtual site then got 4 % of
    a core and did not describe itself within 300 s (the run failed). The workers run at the caller's priority, as
    the in-process backend's threads do, unless ``RAY_worker_niceness`` is set already."""
    if "RAY_worker_niceness" in os.environ:
        yield
        return
    os.environ["RAY_worker_niceness"] = "0"
    try:
        yield
    finally:
        del os.environ["RAY_worker_niceness"]


def _clients_in(folder: str, trainer, clients: Sequence[tuple[torch.Tensor, ...]], names: list[str],
                client_seeds: list[np.random.SeedSequence | None]) -> _SimulationClients:
    """The virtual clients' setup: each one's records in ``folder`` and, with distributed noise, the sites' keys."""
    for i, data in enumerate(clients):
        torch.save(tuple(x.contiguous() for x in data), Path(folder) / f"client-{i}.pt")
    # the plan of these clients (the server's, made again from the same sizes when it serves): its placement
    plan = trainer.pricing.plan([unit_count(c, trainer.settings.unit) for c in clients], list(names))
    encoding = plan.encoding
    secure = (_SecureSites.make(folder, names, encoding.clients, encoding.colluders, encoding.dropouts)
              if plan.placement.secure_sum else None)
    return _SimulationClients(folder, names, list(client_seeds), trainer.settings.secure_mode,
                              trainer.settings.client_timings, trainer.client_recipe(), secure, trainer.settings.delta)


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
        setup = _clients_in(folder, trainer, clients, str_names, client_seeds)
        if setup.secure is not None and ray.is_initialized():  # Flower would fill its workers, ignoring ours
            raise RuntimeError("Distributed noise on Flower's simulation runs its sites in one Ray worker of its own "
                               "(their secure-aggregation sessions live in its memory), and Ray is already running "
                               "in this process: call ray.shutdown() first.")
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
            # a site keeps its secure-aggregation sessions in its process's memory, as a deployed SuperNode does,
            # and Flower's simulation does not pin a virtual node to a Ray worker: a run of distributed noise has
            # one worker, whose sites take turns
            workers = {} if setup.secure is None else {"num_cpus": cpus_per_client}
            try:
                with _normal_priority_workers():
                    run_simulation(server, make_client_app(setup), num_supernodes=len(clients),
                                   backend_config={"client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0},
                                                   "init_args": {"log_to_driver": level > 1, **workers}})
            except BaseException:
                if not failure:
                    raise
    if failure:
        raise failure[0]
    if not hasattr(trainer, "history_") or len(trainer.history_) != trainer.settings.n_rounds:
        raise RuntimeError("The Flower simulation ended before the last round; see Flower's log above.")
