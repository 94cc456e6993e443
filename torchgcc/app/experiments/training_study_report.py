"""Summaries, table, JSON/CSV and plots of ``torchgcc reproduce training`` (:mod:`training_study`).

One record per (model, s, scheme, m, clock), averaged over seeds (value and 95% normal CI half-width):

==================  =====================================================================================
``step_time``       mean virtual seconds per step
``steps_to_target`` steps until the evaluated full training loss first falls to ``target_loss``
``time_to_target``  virtual seconds until then (seeds that never reach it are left out; see ``reached``)
``reached``         how many seeds reached the target
``final_loss``      training loss after the last step;  ``test_accuracy``: test accuracy after it
``load``            partitions each worker computes per step after the first (warm-up) step
``staleness``       fraction of the partition gradients in the decoded sums with staleness 0..s (all steps)
``mean_staleness``  their mean staleness;  ``max_staleness``: the largest seen
==================  =====================================================================================

DGD does not depend on s: its single run is repeated in every s's rows.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Optional, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from torchgcc.app.experiments.training_study import TrainingRun  # noqa: E402
from torchgcc.metrics import mean_ci  # noqa: E402

__all__ = ["LABELS", "curves", "plot_training", "summarise", "write_training_results"]

#: Display names of the schemes.
LABELS = {
    "dgd": "DGD",
    "is-sgd": "IS-SGD",
    "gc-fr": "GC-FR",
    "gc-cr": "GC-CR",
    "is-gc": "IS-GC",
    "pgc-fr": "PGC-FR",
    "pgc-cr": "PGC-CR",
    "pgc-cr-ls": "PGC-CR (lstsq)",
}


def _steps_to_target(run: TrainingRun, target: float) -> Optional[int]:
    return next((step for step, loss in zip(run.eval_steps, run.train_loss) if loss <= target), None)


def _stat(values: Sequence[float]) -> tuple[Optional[float], Optional[float]]:
    if not values:
        return None, None
    mean, ci = mean_ci(torch.tensor(values, dtype=torch.float64))
    return mean, (None if math.isnan(ci) else ci)


def summarise(runs: Sequence[TrainingRun], config: dict) -> list[dict[str, Any]]:
    """The records described in the module docstring."""
    records = []
    target = config["target_loss"]
    labels = list(runs[0].times)
    for model in config["models"]:
        for s in config["stragglers"]:
            for scheme in config["schemes"]:
                group = [
                    r for r in runs if r.model == model and r.scheme == scheme and r.s == (0 if scheme == "dgd" else s)
                ]
                if not group:
                    continue
                reach = [_steps_to_target(r, target) for r in group]
                counts = torch.tensor([r.staleness for r in group], dtype=torch.float64).sum(dim=(0, 1))
                counts = torch.nn.functional.pad(counts, (0, s + 1 - len(counts)))
                fractions = (counts / counts.sum()).tolist()
                for label in labels:
                    mean_delay, clock = label.split(",")
                    record = {
                        "model": model,
                        "s": s,
                        "scheme": scheme,
                        "m": float(mean_delay[2:]),
                        "clock": clock,
                        "n": config["num_workers"],
                        "seeds": len(group),
                    }
                    record["step_time"], record["step_time_ci"] = _stat(
                        [r.times[label][-1] / len(r.loads) for r in group]
                    )
                    steps = [k for k in reach if k is not None]
                    record["steps_to_target"], record["steps_to_target_ci"] = _stat(steps)
                    record["time_to_target"], record["time_to_target_ci"] = _stat(
                        [r.times[label][k - 1] for r, k in zip(group, reach) if k is not None]
                    )
                    record["reached"] = len(steps)
                    record["final_loss"], record["final_loss_ci"] = _stat([r.train_loss[-1] for r in group])
                    record["test_accuracy"], record["test_accuracy_ci"] = _stat([r.test_accuracy for r in group])
                    record["load"] = group[0].loads[min(1, len(group[0].loads) - 1)]
                    record["staleness"] = fractions
                    record["mean_staleness"] = sum(tau * f for tau, f in enumerate(fractions))
                    record["max_staleness"] = max(tau for tau, f in enumerate(fractions) if f > 0)
                    records.append(record)
    return records


def curves(runs: Sequence[TrainingRun]) -> list[dict[str, Any]]:
    """Seed-averaged training-loss curves: per (model, scheme, s) the evaluated steps, the mean loss there and the
    mean virtual time there on every clock."""
    out = []
    keys = sorted({(r.model, r.scheme, r.s) for r in runs})
    for model, scheme, s in keys:
        group = [r for r in runs if (r.model, r.scheme, r.s) == (model, scheme, s)]
        steps = group[0].eval_steps
        out.append(
            {
                "model": model,
                "scheme": scheme,
                "s": s,
                "steps": steps,
                "train_loss": torch.tensor([r.train_loss for r in group]).mean(0).tolist(),
                "time": {
                    label: torch.tensor([[r.times[label][k - 1] for k in steps] for r in group]).mean(0).tolist()
                    for label in group[0].times
                },
            }
        )
    return out


def _fmt(record: dict, key: str, digits: int = 3) -> str:
    value, ci = record.get(key), record.get(f"{key}_ci")
    if value is None:
        return "-"
    return f"{value:.{digits}g}" + ("" if ci is None else f" ± {ci:.1g}")


_COLUMNS = [
    ("step_time", "s/step"),
    ("steps_to_target", "steps to target"),
    ("time_to_target", "time to target (s)"),
    ("reached", "reached"),
    ("final_loss", "final loss"),
    ("test_accuracy", "test acc"),
    ("load", "partitions/step"),
    ("mean_staleness", "mean staleness"),
]


def _rows(records: Sequence[dict], model: str, m: float, clock: str) -> list[list[str]]:
    rows = []
    for r in records:
        if (r["model"], r["m"], r["clock"]) == (model, m, clock):
            rows.append(
                [str(r["s"]), LABELS.get(r["scheme"], r["scheme"])]
                + [str(r[key]) if key in ("reached", "load") else _fmt(r, key) for key, _ in _COLUMNS]
            )
    return rows


def markdown(records: Sequence[dict], config: dict) -> str:
    """One Markdown table per (model, m, clock)."""
    parts = []
    header = ["s", "scheme"] + [name for _, name in _COLUMNS]
    for model in config["models"]:
        for label in dict.fromkeys((r["m"], r["clock"]) for r in records):
            t_c = config["compute_times"][model][label[1]]
            parts.append(
                f"### {model}, m = {label[0]:g} s, t_c = {t_c * 1e3:.3g} ms ({label[1]}), target loss "
                f"{config['target_loss']:g}, {len(config['seeds'])} seed(s)\n"
            )
            parts.append("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
            parts += ["| " + " | ".join(row) + " |" for row in _rows(records, model, *label)]
            parts.append("")
    return "\n".join(parts) + "\n"


def print_tables(records: Sequence[dict], config: dict, console: Console) -> None:
    """The m = first mean delay tables on the terminal."""
    m = config["mean_delays"][0]
    for model in config["models"]:
        for clock in config["compute_times"][model]:
            table = Table(
                title=f"{model}, m = {m:g} s, t_c ({clock}) = {config['compute_times'][model][clock]:.3g} s",
                caption="value ± 95% CI half-width over seeds",
            )
            for name in ["s", "scheme"] + [name for _, name in _COLUMNS]:
                table.add_column(name, justify="right")
            for row in _rows(records, model, m, clock):
                table.add_row(*row)
            console.print(table)


def plot_training(curve_list: Sequence[dict], config: dict, path: Path, model: str) -> Path:
    """Loss against steps and against virtual wall-clock (m = first mean delay, each clock), one row per s."""
    m = config["mean_delays"][0]
    clocks = list(config["compute_times"][model])
    rows = config["stragglers"]
    fig, axes = plt.subplots(
        len(rows), 1 + len(clocks), figsize=(4.2 * (1 + len(clocks)), 3.2 * len(rows)), squeeze=False
    )
    for row, s in enumerate(rows):
        for index, scheme in enumerate(config["schemes"]):
            curve = next(
                (
                    c
                    for c in curve_list
                    if c["model"] == model and c["scheme"] == scheme and c["s"] == (0 if scheme == "dgd" else s)
                ),
                None,
            )
            if curve is None:
                continue
            style = dict(
                color=f"C{index}",
                lw=1.3,
                ls="--" if scheme.startswith("pgc") else "-",
                label=LABELS.get(scheme, scheme),
            )
            axes[row, 0].plot(curve["steps"], curve["train_loss"], **style)
            for col, clock in enumerate(clocks, start=1):
                axes[row, col].plot(curve["time"][f"m={m:g},{clock}"], curve["train_loss"], **style)
        for col, ax in enumerate(axes[row]):
            ax.axhline(config["target_loss"], color="grey", lw=0.8, ls=":")
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_ylabel(f"s = {s}: training loss")
            if col == 0:
                ax.set_xlabel("steps")
            else:
                clock = clocks[col - 1]
                ax.set_xlabel(
                    f"virtual seconds (m = {m:g} s, t_c {clock} {config['compute_times'][model][clock] * 1e3:.3g} ms)"
                )
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{model} on {config['data']}, n = {config['num_workers']}, {len(config['seeds'])} seed(s)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def _jsonable(value):
    """``value`` with every tensor turned into a list (a controller's state_dict holds its generator state)."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    return value


def _wait_summary(run: TrainingRun) -> dict:
    """An adaptive run's chosen S (every step, and the mean) and its controller's final state; {} otherwise."""
    if run.wait_stragglers is None:
        return {}
    return {
        "mean_S": sum(run.wait_stragglers) / len(run.wait_stragglers),
        "S_by_step": run.wait_stragglers,
        "wait_policy": _jsonable(run.wait_policy),
    }


def write_training_results(
    out: Path, runs: Sequence[TrainingRun], config: dict, *, console: Optional[Console] = None
) -> dict[str, Path]:
    """Write ``results.json`` (config, records, curves, per-run summaries), ``results.csv`` (records),
    ``table.md`` and one ``training-<model>.png`` per model; print the tables."""
    console = console or Console()
    out.mkdir(parents=True, exist_ok=True)
    records = summarise(runs, config)
    curve_list = curves(runs)
    per_run = [
        {
            "model": r.model,
            "scheme": r.scheme,
            "s": r.s,
            "seed": r.seed,
            "test_accuracy": r.test_accuracy,
            "final_loss": r.train_loss[-1],
            "loads": r.loads[:3],
            "staleness_counts": torch.tensor(r.staleness).sum(0).tolist(),
            **_wait_summary(r),
        }
        for r in runs
    ]
    paths = {"json": out / "results.json", "csv": out / "results.csv", "table": out / "table.md"}
    paths["json"].write_text(
        json.dumps({"config": config, "records": records, "curves": curve_list, "runs": per_run}, indent=1) + "\n"
    )
    with paths["csv"].open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    paths["table"].write_text(markdown(records, config))
    for model in config["models"]:
        paths[f"plot-{model}"] = plot_training(curve_list, config, out / f"training-{model}.png", model)
    print_tables(records, config, console)
    return paths
