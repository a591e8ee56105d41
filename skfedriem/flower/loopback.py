"""A real Flower deployment of FederatedPCA on this host: one SuperLink, one SuperNode per site.

The same commands run on real hosts (replace 127.0.0.1 by the SuperLink's
address and drop ``--insecure`` for TLS); here every process binds a free
port on 127.0.0.1 and all of them are killed on exit, whatever happens::

    python -m skfedriem.flower.loopback --sites 3 --rounds 5 --eps 2 --out /tmp/fedpca

writes one synthetic data file per site, starts ``flower-superlink`` and the
``flower-supernode`` processes (each given only its own file), runs
``flwr run`` on :data:`skfedriem.flower.pca_app.APP_DIR`, and prints the
server's result. ``--kill-site-after-round R`` kills the first site's
SuperNode once round R is done: the run finishes with the others.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from queue import Empty, Queue

import numpy as np

__all__ = ["LoopbackFederation", "free_port", "main"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _executable(name: str) -> str:
    local = Path(sys.executable).with_name(name)
    found = str(local) if local.exists() else shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found: pip install \"skfedriem[flower]\".")
    return found


def _wait_for_port(port: int, timeout: float, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"flower-superlink exited with code {process.returncode}:\n{log.read_text()[-2000:]}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"flower-superlink did not listen on port {port} within {timeout} s.")


def _toml_value(value) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


class LoopbackFederation:
    """SuperLink and SuperNodes as child processes on 127.0.0.1 (a context manager).

    Parameters
    ----------
    workdir : path
        Logs and the Flower configuration (``FLWR_HOME``) go here.
    sites : list of dict
        One SuperNode per entry: its node configuration (``data-path``,
        optional ``name``, ``max-epsilon``, ``ledger-path``, ...).
    startup_timeout : float, default=60
    """

    def __init__(self, workdir: str | Path, sites: list[dict], *, startup_timeout: float = 60.0) -> None:
        self.workdir = Path(workdir)
        self.sites = sites
        self.startup_timeout = startup_timeout
        self.processes: list[subprocess.Popen] = []
        self.supernodes: list[subprocess.Popen] = []

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen:
        log = (self.workdir / log_name).open("w")
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                   start_new_session=True)  # its own group: killed with its children
        self.processes.append(process)
        return process

    def __enter__(self) -> LoopbackFederation:  # noqa: PYI034 - Python 3.10 has no typing.Self
        self.workdir.mkdir(parents=True, exist_ok=True)
        home = self.workdir / "flwr-home"
        home.mkdir(exist_ok=True)
        self.port = free_port()
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\naddress = "127.0.0.1:{self.port}"\n'
            "insecure = true\n")
        # the SuperLink and SuperNodes start flower-superexec / flwr-serverapp / flwr-clientapp by name
        bin_dir = str(Path(_executable("flower-superlink")).parent)
        self.env = {**os.environ, "FLWR_HOME": str(home), "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
        try:
            link = self._spawn([_executable("flower-superlink"), "--insecure", "--port", str(self.port)],
                               "superlink.log")
            _wait_for_port(self.port, self.startup_timeout, link, self.workdir / "superlink.log")
            for i, node_config in enumerate(self.sites):
                settings = " ".join(f"{k}={_toml_value(v)}" for k, v in node_config.items())
                self.supernodes.append(self._spawn(
                    [_executable("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{self.port}",
                     "--port", str(free_port()), "--node-config", settings], f"supernode-{i}.log"))
        except BaseException:
            self.close()
            raise
        return self

    def run(self, app_dir: str | Path, run_config: dict, *, timeout: float = 600.0, on_line=None) -> list[str]:
        """``flwr run APP_DIR loopback --stream``; returns its output lines.

        ``on_line(line)`` sees every output line as it arrives (e.g. to kill a
        site mid-run). Raises if the run fails or exceeds ``timeout`` seconds.
        """
        overrides = " ".join(f"{k}={_toml_value(v)}" for k, v in run_config.items())
        process = subprocess.Popen(
            [_executable("flwr"), "run", str(app_dir), "loopback", "--stream", "--run-config", overrides],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env, start_new_session=True)
        self.processes.append(process)
        queue: Queue[str | None] = Queue()

        def pump() -> None:
            for line in process.stdout:
                queue.put(line.rstrip("\n"))
            queue.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        lines: list[str] = []
        while True:
            try:
                line = queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except Empty:
                raise TimeoutError(f"flwr run did not finish within {timeout} s. Last lines:\n"
                                   + "\n".join(lines[-20:])) from None
            if line is None:
                break
            lines.append(line)
            if on_line is not None:
                on_line(line)
        process.wait(timeout=max(1.0, deadline - time.monotonic()))
        if process.returncode != 0 or any("Exit Code" in line or "Traceback" in line for line in lines):
            raise RuntimeError(f"flwr run failed (exit code {process.returncode}):\n" + "\n".join(lines[-60:]))
        return lines

    def kill_site(self, i: int) -> None:
        """SIGKILL site i's SuperNode and its ClientApp processes."""
        _kill_group(self.supernodes[i], signal.SIGKILL)

    def close(self) -> None:
        """Terminate every process started here (SIGTERM, then SIGKILL after 5 s)."""
        for process in self.processes:
            _kill_group(process, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for process in self.processes:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(process, signal.SIGKILL)
                process.wait()

    def __exit__(self, *exc) -> None:
        self.close()


def _kill_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> dict:
    """Command line: synthetic sites, a loopback federation, one FederatedPCA run; prints the result."""
    from ..datasets import make_federated_pca
    from .pca_app import APP_DIR

    parser = argparse.ArgumentParser(prog="python -m skfedriem.flower.loopback", description=__doc__.split("\n")[0])
    parser.add_argument("--sites", type=int, default=3)
    parser.add_argument("--records", type=int, default=300, help="records per site")
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--components", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--eps", default="2.0", help="a float, or 'none'")
    parser.add_argument("--round-timeout", type=float, default=60.0)
    parser.add_argument("--kill-site-after-round", type=int, default=None)
    parser.add_argument("--site-max-epsilon", type=float, default=None,
                        help="each site's own budget over all runs (its ledger is kept in --out)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole run")
    parser.add_argument("--out", default="skfedriem-loopback")
    args = parser.parse_args(argv)

    out = Path(args.out).absolute()
    X, groups = make_federated_pca(n_clients=args.sites, n_samples_per_client=args.records,
                                   n_features=args.features, random_state=0)
    sites = []
    for i, g in enumerate(np.unique(groups)):
        path = out / f"site-{i}" / "records.npy"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, X[groups == g])
        site = {"data-path": str(path), "name": f"site-{i}", "ledger-path": str(path.with_name("ledger.json"))}
        if args.site_max_epsilon is not None:
            site["max-epsilon"] = args.site_max_epsilon
        sites.append(site)
    run_config = {"n-clients": args.sites, "n-features": args.features, "n-components": args.components,
                  "rounds": args.rounds, "eps": args.eps if args.eps.lower() == "none" else float(args.eps),
                  "round-timeout": args.round_timeout, "output": str(out / "server")}

    with LoopbackFederation(out / "logs", sites) as federation:
        def watch(line: str) -> None:
            print(line, flush=True)
            if args.kill_site_after_round is not None and f"round {args.kill_site_after_round}/" in line:
                federation.kill_site(0)
                print("skfedriem.loopback: killed site-0's SuperNode", flush=True)

        federation.run(APP_DIR, run_config, timeout=args.timeout, on_line=watch)
    result = json.loads((out / "server" / "result.json").read_text())
    summary = {"epsilon": result["epsilon"], "rounds": len(result["history"]),
               "replied": [h["replied"] for h in result["history"]]}
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
