"""Clients in parallel worker processes, and the thread budget of their tiny-matrix work.

A round's selected clients are independent until the server averages their
submissions, so they can run at the same time. :class:`ParallelTransport`
runs them in ``n_jobs`` jobs: this process and ``n_jobs - 1`` worker
processes. Each worker receives the recipe and every client's records once,
when it starts; a round then ships, per client a worker runs, only θ_t, the
client's :class:`~skfedriem.federated.client.ClientState` and its
instructions, and gets back the submission and the advanced state.
Which worker runs which client does not matter: a client's round is a
function of those inputs alone, computed with the same number of threads
(:data:`THREADS_PER_JOB`) as in-process, so a fit gives bit-identical
results for every ``n_jobs``.

The worker processes are children of this process on this machine: the
records they receive never leave it, and they run exactly the code the
in-process clients run (:func:`~skfedriem.federated.client.run_client_round`).
They are started by loky (joblib's process executor), which starts a fresh
interpreter (fork then exec: no copy of torch's thread pools) and, unlike
multiprocessing's spawn and forkserver, does not re-run the user's script, so
a script needs no ``if __name__ == "__main__":`` guard.

Thread budget. The local steps are many operations on tiny matrices (SPDNet's
16×16 eigendecompositions, a 40×5 PCA basis). Spreading one of them over
several threads costs more in synchronisation than it saves, and on a machine
where other jobs hold the cores a waiting thread stalls the whole operation
(measured: a 35 s run took 812 s with torch's default threads next to a busy
process). So every job computes with :data:`THREADS_PER_JOB` thread(s),
torch's intra-op pool and the BLAS/OpenMP pools alike, and ``n_jobs`` is the
one knob for using more cores.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Self

import joblib
import torch
from loky import ProcessPoolExecutor
from threadpoolctl import threadpool_limits

from .client import ClientRecipe, ClientState
from .client_round import run_clients
from .instructions import RoundInstructions
from .transport import Replies

__all__ = ["THREADS_PER_JOB", "ParallelTransport", "effective_n_jobs", "thread_budget"]

#: Threads each job computes with (torch intra-op and BLAS/OpenMP pools): see the module docstring.
THREADS_PER_JOB = 1


def effective_n_jobs(n_jobs: int | None) -> int:
    """The number of jobs ``n_jobs`` means, with scikit-learn's convention.

    Parameters
    ----------
    n_jobs : int or None
        None: 1 (unless inside a :func:`joblib.parallel_config` context);
        -1: every CPU; -2: all but one; a positive int: that many.

    Returns
    -------
    int

    Examples
    --------
    >>> effective_n_jobs(None), effective_n_jobs(3)
    (1, 3)
    """
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0):
        raise ValueError(f"The 'n_jobs' parameter must be None or a non-zero int. Got {n_jobs!r} instead.")
    return int(joblib.effective_n_jobs(n_jobs))


@contextmanager
def thread_budget(n_threads: int = THREADS_PER_JOB) -> Iterator[None]:
    """Compute with ``n_threads`` threads inside the block (torch and BLAS/OpenMP), then restore.

    Parameters
    ----------
    n_threads : int, default=THREADS_PER_JOB

    Returns
    -------
    contextlib.AbstractContextManager
        Use in a ``with`` statement.

    Examples
    --------
    >>> import torch
    >>> before = torch.get_num_threads()
    >>> with thread_budget(1):
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    previous = torch.get_num_threads()
    with threadpool_limits(limits=n_threads):
        torch.set_num_threads(n_threads)
        try:
            yield
        finally:
            torch.set_num_threads(previous)


# One worker's copy of the recipe and of every client's records, set once when it starts.
_WORKER: dict = {}


def _start_worker(payload: bytes, n_threads: int) -> None:
    torch.set_num_threads(n_threads)
    threadpool_limits(limits=n_threads)
    recipe, clients = pickle.loads(payload)  # written by the parent process of this worker
    _WORKER.update(recipe=recipe, clients=clients)
    # A process's first torch optimiser imports torch._dynamo (2 s): pay it while starting, not in a round
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def _ready() -> bool:
    return True


def _run_clients(task: bytes) -> bytes:
    chosen, theta, states, instructions = pickle.loads(task)  # written by the parent process
    states = {i: ClientState.from_bytes(state) for i, state in states.items()}
    replies = run_clients(_WORKER["recipe"], pickle.loads(theta), _WORKER["clients"], states, chosen, instructions)
    return pickle.dumps({i: (*replies[i], states[i].to_bytes()) for i in chosen})


