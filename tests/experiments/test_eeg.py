import csv
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("moabb")
pytest.importorskip("matplotlib")

from skfedriem.experiments.__main__ import main  # noqa: E402
from skfedriem.experiments.eeg import DATASETS, make_estimator, split_trials  # noqa: E402


def read_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_split_is_disjoint_stratified_and_seeded():
    y = np.repeat([0, 1], 50)
    subjects = np.tile(np.repeat([1, 2], 25), 2)
    train, valid, test = split_trials(y, subjects, seed=0)
    assert not (train & valid).any() and not (train & test).any() and not (valid & test).any()
    assert (train | valid | test).all()
    for s in (1, 2):
        for label in (0, 1):
            cell = (subjects == s) & (y == label)
            assert (test & cell).sum() == 5 and (valid & cell).sum() == 5
    again = split_trials(y, subjects, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip((train, valid, test), again))
    assert not np.array_equal(split_trials(y, subjects, seed=1)[2], test)


def test_arms_map_to_the_right_estimators():
    config = DATASETS["BNCI2014_001"]
    prirfed = make_estimator("prirfed", 5.0, 0, config, 3, 1.0, None, "paper")
    assert (prirfed.accounting, prirfed.sampling, prirfed.aggregation) == ("prirfed", "poisson", "retavg")
    assert prirfed.dims == (16,) and prirfed.reeig_eps == 8e-5 and prirfed.lr == 1e-2 and prirfed.n_rounds == 200
    rl = make_estimator("rlavg", None, 3, config, 3, 0.5, 7)
    assert rl.aggregation == "rlavg" and rl.clients_per_round == 2 and rl.n_rounds == 7 and rl.random_state == 3
    eegnet = make_estimator("eegnet", 10.0, 0, config, 3, 1.0, None, "paper")
    assert type(eegnet).__name__ == "FederatedEEGNetClassifier" and eegnet.batch_size == 16 and eegnet.n_rounds == 300
    assert eegnet.normalization is None  # the paper's private EEGNet: nothing between its layers
    assert make_estimator("central-spdnet", 10.0, 0, config, 3, 0.5, None).clients_per_round is None
    assert prirfed.optimizer == eegnet.optimizer == "adam"  # the paper's schedule
    planned = make_estimator("projavg", 4.0, 0, config, 3, 1.0, None)
    assert type(planned).__name__ == "FederatedSPDNetClassifier" and planned.dims is None
    assert planned.optimizer == planned.lr == planned.n_rounds == "auto" and planned.reference == "auto"
    assert make_estimator("eegnet", 4.0, 0, config, 3, 1.0, None).normalization == "layer"
    distributed = make_estimator("spdnet-distributed", 4.0, 0, config, 3, 1.0, None)
    assert distributed.noise == "distributed" and make_estimator("tangent-distributed", 4.0, 0, config, 3, 1.0,
                                                                   None).noise == "distributed"
    tangent = make_estimator("tangent", 4.0, 0, config, 3, 1.0, 9, "paper")
    assert type(tangent).__name__ == "FederatedTangentSpaceClassifier" and tangent.n_rounds == 9
    assert tangent.optimizer == "auto"  # the paper has no tangent model: its own schedule under either
    with pytest.raises(ValueError, match="Unknown arm"):
        make_estimator("fedprox", 1.0, 0, config, 3, 1.0, None)
    with pytest.raises(ValueError, match="'schedule' parameter must be one of"):
        make_estimator("projavg", 1.0, 0, config, 3, 1.0, None, "fast")


def test_the_motor_channel_dataset_keeps_nine_channels():
    config = DATASETS["PhysionetMI-motor"]
    assert config.moabb_name == "PhysionetMI" and len(config.channels) == 9 and config.subjects_per_client == 2


