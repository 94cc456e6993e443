"""Machine-readable experiment results: ``results.json`` and ``results.csv``.

``results.json`` holds ``{"config": {...}, "records": [...], **extra}`` (the rates experiment adds ``"slopes"``);
``results.csv`` holds the records, one row each, with the union of their keys as columns.

A command writes its folder inside :func:`writing`: a file ``INCOMPLETE`` lies there from before the first file
until after the last, so a run interrupted (Ctrl-C) or killed while writing leaves a folder that says so.

A record describes one setting of one scheme. Keys used by the experiments:

================  ============================================================================
``scheme``        ``"gcc"``, ``"natural"``, ``"bacc"`` or ``"lcc"``
``N``, ``K``      workers and inputs per group
``S`` / ``p``     fixed number of stragglers, or per-worker straggling probability
``mse``           mean squared error of the decoded outputs against the uncoded model's outputs
``mse_ci``        half-width of its 95% confidence interval (``mse +- mse_ci``)
``agreement``     argmax agreement with the uncoded model, RelAcc (classification tasks only)
``agreement_ci``  half-width of its 95% confidence interval
``accuracy``      top-1 accuracy of the decoded outputs (when labels are known), ``accuracy_ci`` likewise
``groups``        the number of groups of K (the units of the confidence intervals)
================  ============================================================================
"""

from __future__ import annotations

import csv
import json
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

__all__ = ["INCOMPLETE", "REQUIRED_KEYS", "ExperimentResult", "plain", "read_results", "writing", "write_results"]

#: The marker :func:`writing` keeps in an output folder while its files are being written.
INCOMPLETE = "INCOMPLETE"


@dataclass
class ExperimentResult:
    """What an experiment's ``run`` returns: one record per (setting, scheme), the ``config`` written beside them
    (settings, seeds, versions) and ``extra`` top-level entries of ``results.json`` (slopes, verdicts, ...)."""

    records: list[dict[str, Any]]
    config: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)


#: Keys every record must carry.
REQUIRED_KEYS: tuple[str, ...] = ("scheme", "N", "K", "mse", "mse_ci")


def _check_records(records: Sequence[Mapping[str, Any]], required: Sequence[str]) -> None:
    for index, record in enumerate(records):
        missing = [key for key in required if key not in record]
        if missing:
            raise ValueError(f"record {index} lacks {missing}: {dict(record)}")
        if required is REQUIRED_KEYS and "S" not in record and "p" not in record:
            raise ValueError(f"record {index} has neither 'S' nor 'p': {dict(record)}")


def plain(value: Any) -> Any:
    """JSON-safe value: tensors and numpy scalars become Python numbers, non-finite floats become None."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    return value


def write_results(
    out_dir: str | Path,
    *,
    config: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    required: Sequence[str] = REQUIRED_KEYS,
    **extra: Any,
) -> dict[str, Path]:
    """Write ``results.json`` and ``results.csv`` into ``out_dir`` (created if needed).

    ``extra`` adds top-level JSON entries beside ``config`` and ``records`` (e.g. ``slopes={...}``).
    Non-finite floats are written as JSON ``null`` (and empty CSV cells). Every record must hold the ``required``
    keys (default: the coded-inference keys above, plus ``S`` or ``p``). Returns ``{"json": path, "csv": path}``.
    """
    _check_records(records, required)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"config": plain(config), "records": plain(list(records)), **plain(extra)}
    json_path = out / "results.json"
    json_path.write_text(json.dumps(payload, indent=2) + "\n")

    columns: list[str] = []
    for record in records:
        columns += [key for key in record if key not in columns]
    csv_path = out / "results.csv"
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, restval="")
        writer.writeheader()
        for record in payload["records"]:
            writer.writerow({key: "" if value is None else value for key, value in record.items()})
    return {"json": json_path, "csv": csv_path}


@contextmanager
def writing(out_dir: str | Path) -> Iterator[Path]:
    """Create ``out_dir`` and hold the marker file :data:`INCOMPLETE` in it while the block writes the results;
    the marker is removed only when the block ends normally (an interrupt or an error leaves it)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    marker = out / INCOMPLETE
    marker.write_text(
        "This run was stopped (interrupted, killed or failed) while writing this folder: "
        "its files may be missing or incomplete.\n"
    )
    yield out
    marker.unlink()


def read_results(out_dir: str | Path) -> dict[str, Any]:
    """Read back the ``results.json`` written by :func:`write_results` in ``out_dir``."""
    return json.loads((Path(out_dir) / "results.json").read_text())
