"""Per-round cost of FederatedPCA on Flower: in-process, simulation, a secured deployment, and Flower's own floor.

Same estimator and seed with backend="local" (baseline, same run), then
backend="flower" (Flower's simulation engine), then real deployments on this
host (``skfedriem.flower.operations.loopback``: SuperLink and one SuperNode per site as
processes, TLS everywhere, registered SuperNode keys, each site's ledger on)
for 3 and 5 sites: ours, and **the floor**, a minimal Flower App that does
nothing but move the same kind of messages (numpy only: one train message per
site per round, a 20 x 2 array each way) on the same secured loopback. Both
deployments are measured with Flower's SuperExec polling every second (its
default) and every 0.1 s (``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``, what the
loopback sets). Reports median server-side round times.

    python benchmarks/flower_overhead.py [--sites 3 5] [--deployment-rounds 6] [--busy]
"""

import argparse
import json
import os
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import torch

from _shared import busy
from skfedriem import FederatedPCA
from skfedriem.datasets import make_federated_pca
from skfedriem.flower.operations.loopback import LoopbackFederation, main as loopback

FLOOR_APP = '''
"""Flower's floor: a ServerApp and ClientApp that only move a 20 x 2 array (numpy, no torch, no skfedriem)."""
import json
import time
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

client_app = ClientApp()
server_app = ServerApp()


@client_app.train()
def train(msg, context):
    theta = msg.content["theta"]["w"].numpy()
    return Message(RecordDict({"submission": ArrayRecord({"w": Array(0.5 * theta)})}), reply_to=msg)


@server_app.main()
def main(grid, context):
    config = context.run_config
    while len(nodes := sorted(grid.get_node_ids())) < int(config["n-clients"]):
        time.sleep(0.2)
    theta, times = np.zeros((20, 2)), []
    for t in range(int(config["rounds"])):
        started = time.perf_counter()
        messages = [Message(RecordDict({"theta": ArrayRecord({"w": Array(theta)})}), dst_node_id=node,
                            message_type="train", group_id=str(t + 1)) for node in nodes]
        waiting, replies = set(grid.push_messages(messages)), []
        while waiting:  # the same pull loop as skfedriem's transport
            pulled = list(grid.pull_messages(list(waiting)))
            replies += pulled
            waiting -= {r.metadata.reply_to_message_id for r in pulled}
            if waiting:
                time.sleep(0.1)
        theta = np.mean([r.content["submission"]["w"].numpy() for r in replies], axis=0)
        times.append(time.perf_counter() - started)
    Path(str(config["output"])).write_text(json.dumps(times))
'''

FLOOR_PROJECT = '''
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "floor"
version = "1.0.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "bench"

[tool.flwr.app.components]
serverapp = "floor_app:server_app"
clientapp = "floor_app:client_app"

[tool.flwr.app.config]
n-clients = 3
rounds = 5
output = "times.json"
'''


def measure(backend: str, X, groups, args) -> dict:
    est = FederatedPCA(n_components=2, eps=2.0, n_rounds=args.rounds, local_steps=args.local_steps,
                       batch_size=args.batch_size, random_state=0, client_timings=True, backend=backend,
                       solver="riemannian")
    started = time.perf_counter()
    est.fit(X, groups=groups)
    total = time.perf_counter() - started
    rounds = np.array([h["round_seconds"] for h in est.history_])
    return {"backend": backend, "fit_s": total, "median_round_s": float(np.median(rounds)),
            "components": est.components_}


