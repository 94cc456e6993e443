"""Results of the control experiments (``sagc``, ``adaptive-wait``): one record per scheme, printed and written as is.

Unlike the coded-inference sweeps (:mod:`torchgcc.app.tables`, which pivots MSE/RelAcc records), these
records carry experiment-specific metrics; :func:`publish_rows` writes ``results.json``, ``results.csv`` and
``table.md`` and prints a rich table with the chosen columns. :func:`seed_mean_ci` gives the mean over a few seeds
with a Student-t 95% interval.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import scipy.stats
from rich.console import Console
from rich.table import Table

from torchgcc.app.results import write_results

__all__ = ["Column", "publish_rows", "seed_mean_ci", "value_ci"]

#: ``(header, formatter of a record)``.
Column = tuple[str, Callable[[Mapping[str, Any]], str]]


def seed_mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean of ``values`` (one per seed) and the half-width of its Student-t 95% interval (NaN for one value).

    Missing values (None or NaN) make both results NaN.
    """
    if not values or any(value is None or math.isnan(value) for value in values):
        return math.nan, math.nan
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, math.nan
    std = math.sqrt(sum((value - mean) ** 2 for value in values) / (len(values) - 1))
    return mean, float(scipy.stats.t.ppf(0.975, len(values) - 1)) * std / math.sqrt(len(values))


def value_ci(key: str, digits: int) -> Callable[[Mapping[str, Any]], str]:
    """Formatter of ``record[key] ± record[key + "_ci"]`` with ``digits`` decimals (``-`` when missing)."""

    def cell(record: Mapping[str, Any]) -> str:
        value, ci = record.get(key), record.get(f"{key}_ci")
        if value is None or math.isnan(value):
            return "-"
        return f"{value:.{digits}f}" + ("" if ci is None or math.isnan(ci) else f" ± {ci:.{digits}f}")

    return cell


def publish_rows(
    out_dir: str | Path,
    *,
    config: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    columns: Sequence[Column],
    title: str,
    console: Console | None = None,
    **extra: Any,
) -> dict[str, Path]:
    """Write ``results.json``/``results.csv`` (all keys) and ``table.md`` (``columns``) to ``out_dir``; print it."""
    paths = write_results(out_dir, config=config, records=records, required=("scheme",), **extra)
    header = [name for name, _ in columns]
    rows = [[cell(record) for _, cell in columns] for record in records]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    paths["table"] = Path(out_dir) / "table.md"
    paths["table"].write_text(f"{title}\n\n" + "\n".join(lines) + "\n")
    table = Table(title=title, caption="value ± 95% CI half-width where shown")
    for name in header:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(*row)
    (console or Console()).print(table)
    return paths
