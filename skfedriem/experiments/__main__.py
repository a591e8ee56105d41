"""Command line: ``python -m skfedriem.experiments eeg --dataset PhysionetMI --arms projavg eegnet ...``."""

from __future__ import annotations

import argparse
import sys

from .eeg import ARMS, DATASETS, SCHEDULES, run_study


def _eps(value: str) -> float | None:
    if value.lower() in ("none", "inf"):
        return None
    eps = float(value)
    if not eps > 0:
        raise argparse.ArgumentTypeError(f"eps must be > 0 or 'none'. Got {value!r}.")
    return eps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m skfedriem.experiments")
    commands = parser.add_subparsers(dest="command", required=True)
    eeg = commands.add_parser("eeg", help="the paper's EEG comparison (docs: user guide, EEG)",
                              description="Federated SPDNet (ProjAvg, RLAvg, RetAvg), PriRFed, EEGNet, the "
                              "tangent-space model (local and distributed noise) and centralised references over ε, "
                              "seeds and participation; resumable.")
    eeg.add_argument("--dataset", choices=sorted(DATASETS), required=True, help="the MOABB dataset (FakeDataset: a "
                     "dry run)")
    eeg.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS), metavar="ARM",
                     help=f"what to train, one row of the table each (default: all of {', '.join(ARMS)})")
    eeg.add_argument("--eps", nargs="+", type=_eps, default=[None, 20.0, 10.0, 5.0],
                     help="target ε values; 'none' is non-private (default: none 20 10 5)")
    eeg.add_argument("--seeds", type=int, default=10, help="runs per arm and ε, each with its own seed (default: 10)")
    eeg.add_argument("--participation", nargs="+", type=float, default=[1.0],
                     help="fractions of the clients selected per round (default: 1.0)")
    eeg.add_argument("--rounds", type=int, default=None, help="override the dataset's number of rounds")
    eeg.add_argument("--schedule", choices=SCHEDULES, default="planned",
                     help="planned: every estimator's own defaults (default); paper: the paper's fixed settings")
    eeg.add_argument("--out", default=None, help="output folder (default: results/<dataset>)")
    eeg.add_argument("--eegmmidb", default=None, help="local PhysioNet eegmmidb folder (PhysionetMI offline)")
    eeg.add_argument("--jobs", type=int, default=None, help="runs fitted at the same time, one process and one "
                     "thread each (default: 1; -1: every CPU); results do not depend on it")
    eeg.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    out = run_study(args.dataset, args.arms, args.eps, args.seeds, args.participation,
                    args.out or f"results/{args.dataset}", n_rounds=args.rounds, eegmmidb=args.eegmmidb, n_jobs=args.jobs,
                    schedule=args.schedule, verbose=0 if args.quiet else 1)
    print((out / "table.md").read_text())
    print(f"runs, curves, table and figures in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
