"""Run every benchmark at a tiny scale, so none of them rots between the runs that fill the docs' tables.

Not a measurement: the figures of a smoke run mean nothing. Each script must
exit 0 and end with its JSON line. ``.ci/run`` calls this after the tests.

    python benchmarks/smoke.py
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Tiny arguments for each benchmark script; None: not run here, with the reason.
SMOKE_ARGS: dict[str, list[str] | str] = {
    "accounting": ["--epsilons", "1", "--rounds", "20", "--cost-targets", "2"],
    "aggregation_cost": [],
    "classifier_planning": ["--seeds", "1", "--rounds", "2", "--eps", "10"],
    "group_charge": ["--mu0", "0.5", "--rates", "0.2", "--steps", "5", "--ks", "2"],
    "distributed_cost": ["--clients", "3", "--rounds", "3", "--repeats", "1"],
    "distributed_noise": ["--seeds", "1", "--eps", "10", "--federations", "synthetic", "--models", "tangent",
                          "--rounds", "2"],
    "flower_overhead": ["--rounds", "2", "--deployment-rounds", "0"],
    "noise_ratio": [],
    "pca_clip": ["--draws", "1"],
    "pca_privacy_cost": ["--rounds", "2", "--seeds", "1", "--clients", "10", "--records", "1000",
                         "--figure", "{tmp}/pca_privacy_cost.png"],
    "pca_solvers": ["--seeds", "1", "--epsilons", "1", "--sweep-epsilons", "1", "--dims", "16", "--components", "5",
                    "--rounds", "5", "--planner-grid", "--grid-rounds", "5", "--grid-lrs", "0.5",
                    "--figure", "{tmp}/pca_solvers.png"],
    "personalised": ["--no-real", "--seeds", "1", "--synthetic", "3", "--private", "distributed:10"],
    "physionet_real": "needs the EEGMMIDB files and several minutes even at one seed",
    "real_planning": ["--federations", "small-clients", "--eps", "10", "--lrs", "0.3", "--rounds", "2", "--seeds", "1"],
    "poisson_lockstep": ["--clients", "8", "--rounds", "2", "--busy-clients", "8"],
    "privacy_unit": ["--seeds", "1", "--eps", "10", "--rounds", "2", "--no-real"],
    "subject_batch": ["--seeds", "1", "--eps", "10", "--ks", "2", "--rounds", "2", "--no-real", "--sites-of", "3"],
    "privacy_audit": ["--runs", "20", "--runs-subsampled", "20", "--runs-fits", "10", "--jobs", "1"],
    "secure_aggregation": ["--rounds", "0", "--compute-sites", "3", "--lengths", "64", "--repeats", "1"],
    "secure_mode": ["--repeats", "2"],
    "skellam_accounting": ["--settings", "0.1:30:4", "--shift", "5"],
    "speed": ["--rounds", "2", "--pca-rounds", "2", "--repeats", "3", "--busy-workload", "none", "--clients", "3",
              "--scaling-rounds", "2", "--calibration-targets", "2"],
    "spdnet_step": ["--rounds", "2", "--repeats", "3"],
    "spdnet_real": "needs the EEGMMIDB files and minutes even at one seed",
    "eegnet_real": "needs the EEGMMIDB files and minutes even at one seed",
    "moabb_physionet": "needs the EEGMMIDB files and minutes even for one subject",
    "eeg_study_physionet": "needs the EEGMMIDB files and hours; the runner it calls is smoke-tested by tests/experiments",
    "recentring_gain": "needs the EEGMMIDB files (the 24 real subjects are its only data)",
    "tangent_offset": ["--no-real"],
    "tangent_reference": ["--seeds", "1", "--eps", "10", "--rounds", "2"],
}
NOT_BENCHMARKS = {"report", "smoke"}


def benchmark_names() -> list[str]:
    """Every benchmark script in this folder."""
    return sorted(p.stem for p in HERE.glob("*.py") if p.stem not in NOT_BENCHMARKS and not p.stem.startswith("_"))


def main() -> int:
    missing = set(benchmark_names()) - set(SMOKE_ARGS)
    if missing:
        print(f"no smoke arguments for {sorted(missing)}: add them to SMOKE_ARGS")
        return 1
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in benchmark_names():
            args = SMOKE_ARGS[name]
            if isinstance(args, str):
                print(f"{name:18} skipped: {args}")
                continue
            started = time.perf_counter()
            done = subprocess.run([sys.executable, str(HERE / f"{name}.py"), *(a.format(tmp=tmp) for a in args)],
                                  capture_output=True, text=True)
            seconds = time.perf_counter() - started
            lines = done.stdout.strip().splitlines()
            try:
                ok = done.returncode == 0 and json.loads(lines[-1])["benchmark"] == name
            except (IndexError, ValueError, KeyError, TypeError):
                ok = False
            print(f"{name:18} {'ok' if ok else 'FAILED':6} {seconds:6.1f} s")
            if not ok:
                failures.append(name)
                print(done.stdout[-2000:], done.stderr[-4000:], sep="\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
