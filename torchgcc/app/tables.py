"""Human-readable tables of result records: a rich table for the terminal and a Markdown table for the docs.

Two shapes. :func:`publish` pivots coded-inference records (MSE, agreement, accuracy): in Markdown one row per value
of the swept setting (``S``, ``N``...), one column per series (scheme, or scheme and straggling probability) and
metric; in the terminal one row per setting and series. :func:`publish_rows` prints records with
experiment-specific metrics as they are, one row each, with the chosen columns. Each cell reads
``value ± 95% CI half-width``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from torchgcc.app.plots import SCHEME_LABELS
from torchgcc.app.results import write_results
from torchgcc.optional import require

__all__ = [
    "WIDTH",
    "Column",
    "make_console",
    "lambda_label",
    "markdown_grid",
    "markdown_rows",
    "markdown_table",
    "pivot",
    "publish",
    "publish_rows",
    "rich_table",
    "scheme_series",
    "value_ci",
]

Record = Mapping[str, Any]

#: A column of :func:`publish_rows`: ``(header, formatter of a record)``.
Column = tuple[str, Callable[[Mapping[str, Any]], str]]

#: Column heading of each metric (agreement = argmax agreement with the uncoded model, RelAcc in the GCC papers).
METRIC_LABELS: dict[str, str] = {"mse": "MSE", "agreement": "agreement %", "accuracy": "accuracy %"}


#: Columns of the console when the output is not a terminal (a file, a pipe, a CI log) and ``COLUMNS`` is unset.
WIDTH = 100


def make_console(**options: Any) -> Any:
    """The rich console the commands print to: a terminal's own width, else ``COLUMNS``, else :data:`WIDTH` (rich
    would use 80, which cuts the tables' cells short)."""
    found = require("rich.console").Console(**options)
    if not found.is_terminal and "COLUMNS" not in os.environ and "width" not in options:
        found = require("rich.console").Console(width=WIDTH, **options)
    return found


def scheme_series(record: Record) -> str:
    """Series label of a record: its scheme's name, with ``p`` when the record has one."""
    label = SCHEME_LABELS.get(record["scheme"], record["scheme"])
    return f"{label} p={record['p']:g}" if record.get("p") is not None else label


def lambda_label(config: Mapping[str, Any]) -> str:
    """``"GCC lambda_enc=..., lambda_dec=..."`` from a config with ``gcc_lambda_enc`` / ``gcc_lambda_dec``."""
    values = [config["gcc_lambda_enc"], config["gcc_lambda_dec"]]
    enc, dec = (value if isinstance(value, str) else f"{value:.2g}" for value in values)
    return f"GCC lambda_enc={enc}, lambda_dec={dec}"


def _cell(record: Record | None, metric: str) -> str:
    if record is None or record.get(metric) is None:
        return "-"
    value, ci = record[metric], record.get(f"{metric}_ci")
    ci = math.nan if ci is None else ci
    if metric in ("agreement", "accuracy"):
        return f"{100 * value:.1f} ± {100 * ci:.1f}"
    return f"{value:.3g} ± {ci:.1g}"


def _metrics(records: Sequence[Record]) -> list[str]:
    """The metrics the records carry, in table order: MSE, then argmax agreement and accuracy in %."""
    return ["mse"] + [key for key in ("agreement", "accuracy") if any(r.get(key) is not None for r in records)]


def pivot(
    records: Sequence[Record],
    *,
    setting: str,
    series: Callable[[Record], str] = scheme_series,
) -> tuple[list[str], list[list[str]]]:
    """Header and rows: ``setting`` values down, ``(metric, series)`` across (MSE, then agreement and accuracy in % if
    present)."""
    names = list(dict.fromkeys(series(r) for r in records))
    metrics = _metrics(records)
    index = {(r[setting], series(r)): r for r in records if setting in r}
    values = sorted({key[0] for key in index})
    header = [setting] + [f"{name} {METRIC_LABELS[metric]}" for metric in metrics for name in names]
    rows = [
        [f"{value:g}"] + [_cell(index.get((value, name)), metric) for metric in metrics for name in names]
        for value in values
    ]
    return header, rows


