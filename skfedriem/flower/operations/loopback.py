"""A real, secured Flower deployment on this host: one SuperLink, one SuperNode per site, TLS and node keys.

The same commands run on real hosts (replace 127.0.0.1 by the SuperLink's
address and the test certificates by your own); here every process binds a
free port on 127.0.0.1 and all of them are killed on exit, whatever happens::

    python -m skfedriem.flower.operations.loopback --estimator spdnet --sites 3 --rounds 5 --out /tmp/run

writes one synthetic data file per site (and the server's validation file),
creates a certificate authority, a SuperLink certificate and one key pair per
SuperNode, starts ``flower-superlink`` with TLS and SuperNode authentication,
registers every site's public key, starts the ``flower-supernode`` processes
(each given only its own file and key), runs ``flwr run`` on the estimator's
Flower App project, and prints the server's result.

``--kill-site-after-round R`` kills the first site (SIGKILL) once round R is
done: the run finishes with the others. ``--restart-site-after-round R``
stops the last site and starts it again once round R is done: it rejoins the
next round with its ledger. ``--kill-server-after-round R`` kills the
ServerApp once round R is done and starts the run again with ``resume=true``.
``--insecure`` (test benches only) runs everything in plain text.

``--noise distributed`` runs every round with distributed noise under secure
aggregation: each site's node configuration consents to it (``noise``),
names its SuperNode key as its signing key and the federation's roster of
SuperNode keys (written here as the sites are added), and the server learns
only the sum of the sites' masked releases. A site killed after round R is
left out of the next rounds' protocol (``--kill-sites N`` kills N; with
``--set dropouts=d`` up to t + d may go with the noise kept whole); each site's ledger records ε_local
and ε_central (``--semi-honest-server``: its ``max-epsilon`` bounds
ε_central) and what a deviating server with t colluders could learn
(``--deviating-server``: its ``max-epsilon`` bounds that).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import warnings
from collections.abc import Callable
from pathlib import Path
from queue import Empty, Queue

import numpy as np

from .certificates import make_supernode_keys, make_tls_certificates

__all__ = ["LoopbackFederation", "free_port", "main", "preflight", "summarise"]

#: The estimators' Flower App projects, one folder each (read without importing the apps: flags are checked first).
PROJECTS = Path(__file__).parents[1] / "deployment" / "projects"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now.

    Returns
    -------
    int
    """
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
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _kill_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