class ParallelTransport:
    """The clients on this machine, a round's clients run by ``n_jobs`` jobs: this process and worker processes.

    This process is one of the jobs (it would otherwise wait idle), so
    ``n_jobs - 1`` workers are started; until they are up, this process runs
    every client. Use as a context manager (the workers stop when it exits).
    Messages are pickled to bytes by this module (not by multiprocessing,
    which would put torch tensors in shared memory).

    Parameters
    ----------
    recipe : ClientRecipe
        Shared by the clients; every worker gets a copy.
    clients : sequence of tuple of Tensor
        Client i's records (every worker gets a copy of all of them, once).
    states : list of ClientState
        Client i's secret randomness and optimiser state; replaced by the
        advanced state each time client i runs in a worker.
    n_jobs : int
        Jobs (>= 2): this process and ``n_jobs - 1`` workers.
    n_threads : int, default=THREADS_PER_JOB
        Threads each worker computes with (this process computes under the
        caller's :func:`thread_budget`).

    Attributes
    ----------
    worker_runs : int
        How many client rounds the workers have run (the others ran here).

    Examples
    --------
    >>> import numpy as np, torch
    >>> from skfedriem.decomposition import FederatedPCA
    >>> X = np.random.default_rng(0).normal(size=(120, 6))
    >>> X /= np.linalg.norm(X, axis=1, keepdims=True)
    >>> options = dict(n_components=2, eps=5.0, solver="riemannian", n_rounds=5, random_state=0)
    >>> serial = FederatedPCA(**options).fit(X)
    >>> parallel = FederatedPCA(**options, n_jobs=2).fit(X)
    >>> np.array_equal(serial.components_, parallel.components_)
    True
    """

    def __init__(self, recipe: ClientRecipe, clients: Sequence[tuple[torch.Tensor, ...]], states: list[ClientState],
                 *, n_jobs: int, n_threads: int = THREADS_PER_JOB) -> None:
        if n_jobs < 2:
            raise ValueError(f"ParallelTransport needs n_jobs >= 2 (this process and a worker). Got {n_jobs!r}.")
        self.recipe = recipe
        self.clients = clients
        self.states = states
        self.n_jobs = n_jobs
        self.n_threads = n_threads
        self._executor: ProcessPoolExecutor | None = None
        self.worker_runs = 0

    def __enter__(self) -> Self:
        try:
            payload = pickle.dumps((self.recipe, list(self.clients)))
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            raise TypeError(f"n_jobs > 1 sends the model, its loss and optimiser and the records to worker processes "
                            f"by pickle, and this recipe cannot be pickled ({error}). Define the loss and optimiser "
                            "as module-level functions, or use n_jobs=1.") from error
        self._executor = ProcessPoolExecutor(max_workers=self.n_jobs - 1, initializer=_start_worker,
                                             initargs=(payload, self.n_threads))
        # Starting a worker takes seconds (a fresh interpreter imports torch) and loky's submit blocks
        # meanwhile: start them from a thread, and let this process run every client until they answer.
        self._starting: list = []
        self._starter = threading.Thread(target=self._start_workers, daemon=True)
        self._starter.start()
        return self

    def _start_workers(self) -> None:
        self._starting = [self._executor.submit(_ready) for _ in range(self.n_jobs - 1)]

    def _workers_ready(self) -> bool:
        return not self._starter.is_alive() and all(f.done() for f in self._starting)

    def wait_until_ready(self) -> None:
        """Block until every worker has started (rounds before that run in this process)."""
        self._starter.join()
        for future in self._starting:
            future.result()

    def __exit__(self, *exc_info) -> None:
        if self._executor is not None:
            self._starter.join()
            # the workers exit on their own once told to (their interpreter's shutdown need not hold up the fit)
            self._executor.shutdown(wait=False, kill_workers=exc_info[0] is not None)
            self._executor = None

    def _ship(self, shipped: list[int], theta: dict[str, torch.Tensor],
              instructions: dict[int, RoundInstructions]) -> list:
        """The workers' tasks: ``shipped`` dealt in turn, one task a worker; their futures."""
        futures, shared = [], pickle.dumps(theta)  # θ serialised once per round, not once per client
        for chunk in (shipped[j::self.n_jobs - 1] for j in range(self.n_jobs - 1)):
            if chunk:
                task = pickle.dumps((chunk, shared, {i: self.states[i].to_bytes() for i in chunk},
                                     {i: instructions[i] for i in chunk}))
                futures.append(self._executor.submit(_run_clients, task))
        return futures

    def run_round(self, t: int, selected: list[int], theta: dict[str, torch.Tensor],
                  instructions: dict[int, RoundInstructions]) -> Replies:
        """Run the selected clients from θ_t, in the workers and in this process; every one replies.

        The clients with the most local steps go to the workers, dealt in
        turn so that each worker gets one task of about the same work (run in
        lockstep when the recipe says so); this process, which also
        aggregates and accounts, takes the ``len(selected) // n_jobs`` with
        the fewest (a queued task cannot be taken back from a worker, so the
        split is made up front).
        """
        if self._executor is None:
            raise RuntimeError("ParallelTransport runs rounds inside a `with` block (the workers start there).")
        if not self._workers_ready():
            return run_clients(self.recipe, theta, self.clients, self.states, selected, instructions)
        by_work = sorted(selected, key=lambda i: -instructions[i].local_steps)
        here = len(selected) // self.n_jobs
        futures = self._ship(by_work[:len(by_work) - here], theta, instructions)
        replies = run_clients(self.recipe, theta, self.clients, self.states, by_work[len(by_work) - here:],
                              instructions)
        for future in futures:
            for i, (submission, seconds, state) in pickle.loads(future.result()).items():  # this process's worker
                self.states[i] = ClientState.from_bytes(state)
                replies[i] = (submission, seconds)
                self.worker_runs += 1
        return {i: replies[i] for i in selected}
