"""A fitted plan (``plan_``) as a short table: the values chosen, then each reason on its own line."""

from __future__ import annotations

import textwrap

WIDTH = 100


class PrintedAsTable:
    """Mixin of a plan whose ``__str__`` is its table: IPython and Jupyter show that table too."""

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))


def plan_table(title: str, rows: dict[str, object], reason: str) -> str:
    """``title``, one ``name  value`` line per row, then ``reason``'s clauses as wrapped bullets.

    Parameters
    ----------
    title : str
    rows : dict of str to object
        The values, in order; a value is written with ``str`` (floats with 4 significant digits).
    reason : str
        The plan's reasons, joined by "; " (a "; " inside parentheses does not split).

    Returns
    -------
    str

    Examples
    --------
    >>> print(plan_table("Plan", {"lr": 0.25, "n_rounds": 200}, "lr: the grid's best; T: the grid's"))
    Plan
      lr        0.25
      n_rounds  200
    why:
      - lr: the grid's best
      - T: the grid's
    """
    width = max(map(len, rows)) + 2
    lines = [title] + [f"  {name:<{width}}{_value(value)}" for name, value in rows.items()]
    clauses = [clause for clause in _clauses(reason) if clause]
    if clauses:
        lines.append("why:")
        for clause in clauses:
            lines.extend(textwrap.wrap(clause, WIDTH, initial_indent="  - ", subsequent_indent="    "))
    return "\n".join(lines)


def _clauses(reason: str) -> list[str]:
    """``reason`` split at each "; " outside parentheses (a clause's own aside keeps its semicolons)."""
    clauses, depth, start = [], 0, 0
    for i, char in enumerate(reason):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and reason.startswith("; ", i):
            clauses.append(reason[start:i])
            start = i + 2
    return clauses + [reason[start:]]


def _value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return getattr(value, "__name__", None) or str(value)