@pytest.mark.slow
def test_runner_end_to_end_is_consistent_and_resumable(tmp_path):
    out = tmp_path / "study"
    arms = ["projavg", "prirfed", "eegnet", "central-spdnet", "spdnet-distributed"]
    main(["eeg", "--dataset", "FakeDataset", "--arms", *arms, "--eps", "none", "10", "--seeds", "2",
          "--participation", "1.0", "0.67", "--rounds", "2", "--out", str(out), "--quiet"])
    rows = read_rows(out / "runs.csv")
    # 4 arms x 2 eps x 2 seeds at p = 1, the 3 federated arms again at p = 0.67; the distributed arm at eps = 10 only
    assert len(rows) == 4 * 2 * 2 + 3 * 2 * 2 + 2 * 2
    assert {r["eps"] for r in rows if r["arm"] == "spdnet-distributed"} == {"10"}
    for row in rows:
        assert 0 <= float(row["test_accuracy"]) <= 1 and 2 <= int(row["batch_size"]) <= 64  # the planned B, clamped to a client
        if row["eps"] == "10":
            assert float(row["epsilon_certified"]) <= 10 and float(row["noise_std"]) > 0
        else:
            assert row["epsilon_certified"] == "inf"
        assert int(row["clients_per_round"]) == {"1": 3, "0.67": 2}[row["participation"]] or row["arm"] == "central-spdnet"
    with pytest.raises(ValueError, match="holds runs of schedule 'planned'"):
        main(["eeg", "--dataset", "FakeDataset", "--arms", "projavg", "--eps", "none", "--seeds", "1", "--rounds", "2",
              "--schedule", "paper", "--out", str(out), "--quiet"])
    curves = read_rows(out / "curves.csv")
    assert len(curves) == 2 * len(rows)  # 2 rounds per run
    table = (out / "table.md").read_text()
    cell = [r for r in rows if (r["arm"], r["eps"], r["participation"]) == ("projavg", "none", "1")]
    mean = 100 * np.mean([float(r["test_accuracy"]) for r in cell])
    assert "| projavg | " in table and f"{mean:.1f} ±" in table
    for figure in ("learning_curves.png", "privacy_utility.png"):
        assert (out / figure).stat().st_size > 1000

    # resume: a finished study runs nothing; a lost row is run again, and only it
    before = (out / "runs.csv").read_text()
    main(["eeg", "--dataset", "FakeDataset", "--arms", *arms, "--eps", "none", "10", "--seeds", "2",
          "--participation", "1.0", "0.67", "--rounds", "2", "--out", str(out), "--quiet"])
    assert (out / "runs.csv").read_text() == before
    lines = before.splitlines(keepends=True)
    (out / "runs.csv").write_text("".join(lines[:-1]))
    main(["eeg", "--dataset", "FakeDataset", "--arms", *arms, "--eps", "none", "10", "--seeds", "2",
          "--participation", "1.0", "0.67", "--rounds", "2", "--out", str(out), "--quiet"])
    after = read_rows(out / "runs.csv")
    assert len(after) == len(rows)
    timings = ("seconds", "aggregation_ms_per_round")
    assert {k: v for k, v in after[-1].items() if k not in timings} == {k: v for k, v in rows[-1].items() if k not in timings}


def test_cli_rejects_bad_eps():
    with pytest.raises(SystemExit):
        main(["eeg", "--dataset", "FakeDataset", "--eps", "-1"])


def test_the_report_says_what_it_measured(tmp_path):
    """One seed is no spread; non-private is named on the ε axis; every participation is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from skfedriem.experiments import report

    runs = pd.DataFrame({"dataset": "d", "arm": "projavg", "eps": ["none", "10", "10", "none"], "seed": [0, 0, 0, 0],
                         "participation": [1.0, 1.0, 0.5, 0.5], "test_accuracy": [0.8, 0.6, 0.55, 0.75]})
    table = report.results_table(runs)
    assert "80.0 (n=1)" in table and "± 0.0" not in table
    runs.to_csv(tmp_path / "runs.csv", index=False)
    curves = runs.loc[runs.index.repeat(2)].assign(round=[1, 2] * 4, valid_accuracy=0.5)
    curves.to_csv(tmp_path / "curves.csv", index=False)
    drawn = []
    saved = matplotlib.figure.Figure.savefig

    def keep(fig, path, **kw):
        drawn.append((Path(path).name, fig))
        return saved(fig, path, **kw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matplotlib.figure.Figure, "savefig", keep)
        report.write_report(tmp_path)
    figures = dict(drawn)
    assert len(figures["learning_curves.png"].axes) == 2 * 2  # two participations x two ε
    utility = figures["privacy_utility.png"].axes
    assert len(utility) == 2 and [t.get_text() for t in utility[0].get_xticklabels()] == ["10", "non-private"]


def test_runs_in_parallel_jobs_give_the_same_rows(tmp_path):
    args = ["eeg", "--dataset", "FakeDataset", "--arms", "projavg", "tangent", "--eps", "none", "10", "--seeds", "2",
            "--rounds", "2", "--quiet"]
    main([*args, "--out", str(tmp_path / "one")])
    main([*args, "--out", str(tmp_path / "two"), "--jobs", "2"])
    timings = ("seconds", "aggregation_ms_per_round")

    def by_run(folder):
        return {(r["arm"], r["eps"], r["seed"]): {k: v for k, v in r.items() if k not in timings}
                for r in read_rows(tmp_path / folder / "runs.csv")}

    assert len(by_run("one")) == 8 and by_run("two") == by_run("one")
