"""Real, secured Flower deployments on 127.0.0.1 of every estimator: TLS, registered SuperNodes, crashes."""

import json
import re
import pickle
from pathlib import Path

import numpy as np
import pytest
import tomllib

pytest.importorskip("flwr")

from skfedriem import FederatedPCA, FederatedSPDNetClassifier, FederatedTangentSpaceClassifier
from skfedriem.flower.operations.loopback import main
from skfedriem.flower.deployment.run_config import ESTIMATORS, estimator_from_run_config, load_site_records
from skfedriem.privacy import PrivacyBudget


def site_data(tmp_path, n, targets):
    return [load_site_records(tmp_path / f"site-{i}" / ("records.npz" if targets else "records.npy"),
                              targets=targets) for i in range(n)]


@pytest.mark.deployment
def test_pca_deployment_refuses_an_intruder_and_survives_sites_that_leave_or_restart(tmp_path, capsys):
    summary = main(["--estimator", "pca", "--sites", "3", "--rounds", "3", "--eps", "2.0", "--intruder",
                    "--kill-site-after-round", "1", "--restart-site-after-round", "1", "--round-timeout", "30",
                    "--kill-server-after-round", "2", "--site-max-epsilon", "5.0", "--timeout", "420",
                    "--set", 'solver="riemannian"', "--set", "local-steps=5", "--set", "batch-size=50",
                    "--set", "lr=0.2", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "killed site-0's SuperNode" in out and "restarted site-2's SuperNode" in out
    # the server crashed after round 2 and resumed without site-0, which is gone for good
    assert "resuming with ['site-1', 'site-2']; gone: ['site-0']" in out
    # site-0 is gone for good; site-2 may have missed round 2 while it restarted, and rejoined round 3
    replied = summary["replied"]
    assert replied[0] == [0, 1, 2] and replied[1] in ([1], [1, 2]) and replied[2] == [1, 2]
    assert summary["intruder_refused"]  # its key was never registered: the SuperLink refused it
    assert summary["tls_verified"] and summary["plaintext_refused"]
    result = json.loads((tmp_path / "server" / "result.json").read_text())
    assert result["clients"] == ["site-0", "site-1", "site-2"]  # the intruder is not among them
    # every round is charged, the missed one included: the in-process plan's epsilon
    X = np.vstack([x for x, _ in site_data(tmp_path, 3, False)])
    reference = FederatedPCA(n_components=2, eps=2.0, n_rounds=3, local_steps=5, batch_size=50,
                             solver="riemannian").fit(
        X, groups=np.repeat([0, 1, 2], 120))
    assert result["epsilon"] == reference.epsilon_ <= 2.0
    # each site's own ledger holds the rounds it took, site-2's across its restart
    rounds = {i: [re.search(r"round (\S+)", f["label"]).group(1)
                  for f in PrivacyBudget(5.0, path=tmp_path / f"site-{i}" / "ledger.json").fits] for i in range(3)}
    assert rounds[0] == ["1"] and rounds[1] == ["1", "2", "3"]
    took = [str(r + 1) for r in range(3) if 2 in replied[r]]
    assert set(took) <= set(rounds[2]) <= {"1", "2", "3"} and rounds[2][-1] == "3"  # charged for all it answered
    restarted = (tmp_path / "logs" / "supernode-2.log").read_text().split("Starting Flower SuperNode")
    assert len(restarted) == 3 and "ROUND 3" in restarted[2]  # the new process took round 3
    with (tmp_path / "server" / "estimator.pkl").open("rb") as f:
        est = pickle.load(f)
    np.testing.assert_allclose(est.components_ @ est.components_.T, np.eye(2), atol=1e-8)


@pytest.mark.deployment
def test_spdnet_deployment_resumes_after_a_server_crash_and_equals_the_in_process_fit(tmp_path):
    summary = main(["--estimator", "spdnet", "--sites", "2", "--rounds", "2", "--eps", "none", "--records", "40",
                    "--set", "batch-size=40", "--set", "local-steps=2", "--set", "seed=0",
                    "--kill-server-after-round", "1", "--timeout", "420", "--out", str(tmp_path)])
    assert summary["rounds"] == 2 and summary["tls_verified"]
    with (tmp_path / "server" / "estimator.pkl").open("rb") as f:
        deployed = pickle.load(f)
    data = site_data(tmp_path, 2, True)
    X, y = np.concatenate([x for x, _ in data]), np.concatenate([t for _, t in data])
    # a deployment releases no mean before its rounds: its SPDNet reads the trials at the identity
    local = FederatedSPDNetClassifier(eps=None, dims=(3,), batch_size=40, local_steps=2, n_rounds=2, reference=None,
                                      random_state=0).fit(X, y, groups=np.repeat([0, 1], 40))
    # noise off, full batches: the crash and the resume changed nothing
    np.testing.assert_allclose(deployed.predict_proba(X), local.predict_proba(X), atol=1e-4)
    assert deployed.classes_.tolist() == [0, 1] and len(deployed.history_) == 2 and deployed.random_state == 0
    assert all("valid_accuracy" in h for h in deployed.history_)  # on the server's own validation file


@pytest.mark.deployment
def test_eegnet_deployment_writes_a_working_estimator_and_its_learning_curve(tmp_path):
    summary = main(["--estimator", "eegnet", "--sites", "2", "--rounds", "1", "--eps", "8.0", "--features", "4",
                    "--timeout", "420", "--out", str(tmp_path)])
    assert summary["epsilon"] <= 8.0 and summary["replied"] == [[0, 1]]
    with (tmp_path / "server" / "estimator.pkl").open("rb") as f:
        est = pickle.load(f)
    assert est.random_state is None  # the run set no seed (issue 22)
    X, _ = site_data(tmp_path, 1, True)[0]
    assert est.predict(X).shape == (len(X),) and (tmp_path / "server" / "learning_curve.png").stat().st_size > 0


def test_run_config_is_validated():
    with pytest.raises(ValueError, match="aggregation"):
        estimator_from_run_config("pca", {"aggregation": "mean"})
    with pytest.raises(ValueError, match="eps"):
        estimator_from_run_config("spdnet", {"eps": -1.0})
    with pytest.raises(ValueError, match="'colour' is not a parameter of FederatedEEGNetClassifier"):
        estimator_from_run_config("eegnet", {"colour": "red"})
    est = estimator_from_run_config("spdnet", {"eps": "none", "dims": "8,4", "clients-per-round": 0, "seed": 3})
    assert est.eps is None and est.dims == (8, 4) and est.clients_per_round is None and est.random_state == 3
    assert estimator_from_run_config("eegnet", {"f1": 4, "kernel-length": 32}).F1 == 4
    # the reference point travels as its values, never as a path a site would load from its own disk
    np.testing.assert_array_equal(estimator_from_run_config("tangent", {"reference": "2 0, 0 1"}).reference,
                                  [[2, 0], [0, 1]])
    assert estimator_from_run_config("tangent", {"reference": ""}).reference is None
    with pytest.raises(ValueError, match="'reference' = '/site/mean.npy' is not valid"):
        estimator_from_run_config("tangent", {"reference": "/site/mean.npy"})
    with pytest.raises(ValueError, match="'reference' = '1 2 3' is not valid"):
        estimator_from_run_config("tangent", {"reference": "1 2 3"})


def test_site_data_is_checked(tmp_path):
    bad = tmp_path / "x.npy"
    np.save(bad, np.array([[1.0, np.nan], [0.0, 1.0], [1.0, 1.0]]))
    X, _ = load_site_records(bad, targets=False)  # a non-finite record is the estimator's to make zero-weight
    (inputs,) = FederatedPCA(n_components=1).prepare_records(X, site=True)
    assert inputs.tolist() == [[0.0, 0.0], [0.0, 1.0], [1.0, 1.0]]  # every record kept: the file's count
    with pytest.raises(ValueError, match="NaN"):
        FederatedPCA(n_components=1).prepare_records(X)  # a fit on one's own data says which record
    with pytest.raises(ValueError, match="data-path.*.npz"):
        load_site_records(tmp_path / "x.npy", targets=True)
    np.savez(tmp_path / "nolabels.npz", X=np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"arrays named \['X', 'y'\]"):
        load_site_records(tmp_path / "nolabels.npz", targets=True)


# set by the site or the caller, not by the run: a site's secure_mode is in its node config; lockstep and device
# place simulated clients on the caller's machine (a deployed site runs its one client)
# subject_clients forms clients from subjects inside one fit; a deployment's clients are its sites
# recentre: a deployed site releases no mean of its own yet (refused by name there)
NOT_IN_RUN_CONFIG = {"backend", "n_jobs", "privacy_budget", "secure_mode", "verbose", "warm_start", "init",
                     "lockstep", "device", "subject_clients", "recentre"}


@pytest.mark.parametrize("kind", ["pca", "spdnet", "eegnet", "tangent"])
def test_every_estimator_parameter_can_be_set_in_a_deployment(kind):
    # flwr refuses a --run-config key its App project does not declare (as solver was, at first)
    project = Path(__file__).parents[2] / "skfedriem" / "flower" / "deployment" / "projects" / kind / "pyproject.toml"
    declared = tomllib.loads(project.read_text())["tool"]["flwr"]["app"]["config"]
    aliases = {"rounds": "n_rounds", "seed": "random_state"}
    names = {aliases.get(k.replace("-", "_").lower(), k.replace("-", "_").lower()) for k in declared}
    params = {name.lower() for name in ESTIMATORS.get(kind)().get_params()}
    assert params - NOT_IN_RUN_CONFIG <= names
    estimator_from_run_config(kind, {**declared, "seed": 0})  # and every declared value is valid


@pytest.mark.deployment
@pytest.mark.parametrize("records_per_subject", [None, 3])
def test_a_subject_level_deployment_is_charged_per_subject_as_the_in_process_fit(tmp_path, records_per_subject):
    """Sites name their subject column; the server plans from their subject counts (or k records of each); the
    run's ε and each site's ledger are per subject, at the in-process fit's value."""
    k = [] if records_per_subject is None else ["--set", f"records-per-subject={records_per_subject}"]
    summary = main(["--estimator", "tangent", "--sites", "2", "--rounds", "2", "--eps", "4.0", "--records", "40",
                    "--privacy-unit", "subject", "--subjects-per-site", "4", "--set", "batch-size=2", *k,
                    "--timeout", "420", "--out", str(tmp_path)])
    units = 4 if records_per_subject is None else 4 * records_per_subject
    assert summary["privacy_unit"] == "subject" and summary["n_records"] == [units, units]
    data = site_data(tmp_path, 2, True)
    X, y = np.concatenate([x for x, _ in data]), np.concatenate([t for _, t in data])
    groups = np.repeat([0, 1], 40)
    subjects = np.array([f"{g}-{i % 4}" for g, i in zip(groups, np.tile(np.arange(40), 2))])
    local = FederatedTangentSpaceClassifier(eps=4.0, privacy_unit="subject", n_rounds=2, batch_size=2,
                                            local_steps=3, classes=(0, 1), records_per_subject=records_per_subject
                                            ).fit(X, y, groups=groups, subjects=subjects)
    assert summary["epsilon"] == local.epsilon_ <= 4.0
    for i in range(2):
        ledger = PrivacyBudget(10.0, path=tmp_path / f"site-{i}" / "ledger.json")
        assert all(f["privacy_unit"] == "subject" for f in ledger.fits) and len(ledger.fits) == 2
        assert {step.get("group_size", 1) for f in ledger.fits for step in f["steps"]} == {records_per_subject or 1}
        assert ledger.spent() <= 4.0 + 1e-9


@pytest.mark.deployment
def test_a_distributed_deployment_certifies_the_in_process_epsilon_and_recovers_a_killed_sites_masks(tmp_path, capsys):
    """Five secured sites consent to distributed noise (node settings noise, federation-keys, signing-key); every
    round runs under secure aggregation. Site-0 is killed after round 2: the next rounds list it as dropped (the
    survivors' shares remove its pairwise masks of the batch it shared keys for) and complete with four sites; a
    round it was still listed alive in, if any, is abandoned and discarded. The certificate is the in-process fit's,
    and every site's ledgers cover what it ran."""
    summary = main(["--estimator", "pca", "--sites", "5", "--rounds", "5", "--eps", "2.0", "--noise", "distributed",
                    "--semi-honest-server", "--kill-site-after-round", "2", "--round-timeout", "30",
                    "--set", 'solver="riemannian"', "--set", "local-steps=1", "--timeout", "420",
                    "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "killed site-0's SuperNode" in out and "4 survivors, 1 dropped" in out
    replied = summary["replied"]
    assert replied[0] == replied[1] == [0, 1, 2, 3, 4] and replied[-1] == [1, 2, 3, 4]
    result = json.loads((tmp_path / "server" / "result.json").read_text())
    assert all(h["replied"] == [] for h in result["history"] if "discarded" in h)  # abandoned, not averaged
    X = np.vstack([x for x, _ in site_data(tmp_path, 5, False)])
    reference = FederatedPCA(n_components=2, eps=2.0, n_rounds=5, local_steps=1, solver="riemannian",
                             noise="distributed").fit(X, groups=np.repeat(np.arange(5), 120))
    assert result["epsilon"] == reference.epsilon_ <= 2.0
    for i in range(5):
        ledger = tmp_path / f"site-{i}" / "ledger.json"
        local = PrivacyBudget(float("inf"), path=ledger).fits
        central = PrivacyBudget(float("inf"), path=ledger.with_name("ledger.central.json"))
        assert len(local) == len(central.fits) and (len(local) == 2 if i == 0 else len(local) >= 3)
        assert central.spent() <= result["epsilon"] * (1 + 1e-9)


@pytest.mark.parametrize("argv, message", [
    (["--noise", "distributed", "--sites", "1"], "at least 2 sites"),
    (["--rounds", "0"], "--rounds must be at least 1"), (["--rounds", "-5"], "--rounds must be at least 1"),
    (["--eps", "-1"], "--eps must be a positive number"), (["--eps", "abc"], "--eps must be a positive number"),
    (["--privacy-unit", "subject", "--subjects-per-site", "0"], "--subjects-per-site must be at least 1"),
    (["--site-max-epsilon", "-3"], "--site-max-epsilon must be positive"),
    (["--timeout", "-1"], "--timeout must be positive"), (["--sites", "0"], "--sites must be at least 1"),
    (["--records", "0"], "--records must be at least 1"), (["--set", "garbage"], "--set takes KEY=VALUE"),
    (["--semi-honest-server"], "--semi-honest-server bounds epsilon_central"),
    (["--deviating-server"], "--deviating-server bounds what a deviating server"),
    (["--noise", "distributed", "--deviating-server", "--semi-honest-server"], "give one"),
    (["--kill-site-after-round", "5"], "--kill-site-after-round must name a round"),
    (["--kill-sites", "2"], "--kill-sites 2 says how many sites --kill-site-after-round kills"),
    (["--kill-sites", "3", "--kill-site-after-round", "2"], "--kill-sites must leave a site running"),
    (["--set", "dropouts=1"], "dropouts=1 keeps the noise shares"),
    (["--noise", "distributed", "--set", "colluders=99"], "'colluders' parameter must be below the 3 clients"),
    (["--estimator", "tangent", "--noise", "distributed", "--set", "local-steps=3"], "local_steps=3"),
    (["--estimator", "spdnet", "--set", 'aggregation="rlavg"', "--noise", "distributed"], "aggregation='rlavg'"),
    (["--estimator", "spdnet", "--set", "colluders=2"], "colluders=2 sizes the noise shares"),
    (["--set", "n-clients=7"], "--set n-clients: set it with --sites"),
    (["--noise", "distributed", "--set", 'noise="local"'], "--set noise: set it with --noise"),
    (["--set", 'eps="none"'], "--set eps: set it with --eps"),
    (["--kill-server-after-round", "4", "--set", "rounds=2"], "--set rounds: set it with --rounds"),
    (["--site-max-epsilon", "0.1", "--eps", "2"], "--site-max-epsilon 0.1 is below the run's --eps 2"),
])
def test_the_loopback_refuses_a_bad_flag_or_setting_before_any_process_starts(argv, message, tmp_path, capsys,
                                                                               monkeypatch):
    """Each of these started a full TLS deployment and failed 50–240 s later in Flower's unhandled exception, hung, or
    ended in a raw traceback (--sites 1 with distributed noise even printed "done"): now one line naming the value,
    exit code 2, and no process started."""
    from skfedriem.flower.operations import loopback

    def started(*args, **kwargs):
        raise AssertionError("a deployment process was started")

    monkeypatch.setattr(loopback.LoopbackFederation, "__enter__", started)
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_the_sites_take_the_runs_k_and_t_with_distributed_noise(tmp_path):
    """--set colluders=2 (or clients-per-round) changed only the server's K and t: every site refused every round."""
    from skfedriem.flower.operations.loopback import _parser, _sites_and_run_config

    args = _parser(["pca"]).parse_args(["--noise", "distributed", "--sites", "4", "--set", "colluders=2",
                                        "--set", "clients-per-round=3"])
    _, sites, run_config = _sites_and_run_config(args, tmp_path)
    assert run_config["colluders"] == 2
    assert all(site["distributed-colluders"] == 2 and site["distributed-clients"] == 3 for site in sites)


def test_a_run_whose_rounds_were_all_discarded_exits_non_zero_and_says_so(tmp_path, capsys):
    from argparse import Namespace

    from skfedriem.flower.operations.loopback import summarise

    args = Namespace(estimator="pca", insecure=False)
    result = {"epsilon": 2.0, "local_epsilon": 3.0, "privacy_unit": "record", "n_records": [120] * 2,
              "applied_rounds": 0, "history": [{"replied": [], "discarded": "1 of the 2 clients answered"}] * 2}
    with pytest.raises(SystemExit, match="every one of the 2 rounds was discarded"):
        summarise(args, result, {}, tmp_path)
    assert '"local_epsilon": 3.0' in capsys.readouterr().out
    applied = summarise(args, {**result, "applied_rounds": 1}, {}, tmp_path)
    assert applied["applied_rounds"] == 1


@pytest.mark.deployment
@pytest.mark.parametrize("kind", ["tangent", "spdnet", "eegnet"])
def test_every_classifier_deploys_with_distributed_noise_at_its_defaults(kind, tmp_path):
    """The loopback hard-coded three local steps, which distributed noise refuses once the deployment was up: the
    plan now chooses (one step a round, full batches), and the run ends with every round applied and the three
    certificates in its summary."""
    summary = main(["--estimator", kind, "--noise", "distributed", "--rounds", "3", "--timeout", "420",
                    "--out", str(tmp_path)])
    assert summary["applied_rounds"] == summary["rounds"] == 3
    assert summary["epsilon"] <= 2.0 < summary["deviating_epsilon"] <= summary["local_epsilon"]


@pytest.mark.deployment
def test_a_distributed_deployment_with_a_dropout_allowance_keeps_rounds_two_of_seven_sites_miss(tmp_path, capsys):
    """Seven secured sites, t = 1, d = 2 (``--set dropouts=2``; each site's node setting distributed-dropouts):
    site-0 and site-1 are killed after round 2. A round that still sent them its message completes without them
    (its final lists signed by the five, each taking out no excess: the round's level is 2); the next ones list
    both as dropped, each survivor drawing its share for the two at once. The certificate is the in-process fit's
    at the same K, t and d, and no round is discarded."""
    summary = main(["--estimator", "pca", "--sites", "7", "--rounds", "5", "--eps", "2.0", "--noise", "distributed",
                    "--semi-honest-server", "--kill-site-after-round", "2", "--kill-sites", "2",
                    "--round-timeout", "30", "--set", 'solver="riemannian"', "--set", "local-steps=1",
                    "--set", "colluders=1", "--set", "dropouts=2", "--timeout", "500", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "killed site-1's SuperNode" in out and "5 survivors, 2 dropped" in out
    result = json.loads((tmp_path / "server" / "result.json").read_text())
    assert summary["replied"][3:] == [[2, 3, 4, 5, 6]] * 2 and summary["applied_rounds"] == 5
    assert summary["replied"][2] in ([2, 3, 4, 5, 6], list(range(7)))  # they may have answered round 3 first
    assert not any("discarded" in h for h in result["history"])
    X = np.vstack([x for x, _ in site_data(tmp_path, 7, False)])
    reference = FederatedPCA(n_components=2, eps=2.0, n_rounds=5, local_steps=1, solver="riemannian",
                             noise="distributed", colluders=1, dropouts=2).fit(X, groups=np.repeat(np.arange(7), 120))
    assert result["epsilon"] == reference.epsilon_ <= 2.0
    for i in range(7):
        central = PrivacyBudget(float("inf"), path=tmp_path / f"site-{i}" / "ledger.central.json")
        assert central.spent() <= result["epsilon"] * (1 + 1e-9)
