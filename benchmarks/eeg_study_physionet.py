"""The paper's comparison on the 24 real PhysionetMI subjects, as kept in ``benchmarks/results/eeg_study_physionet*/``.

One command per study reruns exactly the runs kept in its folder (the runner is resumable: a kept run is not trained
again, so on the kept folders it only redraws the figures; with ``--out`` elsewhere it trains them all):

* ``motor``: 9 motor-cortex channels (``PhysionetMI-motor``), 5 seeds, full participation: every arm at
  ε ∈ {none, 20, 10}, the SPDNet, PriRFed and tangent arms at ε = 5 too; those arms at half participation as well.
  Its EEGNet runs are kept from EEGNet's earlier default, group normalisation (on a new ``--out`` they train at
  today's, layer normalisation).
* ``all``: the 64 channels (``PhysionetMI``), ε ∈ {none, 10}, 3 seeds, full participation: SPDNet (ProjAvg), the
  tangent model and EEGNet, each with local and distributed noise.
* ``paper``: the paper's schedules (``--schedule paper``: Adam at the paper's steps, SPDNet at the identity, EEGNet
  with nothing between its layers), local noise, 64 channels, ε ∈ {none, 20, 10, 5}, 5 seeds, both participations.

    python benchmarks/eeg_study_physionet.py motor [--data ../shared/data/eegmmidb] [--jobs 2] [--out DIR]
"""

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parents[1] / "shared" / "data" / "eegmmidb"
SPDNET_ARMS = ["projavg", "rlavg", "retavg", "prirfed", "tangent", "spdnet-distributed", "tangent-distributed"]
EEGNET_ARMS = ["eegnet", "eegnet-distributed"]
#: Each study: its dataset, and the runner's invocations (arms, ε, seeds, participation) in the order they ran.
STUDIES = {
    "motor": ("PhysionetMI-motor", [
        (SPDNET_ARMS + EEGNET_ARMS, ["none", "20", "10"], 5, ["1"]),
        (SPDNET_ARMS, ["5"], 5, ["1"]),
        (SPDNET_ARMS, ["none", "20", "10", "5"], 5, ["0.5"]),
    ]),
    "all": ("PhysionetMI", [
        (["projavg", "tangent", "spdnet-distributed", "tangent-distributed"], ["none", "10"], 3, ["1"]),
        (EEGNET_ARMS, ["none", "10"], 3, ["1"]),
    ]),
    "paper": ("PhysionetMI", [
        (["projavg", "rlavg", "retavg", "prirfed", "eegnet"], ["none", "20", "10", "5"], 5, ["1", "0.5"]),
    ]),
}
FOLDERS = {"motor": "eeg_study_physionet_motor", "all": "eeg_study_physionet", "paper": "eeg_study_physionet_paper"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", choices=sorted(STUDIES))
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/<the study's folder>")
    args = parser.parse_args()
    dataset, invocations = STUDIES[args.study]
    out = args.out or HERE / "results" / FOLDERS[args.study]
    schedule = ["--schedule", "paper"] if args.study == "paper" else []
    for arms, eps, seeds, participation in invocations:
        subprocess.run([sys.executable, "-m", "skfedriem.experiments", "eeg", "--dataset", dataset,
                        "--eegmmidb", str(args.data), "--arms", *arms, "--eps", *eps, "--seeds", str(seeds),
                        "--participation", *participation, "--jobs", str(args.jobs), "--out", str(out), *schedule],
                       check=True)
    (out / "command.txt").write_text(f"python benchmarks/eeg_study_physionet.py {args.study}\n")


if __name__ == "__main__":
    main()