class LoopbackFederation:
    """SuperLink and SuperNodes as child processes on 127.0.0.1 (a context manager).

    Parameters
    ----------
    workdir : path
        Logs, certificates, keys and the Flower configuration (``FLWR_HOME``) go here.
    sites : list of dict
        One SuperNode per entry: its node configuration (``data-path``,
        optional ``name``, ``max-epsilon``, ``ledger-path``, ...).
    secure : bool, default=True
        TLS on every connection and SuperNode authentication: only SuperNodes
        whose public key was registered (every site here) may connect.
        False: ``--insecure`` everywhere, for a test bench only.
    startup_timeout : float, default=60
    """

    def __init__(self, workdir: str | Path, sites: list[dict], *, secure: bool = True,
                 startup_timeout: float = 60.0) -> None:
        self.workdir = Path(workdir)
        self.sites = [dict(site) for site in sites]
        self.secure = secure
        self.startup_timeout = startup_timeout
        self.processes: list[subprocess.Popen] = []
        self.supernodes: list[subprocess.Popen] = []
        self.keys: list[tuple[Path, Path] | None] = []
        self._closing = False

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen:
        log = (self.workdir / log_name).open("a")
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                   start_new_session=True)  # its own group: killed with its children
        self.processes.append(process)
        return process

    def __enter__(self) -> LoopbackFederation:  # noqa: PYI034
        self.workdir.mkdir(parents=True, exist_ok=True)
        home = self.workdir / "flwr-home"
        home.mkdir(exist_ok=True)
        self.port = free_port()
        security = "insecure = true\n"
        link_args = ["--insecure"]
        if self.secure:
            self.tls = make_tls_certificates(self.workdir / "certificates")
            security = f"root-certificates = {json.dumps(str(self.tls.ca_certificate))}\n"
            link_args = ["--ssl-ca-certfile", str(self.tls.ca_certificate), "--ssl-certfile",
                         str(self.tls.server_certificate), "--ssl-keyfile", str(self.tls.server_key),
                         "--enable-supernode-auth"]
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\naddress = "127.0.0.1:{self.port}"\n'
            + security)
        # the SuperLink and SuperNodes start flower-superexec / flwr-serverapp / flwr-clientapp by name
        bin_dir = str(Path(_executable("flower-superlink")).parent)
        # Flower's SuperExec polls for work every second by default: every message waits for it, twice a round
        self.env = {**os.environ, "FLWR_HOME": str(home), "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
                    "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": os.environ.get("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.1")}
        try:
            self.superlink = self._spawn([_executable("flower-superlink"), *link_args, "--port", str(self.port)],
                                         "superlink.log")
            _wait_for_port(self.port, self.startup_timeout, self.superlink, self.workdir / "superlink.log")
            sites, self.sites = self.sites, []
            for site in sites:
                self.add_site(site)
        except BaseException:
            self.close()
            raise
        return self

    def add_site(self, node_config: dict, *, register: bool = True) -> int:
        """Start one more SuperNode; with ``register=False`` its key is never registered (it must be refused)."""
        i = len(self.sites)
        self.sites.append(dict(node_config))
        keys = None
        distributed = str(node_config.get("noise", "local")) == "distributed"
        if distributed and not self.secure:
            raise ValueError("A site with noise = 'distributed' signs its round keys with its SuperNode key: run the "
                             "federation secure (no --insecure).")
        if self.secure:
            keys = make_supernode_keys(self.workdir / "keys", f"site-{i}")
            if register:
                self.flwr(["supernode", "register", str(keys[1]), "loopback"])
        if distributed:  # the operator's roster of the federation's keys, and the site's own key
            roster = self.workdir / "keys" / "federation-keys.txt"
            name = str(node_config.get("name", f"site-{i}"))
            with roster.open("a") as f:
                f.write(f"{name} {keys[1].read_text().strip()}\n")
            self.sites[i].update({"federation-keys": str(roster), "signing-key": str(keys[0])})
        self.keys.append(keys)
        self.supernodes.append(self._start_supernode(i))
        return i

    def _start_supernode(self, i: int) -> subprocess.Popen:
        settings = " ".join(f"{k}={_toml_value(v)}" for k, v in self.sites[i].items())
        security = ["--insecure"]
        if self.secure:  # TLS to the SuperLink, and on the node's own API to its ClientApp processes
            security = ["--root-certificates", str(self.tls.ca_certificate),
                        "--auth-supernode-private-key", str(self.keys[i][0]),
                        "--ssl-certfile", str(self.tls.server_certificate), "--ssl-keyfile", str(self.tls.server_key),
                        "--ssl-ca-certfile", str(self.tls.ca_certificate)]
        return self._spawn([_executable("flower-supernode"), *security, "--superlink", f"127.0.0.1:{self.port}",
                            "--port", str(free_port()), "--node-config", settings], f"supernode-{i}.log")

    def flwr(self, args: list[str], *, timeout: float = 60.0) -> str:
        """Run a ``flwr`` CLI command against this SuperLink; its output, or RuntimeError."""
        done = subprocess.run([_executable("flwr"), *args], capture_output=True, text=True, env=self.env,
                              timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"flwr {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def run(self, app_dir: str | Path, run_config: dict, *, timeout: float = 600.0, on_line=None,
            check: bool = True) -> tuple[int, list[str]]:
        """``flwr run APP_DIR loopback --stream``; returns its exit code and output lines.

        ``on_line(line)`` sees every output line as it arrives (e.g. to kill a
        site mid-run); when it returns True, the stream is closed at once and
        the run abandoned (exit code -1). With ``check``, a failed run raises
        RuntimeError; a run over ``timeout`` seconds always raises TimeoutError.
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
            if on_line is not None and on_line(line):
                _kill_group(process, signal.SIGKILL)
                process.wait()
                return -1, lines
        process.wait(timeout=max(1.0, deadline - time.monotonic()))
        failed = process.returncode != 0 or any("Exit Code" in line or "Traceback" in line for line in lines)
        if check and failed:
            raise RuntimeError(f"flwr run failed (exit code {process.returncode}):\n" + "\n".join(lines[-60:]))
        return (process.returncode or int(failed)), lines

    def check_transport_security(self) -> dict:
        """What a network observer and an outsider get from the SuperLink's port.

        Returns
        -------
        dict
            ``tls_verified``: a TLS handshake against the test CA succeeds for
            127.0.0.1; ``plaintext_refused``: an unencrypted HTTP request gets no
            HTTP answer (so no message, θ or submission can travel in clear).
        """
        import ssl

        context = ssl.create_default_context(cafile=str(self.tls.ca_certificate))
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                verified = tls.version() is not None and tls.getpeercert() is not None
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as raw:
            raw.sendall(b"GET /v1/fleet/get-run HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            raw.settimeout(5)
            try:
                answer = raw.recv(64)
            except (TimeoutError, ConnectionError):
                answer = b""
        return {"tls_verified": verified, "plaintext_refused": not answer.startswith(b"HTTP/")}

    def kill_site(self, i: int) -> None:
        """SIGKILL site i's SuperNode and its ClientApp processes."""
        _kill_group(self.supernodes[i], signal.SIGKILL)
        self.supernodes[i].wait()

    def restart_site(self, i: int, *, retry_for: float = 150.0) -> None:
        """Stop site i's SuperNode (if it runs) and start it again with the same data and key.

        A SuperNode that was killed keeps its node id at the SuperLink until it
        misses two heartbeats (60 s, fixed in Flower 1.42), and a new process
        cannot take that id before: like a service manager, this keeps
        restarting it (every 5 s, for ``retry_for`` seconds) until it is in.
        """
        _kill_group(self.supernodes[i], signal.SIGTERM)  # a clean stop leaves the node id free at once
        self.supernodes[i].wait()
        self.supernodes[i] = self._start_supernode(i)

        def keep_trying() -> None:
            deadline = time.monotonic() + retry_for
            while time.monotonic() < deadline and not self._closing:
                code = self.supernodes[i].poll()
                if code is not None and code != 0 and not self._closing:
                    time.sleep(5)
                    self.supernodes[i] = self._start_supernode(i)
                time.sleep(0.5)

        threading.Thread(target=keep_trying, daemon=True).start()

    def kill_server_app(self) -> int:
        """SIGKILL the running ServerApp process(es) the SuperLink started; how many were killed."""
        import psutil

        killed = 0
        for child in psutil.Process(self.superlink.pid).children(recursive=True):
            try:
                if any("flwr-serverapp" in part for part in child.cmdline()):
                    child.kill()
                    killed += 1
            except psutil.NoSuchProcess:
                pass
        return killed

    def close(self) -> None:
        """Terminate every process started here (SIGTERM, then SIGKILL after 5 s)."""
        self._closing = True
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


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _printer():
    """``print`` for Flower's output lines: their colour codes only where the output is a terminal."""
    terminal = sys.stdout.isatty()

    def show(line: str) -> None:
        print(line if terminal else _ANSI.sub("", line), flush=True)

    return show


