"""Tables the docs compute when they build (a Sphinx extension): the accountant's numbers, never typed by hand."""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).resolve().parent / "user_guide" / "_generated"


def noise_table() -> str:
    """Noise multiplier σB/(2C) = 1/μ0 the accountant needs, against q = B/m⋆, steps T·τ and ε (δ = 1e-5)."""
    from skfedriem.privacy import calibrate_mu0

    rates, steps, epsilons = (0.01, 0.05, 0.2), (200, 2000, 10000), (1.0, 4.0, 10.0)
    lines = [".. list-table:: Noise multiplier σB/(2C) = 1/μ0 for δ = 1e-5, fixed-size batches",
             "   :header-rows: 1", "",
             "   * - q = B/m⋆", "     - steps T·τ", *[f"     - ε = {e:g}" for e in epsilons]]
    for q in rates:
        for n in steps:
            row = [f"   * - {q:g}", f"     - {n}"]
            row += [f"     - {1 / calibrate_mu0(e, 1e-5, q, n):.2f}" for e in epsilons]
            lines += row
    return "\n".join(lines) + "\n"


RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def physionet_table() -> str:
    """The real-EEG rows kept by ``benchmarks/physionet_real.py`` (pooled accuracy on the held-out trials)."""
    import json

    kept = json.loads((RESULTS / "physionet_real.json").read_text())
    pooled, within = kept["result"]["pooled_accuracy"], kept["result"].get("within_session_auc") or {}
    lines = [f".. list-table:: PhysionetMI subjects 1-5, imagined left vs right hand: accuracy on a held-out third of "
             f"every subject's trials (one client each), and MOABB's within-session ROC AUC (5-fold inside each "
             f"subject, one client) ({kept['date']}, ``{kept['command']}``)", "   :header-rows: 1", "",
             "   * - pipeline", "     - pooled accuracy (mean ± sd over splits)",
             "     - within-session AUC (± sd over subjects)", "     - seconds a pooled fit"]
    for name, row in pooled.items():
        inside = f"{within[name]['mean']:.3f} ± {within[name]['sd']:.3f}" if name in within else "–"
        lines += [f"   * - {name}", f"     - {row['mean']:.3f} ± {row['sd']:.3f}", f"     - {inside}",
                  f"     - {row['seconds']:.1f}"]
    return "\n".join(lines) + "\n"


def privacy_unit_table() -> str:
    """The study kept by ``benchmarks/privacy_unit.py``: record- against subject-level fits at equal ε."""
    import json

    kept = json.loads((RESULTS / "privacy_unit.json").read_text())
    result = kept["result"]
    arms = [("record", "record-level"), ("subject", "subjects whole"),
            *((f"k={k}", f"k = {k} trials a subject") for k in result.get("ks", []))]

    def guarantee(value) -> str:
        return "nothing" if value is None else f"{value:.3g}"

    lines = [f".. list-table:: Held-out accuracy of record-level fits, subject-level fits sampling subjects whole, and "
             f"subject-level fits from k trials of each subject a round, at the same ε; what each run certifies for "
             f"one subject (record-level: by group privacy over the subject's trials; \"nothing\": inf); and σ/C, the "
             f"noise std of a step's mean over the clip. Mean over {result['seeds']} seeds; pyRiemann's TangentSpace + "
             f"LogisticRegression on the pooled training trials, without privacy: "
             + ", ".join(f"{name} {acc:.3f}" for name, acc in result.get("pyriemann_ts_lr", {}).items())
             + f" ({kept['date']}, ``{kept['command']}``)", "   :header-rows: 1",
             "", "   * - federation", "     - model", "     - ε"]
    for _, title in arms:
        lines += [f"     - {title}: accuracy", "     - ε for a subject", "     - σ/C"]
    for row in result["rows"]:
        eps = "none" if row["eps"] is None else f"{row['eps']:g}"
        lines += [f"   * - {row['federation']}", f"     - {row['model']}", f"     - {eps}"]
        for arm, _ in arms:
            lines += [f"     - {row[f'{arm}_accuracy']:.3f}", f"     - {guarantee(row[f'{arm}_subject_epsilon'])}",
                      f"     - {row.get(f'{arm}_noise', 0.0):.2f}"]
    return "\n".join(lines) + "\n"


