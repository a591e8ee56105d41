"""A real Flower deployment on 127.0.0.1: SuperLink, three SuperNodes, flwr run; one site is killed mid-run."""

import json
import pickle

import numpy as np
import pytest

pytest.importorskip("flwr")

from skfedriem import FederatedPCA
from skfedriem.flower.loopback import main
from skfedriem.flower.pca_app import estimator_from_run_config, load_site_data
from skfedriem.privacy import PrivacyBudget

pytestmark = pytest.mark.slow


def test_deployment_survives_a_killed_supernode(tmp_path, capsys):
    summary = main(["--sites", "3", "--records", "120", "--features", "6", "--rounds", "2", "--eps", "2.0",
                    "--kill-site-after-round", "1", "--round-timeout", "45", "--timeout", "420",
                    "--site-max-epsilon", "5.0", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "killed site-0's SuperNode" in out
    # round 2 waits at most round-timeout for the dead site (the SuperLink notices it within 2 heartbeats, 60 s)
    assert summary["replied"] == [[0, 1, 2], [1, 2]]

    result = json.loads((tmp_path / "server" / "result.json").read_text())
    assert result["clients"] == ["site-0", "site-1", "site-2"] and result["n_records"] == [120] * 3
    # The ledger charged both rounds, the dead site's included: the same ε as an in-process run
    # with this plan (the app project's defaults: B = 50, tau = 5; T = 2).
    reference = FederatedPCA(n_components=2, eps=2.0, n_rounds=2, local_steps=5, batch_size=50,
                             random_state=0).fit(np.vstack([load_site_data(tmp_path / f"site-{i}" / "records.npy")
                                                            for i in range(3)]), groups=np.repeat([0, 1, 2], 120))
    assert result["epsilon"] == reference.epsilon_ <= 2.0
    assert [h["epsilon"] for h in result["history"]] == [h["epsilon"] for h in reference.history_]

    # each live site charged both rounds to its own ledger file, on its own disk
    for site in (1, 2):
        ledger = PrivacyBudget(5.0, path=tmp_path / f"site-{site}" / "ledger.json")
        assert [f["label"].split()[-1] for f in ledger.fits] == ["1", "2"]
        assert ledger.spent() <= 5.0

    with (tmp_path / "server" / "federated_pca.pkl").open("rb") as f:
        est = pickle.load(f)
    U = est.components_
    np.testing.assert_allclose(U @ U.T, np.eye(2), atol=1e-8)
    assert est.transform(np.ones((4, 6))).shape == (4, 2)


def test_run_config_is_validated():
    with pytest.raises(ValueError, match="aggregation"):
        estimator_from_run_config({"aggregation": "mean"})
    with pytest.raises(ValueError, match="eps"):
        estimator_from_run_config({"eps": -1.0})
    assert estimator_from_run_config({"eps": "none"}).eps is None


def test_site_data_is_checked(tmp_path):
    bad = tmp_path / "x.npy"
    np.save(bad, np.array([[1.0, np.nan], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="NaN"):
        load_site_data(bad)
    with pytest.raises(ValueError, match="data-path.*.npy or .csv"):
        load_site_data(tmp_path / "x.parquet")