def site_files(estimator: str, out: Path, *, sites: int, records: int, features: int,
               subjects: int = 0, noise: str = "local") -> tuple[list[Path], dict]:
    """Synthetic records for each site (and the server's validation file), and the run settings they need (small
    local schedules for local noise; the plan's defaults for distributed noise); with ``subjects``, each site's
    ``.npz`` also holds each record's subject (array ``subject``, that many a site)."""
    from ...datasets import make_federated_pca, make_spd_classification

    one_step = noise == "distributed"  # distributed noise: the plan's one step a round of full batches

    suffix = "records.npy" if estimator == "pca" and not subjects else "records.npz"
    paths = [out / f"site-{i}" / suffix for i in range(sites)]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    subject = {"subject": np.arange(records) % subjects} if subjects else {}
    if estimator == "pca":
        X, groups = make_federated_pca(n_clients=sites, n_samples_per_client=records, n_features=features,
                                       random_state=0)
        for i, g in enumerate(np.unique(groups)):
            if subjects:
                np.savez(paths[i], X=X[groups == g], **subject)
            else:
                np.save(paths[i], X[groups == g])
        return paths, {}
    if estimator in ("spdnet", "tangent"):
        X, y, groups = make_spd_classification(n_clients=sites + 1, n_matrices_per_client=records,
                                               n_channels=features, random_state=0)
        settings = {} if one_step else {"batch-size": 16, "local-steps": 3}
        if estimator == "spdnet":
            settings["dims"] = str(max(2, features // 2))
    else:
        rng = np.random.default_rng(0)
        n, t = (sites + 1) * records, np.arange(64) / 64
        y = np.arange(n) % 2
        X = rng.standard_normal((n, features, 64))
        X[np.arange(n), y] += 3 * np.sin(2 * np.pi * 12 * t)
        X *= 1e-5
        groups = np.repeat(np.arange(sites + 1), records)
        settings = {"f1": 2, "d": 1, "f2": 2, "kernel-length": 16}
        if not one_step:
            settings.update({"batch-size": 16, "local-steps": 3, "lr": 3e-2})
    for i, g in enumerate(np.unique(groups)[:sites]):
        np.savez(paths[i], X=X[groups == g], y=y[groups == g], **subject)
    validation = out / "server" / "validation.npz"  # the server's own trials, never a site's
    validation.parent.mkdir(parents=True, exist_ok=True)
    last = groups == np.unique(groups)[-1]
    np.savez(validation, X=X[last], y=y[last])
    return paths, {**settings, "classes": "0,1", "validation-path": str(validation)}


def _parser(estimators: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m skfedriem.flower.operations.loopback", description=__doc__.split("\n")[0])
    parser.add_argument("--estimator", choices=estimators, default="pca")
    parser.add_argument("--sites", type=int, default=3)
    parser.add_argument("--records", type=int, default=120, help="records per site")
    parser.add_argument("--features", type=int, default=6, help="features (PCA) or channels (classifiers)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="communication rounds (with --estimator pca, of its Riemannian solver unless --set "
                             "solver=... names another: its one-shot solver is one round)")
    parser.add_argument("--privacy-unit", choices=["record", "subject"], default="record",
                        help="what the run protects: a record, or a subject (each site then holds "
                             "--subjects-per-site subjects, named in its node config's subject-key)")
    parser.add_argument("--subjects-per-site", type=int, default=4)
    parser.add_argument("--eps", default="2.0", help="a float, or 'none'")
    parser.add_argument("--round-timeout", type=float, default=60.0)
    parser.add_argument("--kill-site-after-round", type=int, default=None)
    parser.add_argument("--kill-sites", type=int, default=1,
                        help="how many sites --kill-site-after-round kills (site-0, site-1, ...)")
    parser.add_argument("--restart-site-after-round", type=int, default=None,
                        help="stop the last site and start it again (it rejoins)")
    parser.add_argument("--kill-server-after-round", type=int, default=None, help="then resume the run")
    parser.add_argument("--site-max-epsilon", type=float, default=None,
                        help="each site's own budget over all runs (its ledger is kept in --out); default: the "
                             "sites' default, or inf with --eps none")
    parser.add_argument("--noise", choices=["local", "distributed"], default="local",
                        help="distributed: the sites consent to distributed noise (node setting noise), signed with "
                             "their SuperNode keys, and every round runs under secure aggregation")
    parser.add_argument("--semi-honest-server", action="store_true",
                        help="with --noise distributed: the sites' max-epsilon bounds epsilon_central (default: "
                             "epsilon_local, their own noise share's)")
    parser.add_argument("--deviating-server", action="store_true",
                        help="with --noise distributed: the sites' max-epsilon bounds what a server deviating from "
                             "the protocol with t colluding sites could learn (K - 2t honest shares)")
    parser.add_argument("--insecure", action="store_true", help="no TLS, no SuperNode authentication")
    parser.add_argument("--intruder", action="store_true",
                        help="also start a SuperNode whose key is not registered (it must be refused)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a run-config value (a TOML literal: 64, 1e-3, \"text\")")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for each flwr run")
    parser.add_argument("--out", default=None, help="where the sites' files, logs and results go (default: a fresh "
                                                        "temporary folder, printed)")
    return parser


def _check_arguments(args: argparse.Namespace) -> str | None:
    """The first flag whose value no run could take, in one line naming it; None when every flag is usable."""
    for check in (_check_sizes, _check_numbers, _check_noise_flags, _check_failures, _check_settings):
        refused = check(args)
        if refused is not None:
            return refused
    return None


def _check_sizes(args: argparse.Namespace) -> str | None:
    """The counts of sites, records, features, subjects and rounds."""
    positive = {"--sites": args.sites, "--records": args.records, "--features": args.features,
                "--subjects-per-site": args.subjects_per_site, "--rounds": args.rounds}
    for flag, value in positive.items():
        if value < 1:
            return f"{flag} must be at least 1. Got {value}."
    if args.records < 2:
        return f"--records must be at least 2 (a site of one record cannot be sampled). Got {args.records}."
    if args.features < 2:
        return f"--features must be at least 2. Got {args.features}."
    if args.privacy_unit == "subject" and not 2 <= args.subjects_per_site <= args.records:
        return (f"--subjects-per-site must be between 2 and --records ({args.records}) with --privacy-unit subject. "
                f"Got {args.subjects_per_site}.")
    return None


def _check_numbers(args: argparse.Namespace) -> str | None:
    """ε, the timeouts and the sites' budget."""
    if args.eps.lower() != "none":
        try:
            eps = float(args.eps)
        except ValueError:
            return f"--eps must be a positive number or 'none'. Got {args.eps!r}."
        if not 0 < eps < float("inf"):
            return f"--eps must be a positive number or 'none'. Got {args.eps!r}."
    for flag, value in (("--timeout", args.timeout), ("--round-timeout", args.round_timeout),
                        ("--site-max-epsilon", args.site_max_epsilon)):
        if value is not None and not value > 0:
            return f"{flag} must be positive. Got {value}."
    if args.site_max_epsilon is not None and args.eps.lower() != "none" and args.site_max_epsilon < float(args.eps):
        return (f"--site-max-epsilon {args.site_max_epsilon:g} is below the run's --eps {args.eps}: every site would "
                "refuse every round.")
    return None


def _check_noise_flags(args: argparse.Namespace) -> str | None:
    """Distributed noise and what the sites' budget bounds under it."""
    if args.noise != "distributed":
        bounds = {"--semi-honest-server": (args.semi_honest_server, "epsilon_central"),
                  "--deviating-server": (args.deviating_server, "what a deviating server could learn from the shares")}
        return next((f"{flag} bounds {what}, which only --noise distributed has: add it, or drop it."
                     for flag, (given, what) in bounds.items() if given), None)
    if args.insecure:
        return "--noise distributed signs every site's round keys with its SuperNode key: drop --insecure."
    if args.sites < 2:
        return (f"--noise distributed sums the releases of at least 2 sites under secure aggregation (one site's "
                f"sum is its own release). Got --sites {args.sites}.")
    if args.deviating_server and args.semi_honest_server:
        return "--semi-honest-server and --deviating-server each say what the sites' max-epsilon bounds: give one."
    return None


def _check_failures(args: argparse.Namespace) -> str | None:
    """The rounds after which a site or the server is killed or restarted."""
    for flag, value in (("--kill-site-after-round", args.kill_site_after_round),
                        ("--restart-site-after-round", args.restart_site_after_round),
                        ("--kill-server-after-round", args.kill_server_after_round)):
        if value is not None and not 1 <= value < args.rounds:
            return f"{flag} must name a round after which another runs (1 to --rounds − 1). Got {value}."
    if not 1 <= args.kill_sites < args.sites:
        return f"--kill-sites must leave a site running (1 to --sites − 1). Got {args.kill_sites}."
    if args.kill_sites != 1 and args.kill_site_after_round is None:
        return f"--kill-sites {args.kill_sites} says how many sites --kill-site-after-round kills: give that round too."
    return None


def _check_settings(args: argparse.Namespace) -> str | None:
    """Every ``--set KEY=VALUE``: a TOML literal, for a key no flag owns."""
    for item in args.set:
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            return f"--set takes KEY=VALUE. Got {item!r}."
        flag = _OWNED_KEYS.get(key.strip().lower().replace("_", "-"))
        if flag is not None:
            return f"--set {key.strip()}: set it with {flag} (the sites are configured from it)."
        try:
            tomllib.loads(f"value = {value}")
        except tomllib.TOMLDecodeError:
            return f"--set {key}: {value!r} is not a TOML literal (64, 1e-3, \"text\", true)."
    return None


#: Run-configuration keys the launcher sets from its own flags (the sites' node configurations follow them).
_OWNED_KEYS = {"n-clients": "--sites", "rounds": "--rounds", "n-rounds": "--rounds", "eps": "--eps",
               "noise": "--noise", "privacy-unit": "--privacy-unit", "output": "--out", "round-timeout": "--round-timeout"}


def _site_sizes(args: argparse.Namespace) -> list[int]:
    """Each site's number of privacy units, as it will report it: its records, or its subjects."""
    return [args.subjects_per_site if args.privacy_unit == "subject" else args.records] * args.sites


def _input_shape(args: argparse.Namespace) -> tuple[int, ...]:
    if args.estimator == "pca":
        return (args.features,)
    if args.estimator in ("spdnet", "tangent"):
        return (args.features, args.features)
    return (args.features, 64)


def preflight(args: argparse.Namespace, run_config: dict) -> list[str]:
    """Plan the run as the ServerApp will on these sites, before any process starts; its warnings, as lines.

    Parameters
    ----------
    args : argparse.Namespace
        The command line (estimator, sites and their sizes).
    run_config : dict
        The run configuration ``flwr run`` will be given (the project's own fills the rest).

    Returns
    -------
    list of str
        The first line of each warning the plan gave.

    Raises
    ------
    ValueError or TypeError
        The server's own message, for a setting or a plan it would refuse once the deployment is up.
    """
    from ..deployment.apps import deployed_trainer, project_run_config

    config = {**project_run_config(args.estimator), **run_config}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = [f"site-{i}" for i in range(args.sites)]
        _, trainer = deployed_trainer(args.estimator, config, _input_shape(args), _site_sizes(args), names)
        trainer.pricing.plan(_site_sizes(args), names)  # the server's plan of the rounds, on these sites
    return list(dict.fromkeys(str(w.message).splitlines()[0] for w in caught if issubclass(w.category, UserWarning)))


def _sites_and_run_config(args: argparse.Namespace, out: Path) -> tuple[list[Path], list[dict], dict]:
    """The synthetic sites' files and node configurations, and the run configuration, from the command line."""
    subjects = args.subjects_per_site if args.privacy_unit == "subject" else 0
    paths, settings = site_files(args.estimator, out, sites=args.sites, records=args.records,
                                 features=args.features, subjects=subjects, noise=args.noise)
    non_private = args.eps.lower() == "none"
    distributed = args.noise == "distributed"
    sites = []
    for i, path in enumerate(paths):
        site = {"data-path": str(path), "name": f"site-{i}", "ledger-path": str(path.with_name("ledger.json"))}
        if subjects:
            site["subject-key"] = "subject"
        if non_private:  # a test bench's sites accept rounds without noise only when told to
            site.update({"non-private": True, "max-epsilon": "inf"})
        if args.site_max_epsilon is not None:
            site["max-epsilon"] = args.site_max_epsilon
        if distributed:  # the federation's roster and each site's key: LoopbackFederation.add_site
            site.update({"noise": "distributed", "semi-honest-server": args.semi_honest_server,
                         "deviating-server": args.deviating_server})
        sites.append(site)
    run_config = {"n-clients": args.sites, "round-timeout": args.round_timeout,
                  "eps": args.eps if non_private else float(args.eps), "output": str(out / "server"),
                  "privacy-unit": args.privacy_unit, "noise": args.noise, **settings}
    run_config["rounds"] = args.rounds
    if args.estimator == "pca":  # rounds are the Riemannian solver's (the one-shot solver runs one)
        run_config["solver"] = "riemannian"
    for item in args.set:
        key, _, value = item.partition("=")
        run_config[key.strip()] = tomllib.loads(f"value = {value}")["value"]
    if distributed:  # the sites check each round's K and t against their own node settings
        given = {k.replace("_", "-").lower(): v for k, v in run_config.items()}
        for key, node_key in (("colluders", "distributed-colluders"), ("clients-per-round", "distributed-clients"),
                              ("dropouts", "distributed-dropouts")):
            if given.get(key) not in (None, "", 0):
                for site in sites:
                    site[node_key] = int(given[key])
    return paths, sites, run_config


_ROUND_ENDED = re.compile(r"skfedriem: round (\d+)/")


def _round_watcher(federation: LoopbackFederation, args: argparse.Namespace, show: Callable[[str], None],
                   events: dict) -> Callable[[str], bool]:
    """What reads the run's log: it shows each line and kills or restarts what the command line asked, after the
    round it named; True abandons the run's log stream (the ServerApp was killed)."""

    def watch(line: str) -> bool:
        show(line)
        ended = _ROUND_ENDED.search(line)  # "skfedriem: round 2/5 ...", not a secure-aggregation stage's line
        if ended is None:
            return False
        done = int(ended.group(1))
        if done == args.kill_site_after_round and events["killed_site"] is None:
            for i in range(args.kill_sites):
                federation.kill_site(i)
                print(f"skfedriem.loopback: killed site-{i}'s SuperNode", flush=True)
            events["killed_site"] = done
        if done == args.restart_site_after_round and not events.get("restarted"):
            federation.restart_site(args.sites - 1)
            events["restarted"] = True
            print(f"skfedriem.loopback: restarted site-{args.sites - 1}'s SuperNode", flush=True)
        if done == args.kill_server_after_round and not events["server_killed"]:
            events["server_killed"] = federation.kill_server_app() > 0
            print("skfedriem.loopback: killed the ServerApp", flush=True)
            return True
        return False

    return watch


def main(argv: list[str] | None = None) -> dict:
    """Command line: synthetic sites, a secured loopback federation, one run; prints the result.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default: ``sys.argv[1:]``); ``--help`` lists them.

    Returns
    -------
    dict
        The run's result as printed.
    """
    parser = _parser(sorted(p.name for p in PROJECTS.iterdir() if (p / "pyproject.toml").exists()))
    args = parser.parse_args(argv)
    refused = _check_arguments(args)
    if refused is not None:
        parser.error(refused)
    from ..deployment.apps import APP_DIRS  # torch and the estimators: only once the flags are known good
    out = Path(args.out).absolute() if args.out else Path(tempfile.mkdtemp(prefix="skfedriem-loopback-"))
    print(f"skfedriem.loopback: files, logs and results in {out}", flush=True)
    show = _printer()
    paths, sites, run_config = _sites_and_run_config(args, out)
    try:  # what the ServerApp would refuse once every process is up, refused before any starts
        for warning in preflight(args, run_config):
            print(f"skfedriem.loopback: warning: {warning}", flush=True)
    except (ValueError, TypeError) as error:
        parser.error(str(error).splitlines()[0] if str(error) else type(error).__name__)
    extra = {}
    with LoopbackFederation(out / "logs", sites, secure=not args.insecure) as federation:
        events = {"killed_site": None, "server_killed": False}
        intruder = None
        if args.intruder:
            intruder = federation.add_site({"data-path": str(paths[0]), "name": "intruder"}, register=False)
        watch = _round_watcher(federation, args, show, events)
        federation.run(APP_DIRS[args.estimator], run_config, timeout=args.timeout, on_line=watch)
        if args.kill_server_after_round is not None:
            if not events["server_killed"]:
                raise RuntimeError("The ServerApp was not killed as asked; the run ended on its own.")
            federation.run(APP_DIRS[args.estimator], {**run_config, "resume": True}, timeout=args.timeout,
                           on_line=show)
        if not args.insecure:
            extra.update(federation.check_transport_security())
        if intruder is not None:
            log = (out / "logs" / f"supernode-{intruder}.log").read_text()
            extra["intruder_refused"] = (federation.supernodes[intruder].poll() not in (None, 0)
                                         and "Failed to activate SuperNode" in log)
    return summarise(args, json.loads((out / "server" / "result.json").read_text()), extra, out / "logs")


def summarise(args: argparse.Namespace, result: dict, extra: dict, logs: Path) -> dict:
    """The run's summary line, printed; SystemExit (non-zero) when every round was discarded.

    Parameters
    ----------
    args : argparse.Namespace
    result : dict
        The server's ``result.json``.
    extra : dict
        What the launcher checked itself (transport security, the intruder).
    logs : Path
        Where the sites' logs are, for the message.

    Returns
    -------
    dict
    """
    summary = {"estimator": args.estimator, "epsilon": result["epsilon"], "local_epsilon": result["local_epsilon"],
               "deviating_epsilon": result.get("deviating_epsilon", result["epsilon"]),
               "privacy_unit": result["privacy_unit"], "n_records": result["n_records"],
               "rounds": len(result["history"]), "applied_rounds": result["applied_rounds"],
               "replied": [h["replied"] for h in result["history"]], "secure": not args.insecure, **extra}
    print(json.dumps(summary))
    if summary["rounds"] and not summary["applied_rounds"]:
        raise SystemExit(f"skfedriem.loopback: every one of the {summary['rounds']} rounds was discarded (no site's "
                         f"release reached the model; each was charged): see the sites' logs in {logs}.")
    return summary


if __name__ == "__main__":
    main()