def real_planning_table() -> str:
    """The tangent model's planned defaults before and after the released mean, the grid's best and a curator."""
    import json

    kept = json.loads((RESULTS / "real_planning.json").read_text())
    rows = kept["result"]["rows"]
    by_cell: dict = {}
    for row in rows:
        by_cell.setdefault((row["federation"], row["eps"]), {})[row.get("reference", "identity")] = row
    lines = [f".. list-table:: The tangent-space classifier's planned defaults at the identity (before) and at the "
             f"clients' released mean with the floored rule (now), the best cell of the (η, T) grids at either "
             f"reference, and a trusted curator with today's defaults; held-out accuracy, mean over "
             f"{kept['result']['seeds']} seeds ({kept['date']}, ``{kept['command']}``)", "   :header-rows: 1", "",
             "   * - federation", "     - ε", "     - before", "     - now (η)", "     - grid's best (cell)",
             "     - now − best", "     - curator"]
    for (federation, eps), cells in by_cell.items():
        if "auto" not in cells or federation.startswith("all"):
            continue
        now = cells["auto"]
        grid = [(cell["accuracy"], f"{name}, {reference}") for reference, row in cells.items()
                for name, cell in row["cells"].items() if name not in ("planned", "curator")]
        best, where = max(grid)
        before = cells["identity"]["cells"]["planned"]["accuracy"] if "identity" in cells else None
        planned = now["cells"]["planned"]
        lines += [f"   * - {federation}", f"     - {eps:g}", "     - –" if before is None else f"     - {before:.3f}",
                  f"     - {planned['accuracy']:.3f} ({planned['lr']:.2g})", f"     - {best:.3f} ({where})",
                  f"     - {planned['accuracy'] - best:+.3f}", f"     - {now['cells']['curator']['accuracy']:.3f}"]
    return "\n".join(lines) + "\n"


def eeg_study_table(name: str, channels: str) -> str:
    """The paper's table on the 24 real PhysionetMI subjects, kept by ``python -m skfedriem.experiments eeg`` in
    ``benchmarks/results/<name>``."""
    import csv
    import statistics

    folder = RESULTS / name
    runs = list(csv.DictReader((folder / "runs.csv").open()))
    command = (folder / "command.txt").read_text().strip()
    eps_order = ["none", *sorted({r["eps"] for r in runs} - {"none"}, key=float, reverse=True)]
    arms = list(dict.fromkeys(r["arm"] for r in runs))
    lines = []
    for participation in dict.fromkeys(r["participation"] for r in runs):
        block = [r for r in runs if r["participation"] == participation]
        k = block[0]["clients_per_round"]
        lines += [f".. list-table:: PhysionetMI, 24 subjects in 12 clients of 2, {channels}, participation "
                  f"{participation} ({k} clients a round): test accuracy %, mean ± sd over seeds (n) (``{command}``)",
                  "   :header-rows: 1", "", "   * - arm", *[f"     - ε = {e}" for e in eps_order]]
        for arm in arms:
            lines.append(f"   * - {arm}")
            for eps in eps_order:
                scores = [100 * float(r["test_accuracy"]) for r in block if (r["arm"], r["eps"]) == (arm, eps)]
                spread = statistics.stdev(scores) if len(scores) > 1 else 0.0
                lines.append(f"     - {statistics.mean(scores):.1f} ± {spread:.1f} ({len(scores)})" if scores
                             else "     - –")
        lines.append("")
    return "\n".join(lines)


def _kept_rows(name: str) -> tuple[dict, list[dict]]:
    import json

    kept = json.loads((RESULTS / f"{name}.json").read_text())
    return kept, kept["result"]["rows"]


def spdnet_real_table() -> str:
    """SPDNet's planned defaults on the 24 real subjects, the choices around them and the tangent model
    (``benchmarks/spdnet_real.py``)."""
    kept, rows = _kept_rows("spdnet_real")
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    cells = list(dict.fromkeys((r["cell"], r["eps"]) for r in rows))
    by = {(r["cell"], r["eps"], r["arm"]): r["accuracy"] for r in rows}
    lines = [f".. list-table:: The 24 real PhysioNet subjects ({kept['result']['channels']} channels), held-out "
             f"accuracy, mean of {kept['result']['seeds']} seeds with fresh noise; 24x1: one subject a client, 4x6: "
             f"4 sites of 6 ({kept['date']}, ``{kept['command']}``)", "   :header-rows: 1", "",
             "   * - federation, noise", "     - ε", *[f"     - {arm}" for arm in arms]]
    for cell, eps in cells:
        lines += [f"   * - {cell}", f"     - {'none' if eps is None else f'{eps:g}'}"]
        lines += [f"     - {by[(cell, eps, a)]:.3f}" if (cell, eps, a) in by else "     - –" for a in arms]
    return "\n".join(lines) + "\n"


