"""Figures of the experiments (matplotlib, Agg backend), drawn from result records.

:func:`plot_straggler_sweep` is the one sweep plot of the demo, ``reproduce stragglers`` and the recipes'
``coded_eval``; the other helpers draw the experiments' own figures (in their modules) from result records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from torchgcc.optional import require

require("matplotlib").use("Agg")
plt = require("matplotlib.pyplot")

__all__ = [
    "COLOURS",
    "SCHEME_LABELS",
    "SWEEP_PANELS",
    "draw_schemes",
    "log_errorbar",
    "plot_straggler_sweep",
    "plt",
    "reference_curve",
    "save_figure",
    "schemes_of",
    "series",
]

Record = Mapping[str, Any]

#: Legend label of each scheme.
SCHEME_LABELS: dict[str, str] = {"gcc": "GCC", "natural": "natural-spline GCC", "bacc": "BACC", "lcc": "LCC"}
COLOURS = {"gcc": "C0", "natural": "C1", "bacc": "C2", "lcc": "C3"}
_STYLES = {"natural": "s--"}  # dashed so that it stays visible when it coincides with GCC


def series(records: Sequence[Record], *, x: str, y: str, **match: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x values, y values and y CI half-widths of the records matching ``match``, sorted by x."""
    rows = sorted((r for r in records if all(r.get(k) == v for k, v in match.items()) and x in r), key=lambda r: r[x])
    as_float = lambda values: np.array([np.nan if v is None else v for v in values], dtype=float)  # noqa: E731
    return (
        as_float([r[x] for r in rows]),
        as_float([r[y] for r in rows]),
        as_float([r.get(f"{y}_ci", np.nan) for r in rows]),
    )


def schemes_of(records: Sequence[Record]) -> list[str]:
    """The schemes of ``records`` in order of first appearance."""
    return list(dict.fromkeys(r["scheme"] for r in records))


def draw_schemes(ax: Any, records: Sequence[Record], *, x: str, y: str, log: bool, **match: Any) -> None:
    """One line with a shaded 95% CI band per scheme."""
    for scheme in schemes_of(records):
        xs, ys, ci = series(records, x=x, y=y, scheme=scheme, **match)
        if not len(xs):
            continue
        colour = COLOURS.get(scheme)
        ax.plot(xs, ys, _STYLES.get(scheme, "o-"), ms=3, color=colour, label=SCHEME_LABELS.get(scheme, scheme))
        lower = np.maximum(ys - ci, ys * 1e-3) if log else ys - ci
        ax.fill_between(xs, lower, ys + ci, color=colour, alpha=0.2, lw=0)
    if log:
        ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)


def save_figure(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` (folders created), close it and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


#: Panels of :func:`plot_straggler_sweep`: record key -> (y label, log scale).
SWEEP_PANELS: dict[str, tuple[str, bool]] = {
    "mse": ("MSE vs uncoded outputs", True),
    "agreement": ("argmax agreement with uncoded (RelAcc)", False),
    "accuracy": ("top-1 accuracy of decoded outputs", False),
}


def plot_straggler_sweep(records: Sequence[Record], path: str | Path, *, title: str = "") -> Path:
    """One panel per metric the records carry (:data:`SWEEP_PANELS`: MSE on a log scale, argmax agreement,
    accuracy) against S, one line per scheme, with 95% CI bands; the accuracy panel draws the uncoded model's
    ``reference_accuracy`` dashed."""
    panels = [key for key in SWEEP_PANELS if any(r.get(key) is not None for r in records)]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, key in zip(axes[0], panels):
        label, log = SWEEP_PANELS[key]
        draw_schemes(ax, records, x="S", y=key, log=log)
        if key == "accuracy" and records[0].get("reference_accuracy") is not None:
            ax.axhline(records[0]["reference_accuracy"], color="0.5", ls="--", label="uncoded")
        ax.set(xlabel="stragglers S", ylabel=label)
    axes[0, -1].legend()
    fig.suptitle(title)
    return save_figure(fig, path)


def log_errorbar(
    ax: Any, xs: np.ndarray, ys: np.ndarray, ci: np.ndarray, fmt: str, colour: str | None, label: str
) -> None:
    """Error bars of a log-scale plot, the lower one clipped so that it stays above zero."""
    ci = np.nan_to_num(ci)
    ax.errorbar(xs, ys, yerr=[np.minimum(ci, 0.9 * ys), ci], fmt=fmt, ms=3, color=colour, label=label, capsize=2)


def reference_curve(
    ax: Any, xs: np.ndarray, shape: Callable[[np.ndarray], np.ndarray], anchor: float, label: str, colour: str | None
) -> None:
    """Draw ``shape(xs)`` scaled to pass through ``anchor`` at ``xs[0]`` (the constants of the bounds are unknown)."""
    values = shape(xs)
    ax.plot(xs, values * anchor / values[0], ":", color=colour, lw=1.5, label=label)