def rich_table(
    records: Sequence[Record], *, setting: str, title: str = "", series: Callable[[Record], str] = scheme_series
) -> Any:
    """``records`` as a ``rich.table.Table``, narrow enough for a terminal: one row per (setting, series),
    a section per setting value, MSE and (if present) agreement and accuracy columns."""
    metrics = _metrics(records)
    table = require("rich.table").Table(title=title, caption="value ± 95% CI half-width")
    table.add_column(setting, justify="right", style="bold")
    table.add_column("scheme", overflow="fold")
    for metric in metrics:
        table.add_column(METRIC_LABELS[metric], justify="right", overflow="fold")
    values = sorted({r[setting] for r in records if setting in r})
    for value in values:
        rows = [r for r in records if r.get(setting) == value]
        for index, record in enumerate(rows):
            table.add_row(
                f"{value:g}" if index == 0 else "",
                series(record),
                *[_cell(record, m) for m in metrics],
                end_section=index == len(rows) - 1,
            )
    return table


def markdown_table(records: Sequence[Record], *, setting: str, series: Callable[[Record], str] = scheme_series) -> str:
    """The :func:`pivot` of ``records`` as a GitHub Markdown table."""
    header, rows = pivot(records, setting=setting, series=series)
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def publish(
    out_dir: str | Path,
    *,
    config: Mapping[str, Any],
    records: Sequence[Record],
    setting: str,
    title: str,
    series: Callable[[Record], str] = scheme_series,
    console: Any = None,
    **extra: Any,
) -> dict[str, Path]:
    """Write ``results.json``, ``results.csv`` and ``table.md`` into ``out_dir`` and print the rich table.

    ``extra`` adds top-level entries to ``results.json``. Returns the written paths by kind.
    """
    paths = write_results(out_dir, config=config, records=records, **extra)
    paths["table"] = Path(out_dir) / "table.md"
    paths["table"].write_text(f"{title}\n\n" + markdown_table(records, setting=setting, series=series))
    (console or make_console()).print(rich_table(records, setting=setting, title=title, series=series))
    return paths


def value_ci(key: str, digits: int) -> Callable[[Mapping[str, Any]], str]:
    """Formatter of ``record[key] ± record[key + "_ci"]`` with ``digits`` decimals (``-`` when missing)."""

    def cell(record: Mapping[str, Any]) -> str:
        value, ci = record.get(key), record.get(f"{key}_ci")
        if value is None or math.isnan(value):
            return "-"
        return f"{value:.{digits}f}" + ("" if ci is None or math.isnan(ci) else f" ± {ci:.{digits}f}")

    return cell


def markdown_grid(header: Sequence[str], rows: Sequence[Sequence[str]], *, left: int = 1) -> str:
    """A GitHub Markdown table of already formatted cells: the first ``left`` columns left-aligned, the others
    right-aligned."""
    rule = "|" + "---|" * left + "---:|" * (len(header) - left)
    return "\n".join(["| " + " | ".join(header) + " |", rule] + ["| " + " | ".join(row) + " |" for row in rows])


def markdown_rows(records: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> str:
    """``records`` as a GitHub Markdown table, one row each, with the chosen ``columns``."""
    lines = ["| " + " | ".join(name for name, _ in columns) + " |", "|---|" + "---:|" * (len(columns) - 1)]
    lines += ["| " + " | ".join(cell(record) for _, cell in columns) + " |" for record in records]
    return "\n".join(lines) + "\n"


def publish_rows(
    out_dir: str | Path,
    *,
    config: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    columns: Sequence[Column],
    title: str,
    console: Any = None,
    **extra: Any,
) -> dict[str, Path]:
    """Write ``results.json``/``results.csv`` (all keys) and ``table.md`` (``columns``) to ``out_dir``; print it."""
    paths = write_results(out_dir, config=config, records=records, required=("scheme",), **extra)
    paths["table"] = Path(out_dir) / "table.md"
    paths["table"].write_text(f"{title}\n\n" + markdown_rows(records, columns))
    table = require("rich.table").Table(title=title, caption="value ± 95% CI half-width where shown")
    rows = [[cell(record) for _, cell in columns] for record in records]
    for index, (name, _) in enumerate(columns):  # the first column (the row's name) is never folded
        widest = max([len(row[0]) for row in rows], default=0) if index == 0 else None
        table.add_column(name, justify="right", overflow="fold", min_width=widest)
    for row in rows:
        table.add_row(*row)
    (console or make_console()).print(table)
    return paths