def eegnet_real_table() -> str:
    """What makes EEGNet learn the 24 real subjects (``benchmarks/eegnet_real.py``)."""
    kept, rows = _kept_rows("eegnet_real")
    lines = [f".. list-table:: EEGNet on the 24 real PhysioNet subjects' raw trials ({kept['result']['channels']} "
             f"channels, one subject a client), held-out accuracy, mean of {kept['result']['seeds']} seeds; under "
             f"privacy noise='distributed' ({kept['date']}, ``{kept['command']}``)", "   :header-rows: 1", "",
             "   * - ε", "     - arm", "     - settings changed from the defaults", "     - accuracy",
             "     - per seed"]
    for r in rows:
        changed = ", ".join(f"{k}={v!r}" for k, v in r["settings"].items()) or "–"
        eps = "none" if r["eps"] is None else f"{r['eps']:g}"
        lines += [f"   * - {eps}",
                  f"     - {r['arm']}", f"     - {changed}", f"     - {r['accuracy']:.3f}",
                  "     - " + " ".join(f"{a:.3f}" for a in r["accuracies"])]
    return "\n".join(lines) + "\n"


def moabb_table() -> str:
    """MOABB's within-session and cross-subject evaluations of the private pipelines (``benchmarks/moabb_physionet.py``)."""
    import json

    kept = json.loads((RESULTS / "moabb_physionet.json").read_text())
    lines = [f".. list-table:: MOABB's evaluations on the real PhysioNet subjects, ROC AUC, mean ± sd over subjects "
             f"(within a session: 5-fold inside each subject, one client) or held-out subjects (cross-subject: 4 "
             f"folds of 6 of the 24 subjects, clients of whole subjects); \"warned\": the fits whose plan said the "
             f"model would likely learn little or nothing ({kept['date']}, ``{kept['command']}``)", "   :header-rows: 1", "",
             "   * - evaluation", "     - channels", "     - pipeline", "     - ROC AUC", "     - warned"]
    for key, result in kept["result"]["results"].items():
        evaluation, channels = key.split()
        for name, score in result["scores"].items():
            lines += [f"   * - {evaluation}", f"     - {channels}", f"     - {name}",
                      f"     - {score['mean']:.3f} ± {score['sd']:.3f}", f"     - {score.get('fits_warned', '–')}"]
    return "\n".join(lines) + "\n"


def deviating_table() -> str:
    """ε_central, ``deviating_epsilon_`` and ε_local of distributed noise at the variance planned for ε_central."""
    from skfedriem.federated import FederationSettings
    from skfedriem.federated.plan import plan_run
    from skfedriem.privacy import PrivacyAccountant, StepPlan

    rounds, size, dimension = 300, 30, 45
    lines = [f".. list-table:: Distributed noise: what the variance planned for ε_central certifies against a server "
             f"that runs the protocol (ε_central), one that deviates with t colluders (deviating) and anyone who sees "
             f"one client's release (ε_local); q = 1, T = {rounds}, δ = 1e-5, {size} records a client, "
             f"d = {dimension}", "   :header-rows: 1", "",
             "   * - K clients a round", "     - t colluders", "     - d dropouts", "     - ε_central planned",
             "     - ε_central", "     - deviating", "     - ε_local"]
    for clients, colluders, dropouts in ((5, 1, 0), (7, 2, 0), (10, 1, 0), (7, 1, 2)):
        for eps in (1.0, 4.0, 10.0):
            settings = FederationSettings(n_rounds=rounds, eps=eps, clip=1.0, noise="distributed",
                                          colluders=colluders, dropouts=dropouts)
            plan = plan_run([size] * clients, list(range(clients)), settings, dimension=dimension)
            steps = StepPlan(n_records=size, batch_size=size, local_steps=1, clip=1.0, noise_std=0.0,
                             sampling="fixed", encoding=plan.encoding)
            row = []
            for release in (steps.release, steps.deviating_release, steps.local_release):
                ledger = PrivacyAccountant()
                for _ in range(rounds):
                    ledger.extend(release())
                row.append(ledger.get_epsilon(1e-5))
            lines += [f"   * - {clients}", f"     - {colluders}", f"     - {dropouts}", f"     - {eps:g}",
                      *(f"     - {value:.2f}" for value in row)]
    return "\n".join(lines) + "\n"


def write_tables(app) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "noise_table.rst").write_text(noise_table())
    (OUT / "deviating_table.rst").write_text(deviating_table())
    (OUT / "physionet_table.rst").write_text(physionet_table())
    (OUT / "privacy_unit_table.rst").write_text(privacy_unit_table())
    (OUT / "real_planning_table.rst").write_text(real_planning_table())
    (OUT / "eeg_study_table_paper.rst").write_text(eeg_study_table("eeg_study_physionet_paper", "64 channels"))
    (OUT / "eeg_study_table_motor.rst").write_text(eeg_study_table("eeg_study_physionet_motor", "9 motor channels"))
    (OUT / "eeg_study_table.rst").write_text(eeg_study_table("eeg_study_physionet", "64 channels"))
    (OUT / "spdnet_real_table.rst").write_text(spdnet_real_table())
    (OUT / "eegnet_real_table.rst").write_text(eegnet_real_table())
    (OUT / "moabb_table.rst").write_text(moabb_table())


def setup(app):
    app.connect("builder-inited", write_tables)
    return {"parallel_read_safe": True}
