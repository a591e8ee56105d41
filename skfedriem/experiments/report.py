"""Tables and figures from a study folder (``runs.csv``, ``curves.csv``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .arms import ARM_SPECS

__all__ = ["results_table", "write_report"]


def _eps_order(labels) -> list[str]:
    finite = sorted((e for e in set(labels) if e != "none"), key=float, reverse=True)
    return (["none"] if "none" in set(labels) else []) + finite


def _central(arms):
    """Which rows are centralised references (by the study's arm table)."""
    return arms.map(lambda a: ARM_SPECS[a].central if a in ARM_SPECS else False)


def results_table(runs) -> str:
    """Markdown tables (one per participation): test accuracy (%) mean ± sd over seeds, arms x ε.

    The best federated arm of each column is in bold (centralised references
    are not ranked).

    Parameters
    ----------
    runs : pandas.DataFrame
        One row per run: ``arm``, ``eps``, ``participation``, ``test_accuracy`` (``runs.csv``'s columns).

    Returns
    -------
    str
    """
    runs = runs.assign(eps=runs["eps"].astype(str), participation=runs["participation"].astype(float))
    eps_cols = _eps_order(runs["eps"])
    parts = []
    for p, block in runs.groupby("participation", sort=False):
        central = runs[_central(runs["arm"])]
        block = block if _central(block["arm"]).any() else _concat(block, central)
        stats = block.groupby(["arm", "eps"])["test_accuracy"].agg(["mean", "std", "count"])
        arms = list(dict.fromkeys(block["arm"]))
        best = {}
        for e in eps_cols:
            is_central = dict(zip(block["arm"], _central(block["arm"])))
            federated = [(stats.loc[(a, e), "mean"], a) for a in arms
                         if (a, e) in stats.index and not is_central[a]]
            if federated:
                best[e] = max(federated)[1]
        lines = [f"participation {p:g} (test accuracy %, mean ± sd over seeds; n = seeds)", "",
                 "| arm | " + " | ".join(f"ε = {e}" for e in eps_cols) + " |",
                 "|---|" + "---|" * len(eps_cols)]
        for a in arms:
            cells = []
            for e in eps_cols:
                if (a, e) not in stats.index:
                    cells.append("")
                    continue
                m, s, n = stats.loc[(a, e)]
                text = f"{100 * m:.1f} (n=1)" if int(n) == 1 else f"{100 * m:.1f} ± {100 * s:.1f} (n={int(n)})"
                cells.append(f"**{text}**" if best.get(e) == a else text)
            lines.append(f"| {a} | " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def _concat(a, b):
    import pandas as pd

    return pd.concat([a, b])


def write_report(out: str | Path) -> None:
    """Write ``table.md``, ``learning_curves.png`` and ``privacy_utility.png`` into ``out``.

    Parameters
    ----------
    out : str or Path
        The study folder, holding ``runs.csv`` and ``curves.csv``.
    """
    import pandas as pd

    out = Path(out)
    runs = pd.read_csv(out / "runs.csv", dtype={"eps": str})
    (out / "table.md").write_text(results_table(runs))
    curves = pd.read_csv(out / "curves.csv", dtype={"eps": str})
    key = ["dataset", "arm", "eps", "seed", "participation", "round"]
    curves = curves.drop_duplicates(subset=key, keep="last")  # a run interrupted before its row was saved
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:  # pragma: no cover - matplotlib is in the bench/eeg extras
        return
    participations = sorted(set(curves["participation"]), reverse=True)
    eps_cols = _eps_order(curves["eps"].astype(str))
    fig, axes = plt.subplots(len(participations), len(eps_cols), figsize=(4 * len(eps_cols), 3.2 * len(participations)),
                             squeeze=False)
    for row, p in zip(axes, participations):
        for ax, e in zip(row, eps_cols):
            sel = curves[(curves["eps"] == e) & (curves["participation"] == p)]
            for arm, block in sel.groupby("arm"):
                mean = block.groupby("round")["valid_accuracy"].mean()
                ax.plot(mean.index, mean.values, label=arm)
            ax.set_title(f"ε = {e}, participation {p:g}")
            ax.set_xlabel("round")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        row[0].set_ylabel("validation accuracy")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "learning_curves.png", dpi=110)
    plt.close(fig)

    finite = sorted(float(e) for e in set(runs["eps"]) if e != "none")
    x_none = 2 * max(finite) if finite else 1.0
    fig, axes = plt.subplots(1, len(participations), figsize=(5 * len(participations), 3.5), squeeze=False)
    for ax, p in zip(axes[0], participations):
        for arm, block in runs[runs["participation"] == p].groupby("arm"):
            stats = block.groupby("eps")["test_accuracy"].agg(["mean", "std"])
            xs = [x_none if e == "none" else float(e) for e in stats.index]
            order = np.argsort(xs)
            ax.errorbar(np.array(xs)[order], stats["mean"].values[order], yerr=stats["std"].fillna(0).values[order],
                        marker="o", capsize=3, label=arm)
        ax.set_xscale("log")
        ticks = finite + ([x_none] if "none" in set(runs["eps"]) else [])
        ax.set_xticks(ticks, [f"{t:g}" for t in finite] + (["non-private"] if "none" in set(runs["eps"]) else []))
        ax.minorticks_off()
        ax.set(xlabel="ε", ylabel="test accuracy", title=f"participation {p:g}")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "privacy_utility.png", dpi=110)
    plt.close(fig)
