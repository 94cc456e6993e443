"""Figures of the experiments (matplotlib, Agg backend), drawn from result records.

Each function takes the records of :mod:`torchgcc.app.results`, writes one PNG and returns its path.
:func:`plot_straggler_sweep` is the one sweep plot of the demo, ``reproduce stragglers`` and the recipes'
``coded_eval``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from torchgcc.optional import require

require("matplotlib").use("Agg")
plt = require("matplotlib.pyplot")

__all__ = ["SCHEME_LABELS", "SWEEP_PANELS", "plot_polynomial", "plot_rates", "plot_straggler_sweep"]

Record = Mapping[str, Any]

#: Legend label of each scheme.
SCHEME_LABELS: dict[str, str] = {"gcc": "GCC", "natural": "natural-spline GCC", "bacc": "BACC", "lcc": "LCC"}
_COLOURS = {"gcc": "C0", "natural": "C1", "bacc": "C2", "lcc": "C3"}
_STYLES = {"natural": "s--"}  # dashed so that it stays visible when it coincides with GCC


def _series(records: Sequence[Record], *, x: str, y: str, **match: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x values, y values and y CI half-widths of the records matching ``match``, sorted by x."""
    rows = sorted((r for r in records if all(r.get(k) == v for k, v in match.items()) and x in r), key=lambda r: r[x])
    as_float = lambda values: np.array([np.nan if v is None else v for v in values], dtype=float)  # noqa: E731
    return (
        as_float([r[x] for r in rows]),
        as_float([r[y] for r in rows]),
        as_float([r.get(f"{y}_ci", np.nan) for r in rows]),
    )


def _schemes(records: Sequence[Record]) -> list[str]:
    return list(dict.fromkeys(r["scheme"] for r in records))


def _draw(ax: Any, records: Sequence[Record], *, x: str, y: str, log: bool, **match: Any) -> None:
    """One line with a shaded 95% CI band per scheme."""
    for scheme in _schemes(records):
        xs, ys, ci = _series(records, x=x, y=y, scheme=scheme, **match)
        if not len(xs):
            continue
        colour = _COLOURS.get(scheme)
        ax.plot(xs, ys, _STYLES.get(scheme, "o-"), ms=3, color=colour, label=SCHEME_LABELS.get(scheme, scheme))
        lower = np.maximum(ys - ci, ys * 1e-3) if log else ys - ci
        ax.fill_between(xs, lower, ys + ci, color=colour, alpha=0.2, lw=0)
    if log:
        ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)


def _save(fig: Any, path: str | Path) -> Path:
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
        _draw(ax, records, x="S", y=key, log=log)
        if key == "accuracy" and records[0].get("reference_accuracy") is not None:
            ax.axhline(records[0]["reference_accuracy"], color="0.5", ls="--", label="uncoded")
        ax.set(xlabel="stragglers S", ylabel=label)
    axes[0, -1].legend()
    fig.suptitle(title)
    return _save(fig, path)


def plot_polynomial(records: Sequence[Record], path: str | Path, *, threshold_stragglers: int, title: str = "") -> Path:
    """MSE vs S for GCC and LCC: a zoom on the range LCC tolerates (linear axis) and the full range (log axis).

    ``threshold_stragglers`` is the most stragglers LCC tolerates (``N - recovery threshold``), drawn dashed.
    """
    fig, (zoom, full) = plt.subplots(1, 2, figsize=(10, 4))
    zoom_records = [r for r in records if r["S"] <= threshold_stragglers + 2]
    _draw(zoom, zoom_records, x="S", y="mse", log=False)
    in_range = [r["mse"] for r in zoom_records if r["scheme"] != "lcc" and r["mse"] is not None]
    if in_range:
        zoom.set_ylim(-0.05 * max(in_range), 1.5 * max(in_range))
    _draw(full, records, x="S", y="mse", log=True)
    for ax, name in ((zoom, "zoom"), (full, "full range")):
        ax.axvline(threshold_stragglers, ls="--", color="grey", lw=1, label="LCC threshold")
        ax.set(xlabel="stragglers S", ylabel="MSE", title=name)
    full.legend()
    fig.suptitle(title)
    return _save(fig, path)


def _log_errorbar(
    ax: Any, xs: np.ndarray, ys: np.ndarray, ci: np.ndarray, fmt: str, colour: str | None, label: str
) -> None:
    """Error bars of a log-scale plot, the lower one clipped so that it stays above zero."""
    ci = np.nan_to_num(ci)
    ax.errorbar(xs, ys, yerr=[np.minimum(ci, 0.9 * ys), ci], fmt=fmt, ms=3, color=colour, label=label, capsize=2)


def _reference(
    ax: Any, xs: np.ndarray, shape: Callable[[np.ndarray], np.ndarray], anchor: float, label: str, colour: str | None
) -> None:
    """Draw ``shape(xs)`` scaled to pass through ``anchor`` at ``xs[0]`` (the constants of the bounds are unknown)."""
    values = shape(xs)
    ax.plot(xs, values * anchor / values[0], ":", color=colour, lw=1.5, label=label)


def plot_rates(
    records: Sequence[Record], path: str | Path, *, num_stragglers: int, slopes: Mapping[str, float], title: str = ""
) -> Path:
    """Log-log MSE vs N: (a) GCC vs BACC with ``num_stragglers`` worst-case stragglers and the ``S^3 N^-3`` curve;
    (b) GCC with Bernoulli(p) stragglers beside the worst case, with ``log_{1/p}(N)^3 N^-3`` curves.

    Records of the worst case carry ``S``; the Bernoulli ones carry ``p``. ``slopes`` labels each line.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    worst = [r for r in records if "S" in r and r.get("p") is None]
    for scheme in _schemes(worst):
        xs, ys, ci = _series(worst, x="N", y="mse", scheme=scheme)
        colour = _COLOURS.get(scheme)
        _log_errorbar(
            left,
            xs,
            ys,
            ci,
            "o-",
            colour,
            f"{SCHEME_LABELS.get(scheme, scheme)} (slope {slopes.get(scheme, np.nan):.2f})",
        )
        if scheme == "gcc":
            _reference(left, xs, lambda n: num_stragglers**3 / n**3, ys[0], r"$S^3 N^{-3}$", colour)
    left.set(title=f"(a) worst-case S = {num_stragglers}")

    xs, ys, ci = _series(worst, x="N", y="mse", scheme="gcc")
    _log_errorbar(
        right, xs, ys, ci, "o-", "k", f"worst case S = {num_stragglers} (slope {slopes.get('gcc', np.nan):.2f})"
    )
    bernoulli = [r for r in records if r.get("p") is not None]
    for index, p in enumerate(sorted({r["p"] for r in bernoulli})):
        xs, ys, ci = _series(bernoulli, x="N", y="mse", scheme="gcc", p=p)
        colour = f"C{index + 4}"
        _log_errorbar(right, xs, ys, ci, "s-", colour, f"p = {p:g} (slope {slopes.get(f'gcc_p{p:g}', np.nan):.2f})")
        _reference(
            right,
            xs,
            lambda n, p=p: (np.log(n) / np.log(1 / p)) ** 3 / n**3,
            ys[0],
            rf"$\log_{{1/p}}(N)^3 N^{{-3}}$, p = {p:g}",
            colour,
        )
    right.set(title="(b) GCC, Bernoulli(p) stragglers")
    workers = sorted({r["N"] for r in records})
    for ax in (left, right):
        ax.set(xscale="log", yscale="log", xlabel="workers N", ylabel="MSE")
        ax.set_xticks(workers, [str(n) for n in workers])
        ax.minorticks_off()
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    return _save(fig, path)