def _polling(seconds: float):
    os.environ["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = str(seconds)


def measure_ours(sites: int, poll: float, args) -> dict:
    _polling(poll)
    with tempfile.TemporaryDirectory(prefix="skfedriem-overhead-") as folder:
        started = time.perf_counter()
        loopback(["--estimator", "pca", "--sites", str(sites), "--records", str(args.records), "--features",
                  str(args.features), "--rounds", str(args.deployment_rounds), "--eps", "2.0",
                  "--site-max-epsilon", "50", "--set", f"local-steps={args.local_steps}",
                  "--set", f"batch-size={args.batch_size}", "--set", 'solver="riemannian"',  # one round a step
                  "--set", "client-timings=true", "--out", folder])
        total = time.perf_counter() - started
        history = json.loads((Path(folder) / "server" / "result.json").read_text())["history"]
    if len(history) != args.deployment_rounds:
        raise RuntimeError(f"The deployment ran {len(history)} rounds, not {args.deployment_rounds}.")
    rounds = [h["round_seconds"] for h in history]
    return {"deployment": "ours", "sites": sites, "poll_s": poll, "total_s": total,
            "median_round_s": float(np.median(rounds[1:])), "first_round_s": rounds[0]}


def measure_floor(sites: int, poll: float, args) -> dict:
    _polling(poll)
    with tempfile.TemporaryDirectory(prefix="skfedriem-floor-") as folder:
        project = Path(folder) / "floor"
        project.mkdir()
        (project / "floor_app.py").write_text(textwrap.dedent(FLOOR_APP))
        (project / "pyproject.toml").write_text(FLOOR_PROJECT)
        data = Path(folder) / "nothing.npy"
        np.save(data, np.zeros((2, 2)))
        started = time.perf_counter()
        with LoopbackFederation(Path(folder) / "logs", [{"data-path": str(data), "name": f"site-{i}"}
                                                       for i in range(sites)]) as federation:
            output = Path(folder) / "times.json"
            federation.run(project, {"n-clients": sites, "rounds": args.deployment_rounds, "output": str(output)},
                           timeout=900)
            rounds = json.loads(output.read_text())
        total = time.perf_counter() - started
    return {"deployment": "floor", "sites": sites, "poll_s": poll, "total_s": total,
            "median_round_s": float(np.median(rounds[1:])), "first_round_s": rounds[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=5, help="clients of the in-process and simulation runs")
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20, help="rounds in process and in simulation")
    parser.add_argument("--local-steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--sites", type=int, nargs="+", default=[3, 5], help="sites of the deployments")
    parser.add_argument("--polls", type=float, nargs="+", default=[1.0, 0.1], help="SuperExec poll intervals (s)")
    parser.add_argument("--deployment-rounds", type=int, default=6, help="0 skips the deployments")
    parser.add_argument("--busy", action="store_true", help="two processes spin beside every measurement")
    args = parser.parse_args()
    torch.set_num_threads(1)
    X, groups = make_federated_pca(n_clients=args.clients, n_samples_per_client=args.records,
                                   n_features=args.features, random_state=0)
    with busy(args.busy), busy(args.busy):
        local = measure("local", X, groups, args)
        flower = measure("flower", X, groups, args)
        same = bool(np.allclose(local.pop("components"), flower.pop("components"), atol=1e-10))
        deployments = [run(sites, poll, args) for sites in (args.sites if args.deployment_rounds else [])
                       for poll in args.polls for run in (measure_floor, measure_ours)]
    print(f"FederatedPCA, d={args.features}, p=2, tau={args.local_steps}, B={args.batch_size}, eps=2"
          f"{' (two busy processes beside)' if args.busy else ''}")
    print(f"in process ({args.clients} clients, T={args.rounds}): {1e3 * local['median_round_s']:.1f} ms a round; "
          f"simulation: {1e3 * flower['median_round_s']:.1f} ms ({flower['median_round_s'] / local['median_round_s']:.1f}"
          f"x); same model: {same}")
    print(f"{'deployment':10} {'sites':>5} {'poll (s)':>8} {'median round (s)':>17} {'first round (s)':>16} "
          f"{'vs floor':>8}")
    floors = {(d["sites"], d["poll_s"]): d["median_round_s"] for d in deployments if d["deployment"] == "floor"}
    for d in deployments:
        ratio = d["median_round_s"] / floors[d["sites"], d["poll_s"]]
        d["vs_floor"] = ratio
        print(f"{d['deployment']:10} {d['sites']:5d} {d['poll_s']:8.2f} {d['median_round_s']:17.2f} "
              f"{d['first_round_s']:16.2f} {ratio:7.2f}x")
    print(json.dumps({"benchmark": "flower_overhead", "busy": args.busy, "local": local, "flower": flower,
                      "same_model": same, "deployments": deployments}))


if __name__ == "__main__":
    main()
