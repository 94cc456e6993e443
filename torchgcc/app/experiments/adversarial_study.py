"""``torchgcc reproduce adversarial``: coded computing when q of the arrived results come from adversaries, each
decoder under the oracle attack search (:func:`torchgcc.oracles.worst_attacks`).

Workloads, each over N with ``q = round(N^a)`` adversaries for every ``a`` in ``exponents``:

- ``xsinx``: ``f(x) = x sin x`` on scalar inputs ``x_k = 10 alpha_k`` (so the coded inputs are ``10 beta_n``),
  ``M = 100`` (ten times the range of f), no stragglers, one group of K = 20; the error is the MSE of the K
  estimates against ``f(x_k)``;
- ``lenet5``: the digits LeNet5 of the other experiments, K = 8, N in ``lenet_workers``, no stragglers, every test
  group; ``M`` = 10 times the RMS of the uncoded logits; MSE against the uncoded logits and RelAcc;
- ``lenet5_case``: LeNet5 at (N, q, S) = ``lenet_case`` with S random stragglers, ``lenet_repeats`` masks per group.

For every group the oracle tries shifts of a block of q workers by ``+-M 10^(-j/4)`` (four decades) at every block
position, sign flips, random ``+M`` and ``+-M``, constants and the greedy push, and keeps the worst; a record's
``mse`` is the mean over groups of that worst case (``family_mse``: per family). Decoders: the seed's smoothing
decoder (``smoothing``: no locating, ``lambda_d = 0.1 (q/n)^(8/5)``, arXiv 2502.08058 as we reconstruct it), the
natural spline, the default GCC and BACC, and, beyond the seed, Huber and trimming (which locate; ``detection`` is
the share of groups whose worst attack they flagged entirely, ``shift_mse`` / ``shift_detection`` per shift size, and
``evading_shift`` the largest size they failed to flag with its MSE). ``slopes``: the log-log slope of the worst-case
MSE against N per (workload, a, decoder) beside the seed's rate ``(6/5)(a - 1)``, and the exponent in ``q/N`` it
implies (the seed: 6/5).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import numpy as np
import torch
from tqdm.auto import tqdm

import torchgcc
from torchgcc.app.evaluate import model_outputs
from torchgcc.app.plots import plt, save_figure
from torchgcc.app.results import ExperimentResult
from torchgcc.app.statistics import loglog_slope
from torchgcc.app.tables import markdown_grid, publish
from torchgcc.coded_module import group_samples
from torchgcc.codes.robust import RobustGCC
from torchgcc.metrics import mean_ci
from torchgcc.oracles.attacks import FAMILIES, SHIFT_FRACTIONS, worst_attacks
from torchgcc.stragglers import FixedStragglers

__all__ = [
    "DEFAULT",
    "DOCS_TABLES",
    "QUICK",
    "SCHEMES",
    "Config",
    "add_arguments",
    "configure",
    "docs_table",
    "fit_slopes",
    "report",
    "run",
]

#: Decoders compared, in table order: the seed's first, those beyond the seed last.
SCHEMES = ("smoothing", "natural", "gcc", "bacc", "huber", "trim")

#: The decoders that locate adversaries (and report ``last_flagged``).
LOCATING = ("huber", "trim")


@dataclass(frozen=True)
class Config:
    """Settings of ``torchgcc reproduce adversarial``."""

    exponents: tuple[float, ...] = (0.3, 0.5, 0.7)
    xsinx_workers: tuple[int, ...] = (100, 200, 400, 800, 1600)
    xsinx_inputs: int = 20
    xsinx_bound: float = 100.0
    lenet_workers: tuple[int, ...] = (32, 64, 128)
    lenet_inputs: int = 8
    #: LeNet5's fixed case: (N, q, S); None (with no ``lenet_workers``) skips LeNet5.
    lenet_case: Optional[tuple[int, int, int]] = (32, 2, 4)
    lenet_repeats: int = 4
    schemes: tuple[str, ...] = SCHEMES
    families: tuple[str, ...] = FAMILIES
    shift_fractions: tuple[float, ...] = SHIFT_FRACTIONS
    #: Block positions tried per shift before refining (every position below it): x sin x, LeNet5.
    max_starts: int = 128
    lenet_max_starts: int = 32
    draws: int = 8
    seed: int = 0


#: The published run.
DEFAULT = Config()
#: ``--quick``: a = 0.5, three N for x sin x, one for LeNet5, every other shift size, 2 random draws.
QUICK = Config(
    exponents=(0.5,),
    xsinx_workers=(100, 200, 400),
    lenet_workers=(32,),
    lenet_repeats=1,
    shift_fractions=SHIFT_FRACTIONS[::2],
    max_starts=48,
    lenet_max_starts=16,
    draws=2,
)


def make_code(scheme: str, k: int, n: int, q: int) -> torchgcc.Code:
    """The decoder ``scheme`` of :data:`SCHEMES` for ``(K, N)`` and ``q`` adversaries."""
    if scheme in ("smoothing", *LOCATING):
        return RobustGCC(k, n, q=q, decoder=scheme)
    return torchgcc.make_code(scheme, num_inputs=k, num_workers=n)


@torch.no_grad()
def _sweep(
    config: Config,
    workload: str,
    f: Callable[[torch.Tensor], torch.Tensor],
    inputs: torch.Tensor,
    *,
    k: int,
    workers,
    exponents,
    bound: float,
    stragglers: int,
    repeats: int,
    max_starts: int,
    classification: bool,
    progress: bool,
) -> list[dict[str, Any]]:
    records = []
    groups = group_samples(inputs, k)
    reference = model_outputs(f, groups.flatten(0, 1)).unflatten(0, groups.shape[:2]).repeat(repeats, 1, 1)
    steps = [(n, a, scheme) for n in workers for a in exponents for scheme in config.schemes]
    for n, a, scheme in tqdm(steps, desc=workload, disable=not progress, leave=False):
        q = int(round(n**a))
        code = make_code(scheme, k, n, q)
        coded = code.encoder(groups)
        results = model_outputs(f, coded.flatten(0, 1)).unflatten(0, coded.shape[:2]).repeat(repeats, 1, 1)
        mask = FixedStragglers(stragglers, seed=1000 * config.seed + n).sample(len(results), n)
        found = worst_attacks(
            code.decoder,
            results,
            mask,
            reference,
            q=q,
            bound=bound,
            families=config.families,
            shift_fractions=config.shift_fractions,
            max_starts=max_starts,
            draws=config.draws,
            seed=config.seed,
            classification=classification,
        )
        families = [family for family in config.families if family in found.family_errors]
        worst_family = [max(families, key=lambda fam: float(found.family_errors[fam][g])) for g in range(len(mask))]
        record = {
            "workload": workload,
            "scheme": scheme,
            "a": a,
            "q": q,
            "N": n,
            "K": k,
            "S": stragglers,
            "M": bound,
            "groups": len(mask),
            "mse": float(found.errors.mean()),
            "mse_ci": mean_ci(found.errors)[1],
            "theory": (q / n) ** 1.2,
            "worst_family": max(set(worst_family), key=worst_family.count),
            "worst_attack": found.attacks[int(found.errors.argmax())],
            "family_mse": {family: float(found.family_errors[family].mean()) for family in families},
        }
        if found.shift_errors is not None:
            record["shift_sizes"] = found.shifts.tolist()
            record["shift_mse"] = found.shift_errors.mean(dim=0).tolist()
        if classification:
            record["agreement"], record["agreement_ci"] = float(found.agreement.mean()), mean_ci(found.agreement)[1]
            record["min_agreement"] = float(found.min_agreement.mean())
        if found.detected is not None:
            record["detection"] = float(found.detected.double().mean())
            record["family_detection"] = {
                family: float(found.family_detected[family].double().mean()) for family in families
            }
            if found.shift_detected is not None:
                detection = found.shift_detected.double().mean(dim=0)
                record["shift_detection"] = detection.tolist()
                missed = [j for j in range(len(detection)) if detection[j] < 1]
                if missed:
                    j = max(missed, key=lambda i: record["shift_mse"][i])
                    record["evading_shift"] = {"size": record["shift_sizes"][j], "mse": record["shift_mse"][j]}
        records.append(record)
    return records


def fit_slopes(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per ``"<workload> a=<a> <scheme>"``: the log-log slope of the worst-case MSE against N, the seed's
    ``(6/5)(a - 1)``, their gap, and the exponent of ``q/N`` the slope implies (the seed's: 6/5)."""
    series: dict[str, list[tuple[float, float, float]]] = {}
    for record in records:
        key = f"{record['workload']} a={record['a']:g} {record['scheme']}"
        series.setdefault(key, []).append((record["N"], record["mse"], record["a"]))
    out = {}
    for key, points in series.items():
        slope = loglog_slope([n for n, _, _ in points], [m for _, m, _ in points])
        if np.isnan(slope):
            continue
        a = points[0][2]
        out[key] = {"slope": slope, "theory": 1.2 * (a - 1), "gap": slope - 1.2 * (a - 1), "q_over_n": slope / (a - 1)}
    return out


def run(config: Config, *, progress: bool = True) -> ExperimentResult:
    """The three workloads: one record per (workload, a, N, decoder), with the slopes in ``extra``."""
    from torchgcc.app.data import load_dataset
    from torchgcc.app.model_cache import load_or_train

    started = time.perf_counter()
    k = config.xsinx_inputs
    x = (10 * torchgcc.points.resolve_points("chebyshev1", k, name="alpha")).unsqueeze(-1)  # one group of K inputs
    records = _sweep(
        config,
        "xsinx",
        lambda t: t * torch.sin(t),
        x,
        k=k,
        workers=config.xsinx_workers,
        exponents=config.exponents,
        bound=config.xsinx_bound,
        stragglers=0,
        repeats=1,
        max_starts=config.max_starts,
        classification=False,
        progress=progress,
    )
    bound = logits = None
    if config.lenet_workers or config.lenet_case is not None:
        split = load_dataset("digits", seed=config.seed)
        model = load_or_train("lenet5", split, seed=config.seed, progress=progress).model
        logits = model_outputs(model, split.test_x)
        bound = 10 * logits.pow(2).mean().sqrt().item()
        common = dict(k=config.lenet_inputs, bound=bound, max_starts=config.lenet_max_starts, classification=True)
        records += _sweep(
            config,
            "lenet5",
            model,
            split.test_x,
            workers=config.lenet_workers,
            exponents=config.exponents,
            stragglers=0,
            repeats=1,
            progress=progress,
            **common,
        )
    if config.lenet_case is not None:
        n, q, s = config.lenet_case
        records += _sweep(
            config,
            "lenet5_case",
            model,
            split.test_x,
            workers=(n,),
            exponents=(float(np.log(q) / np.log(n)),),
            stragglers=s,
            repeats=config.lenet_repeats,
            progress=progress,
            **common,
        )
    written = {
        **asdict(config),
        "lenet_bound": bound,
        "lenet_test_samples": None if logits is None else len(logits),
        "wall_s": time.perf_counter() - started,
        "load_average": list(os.getloadavg()),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
    }
    return ExperimentResult(records, written, {"slopes": fit_slopes(records)})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options beyond the run options: the decoders compared are the experiment's subject."""


def configure(args: argparse.Namespace) -> Config:
    return replace(QUICK if args.quick else DEFAULT, seed=args.seed)


def report(result: ExperimentResult, out: Path, *, console: Any) -> list[Path]:
    """The worst-case table, the slopes and the locating decoders' evading shifts; results, table and
    ``adversarial.png`` in ``out``."""
    title = (
        "Adversarial workers under the oracle attack search, q = N^a "
        f"(x sin x: M = {result.config['xsinx_bound']:g}; LeNet5: M = 10x logit RMS)"
    )
    paths = publish(
        out,
        config=result.config,
        records=result.records,
        setting="N",
        title=title,
        series=lambda r: f"{r['workload']} a={r['a']:.2g} {r['scheme']}",
        console=console,
        **result.extra,
    )
    plot = plot_adversarial(result.records, result.extra["slopes"], out / "adversarial.png", title=title)
    for key, slope in result.extra["slopes"].items():
        console.print(
            f"{key}: slope {slope['slope']:.2f} vs the seed's (6/5)(a-1) = {slope['theory']:.2f} "
            f"(gap {slope['gap']:+.2f}; exponent in q/N {slope['q_over_n']:.2f})"
        )
    for record in result.records:
        if "evading_shift" in record:
            evading = record["evading_shift"]
            console.print(
                f"{record['workload']} a={record['a']:.2g} N={record['N']} {record['scheme']}: a shift of "
                f"{evading['size']:.3g} is not flagged in every group and gives MSE {evading['mse']:.3g}"
            )
    return [*paths.values(), plot]


def plot_adversarial(records: list[dict[str, Any]], slopes: dict, path: Path, *, title: str) -> Path:
    """Top: worst-case MSE against N (log-log), one panel per (workload, a), one line per decoder, with the seed's
    ``(q/N)^(6/5)`` through the smoothing decoder's first point. Bottom: at the largest N of each panel, the
    locating decoders' worst MSE per shift size (hollow: not flagged) beside the smoothing decoder's worst case."""
    panels = sorted({(r["workload"], r["a"]) for r in records if r["workload"] != "lenet5_case"})
    fig, axes = plt.subplots(2, len(panels), figsize=(3.6 * len(panels), 6.4), squeeze=False)
    for col, (workload, a) in enumerate(panels):
        top, bottom = axes[0][col], axes[1][col]
        panel = [r for r in records if r["workload"] == workload and r["a"] == a]
        for index, scheme in enumerate(SCHEMES):
            rows = sorted((r for r in panel if r["scheme"] == scheme), key=lambda r: r["N"])
            if not rows:
                continue
            slope = slopes.get(f"{workload} a={a:g} {scheme}", {}).get("slope", np.nan)
            style = "o-" if scheme == "smoothing" else "s--" if scheme in LOCATING else "^:"
            ns, mses = [r["N"] for r in rows], [max(r["mse"], 1e-30) for r in rows]
            top.loglog(ns, mses, style, color=f"C{index}", ms=3, label=f"{scheme} ({slope:.2f})")
            if scheme == "smoothing":
                theory = np.array([r["theory"] for r in rows])
                top.loglog(ns, theory * mses[0] / theory[0], "k:", lw=1, label=r"$(q/N)^{6/5}$")
        top.set_title(f"{workload}, q = N^{a:g}", fontsize=9)
        top.set_xlabel("N")
        largest = max(r["N"] for r in panel)
        for index, scheme in enumerate(SCHEMES):
            (record,) = [r for r in panel if r["scheme"] == scheme and r["N"] == largest] or [None]
            if record is None:
                continue
            if scheme == "smoothing":
                bottom.axhline(record["mse"], color=f"C{index}", lw=1, label="smoothing, worst case")
            if scheme in LOCATING and "shift_mse" in record:
                sizes, mses = np.array(record["shift_sizes"]), np.maximum(record["shift_mse"], 1e-30)
                flagged = np.array(record["shift_detection"]) >= 1
                bottom.loglog(sizes, mses, "-", color=f"C{index}", lw=1, label=scheme)
                bottom.loglog(sizes[flagged], mses[flagged], "o", color=f"C{index}", ms=4)
                bottom.loglog(sizes[~flagged], mses[~flagged], "o", mfc="none", color=f"C{index}", ms=4)
        bottom.set(xscale="log", yscale="log", xlabel=f"shift size (N = {largest}; hollow: not flagged)")
        bottom.grid(True, which="both", alpha=0.3)
        top.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("worst-case MSE")
    axes[1][0].set_ylabel("MSE of the worst shift of that size")
    axes[0][-1].legend(fontsize=6)
    axes[1][-1].legend(fontsize=6)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


def _worst_case_table(data: Mapping[str, Any], *, workload: str = "xsinx") -> str:
    """Per (a, N) of ``workload``: q, the seed's rate ``(q/N)^(6/5)`` and each decoder's worst-case MSE over the attack
    search, with the family of its worst attack and, for the locating decoders, the share of groups that flagged it."""
    cells: dict[tuple, dict[str, str]] = {}
    for r in data["records"]:
        if r["workload"] == workload:
            flagged = f", {r['detection']:.0%}" if "detection" in r else ""
            row = cells.setdefault((r["a"], r["N"], r["q"], r["theory"]), {})
            row[r["scheme"]] = f"{r['mse']:.3g} ({r['worst_family']}{flagged})"
    schemes = data["config"]["schemes"]
    rows = [
        [f"{a:g}", str(n), str(q), f"{theory:.3g}"] + [by.get(scheme, "-") for scheme in schemes]
        for (a, n, q, theory), by in sorted(cells.items())
    ]
    return markdown_grid(["a", "N", "q", "(q/N)^(6/5)", *schemes], rows, left=0)


def _slopes_table(data: Mapping[str, Any]) -> str:
    """Every fitted slope of the worst-case MSE against N, beside the seed's ``(6/5)(a - 1)``, with the exponent of
    q/N it implies in brackets."""
    cells: dict[tuple, dict[str, Mapping[str, float]]] = {}
    for key, slope in data["slopes"].items():
        workload, a, scheme = key.split()
        cells.setdefault((workload, float(a.removeprefix("a="))), {})[scheme] = slope
    schemes = data["config"]["schemes"]
    rows = []
    for (workload, a), by in cells.items():
        theory = next(iter(by.values()))["theory"]
        cells_row = [f"{by[s]['slope']:.2f} ({by[s]['q_over_n']:.2f})" if s in by else "-" for s in schemes]
        rows.append([workload, f"{a:g}", f"{theory:.2f}", *cells_row])
    return markdown_grid(["workload", "a", "(6/5)(a-1)", *schemes], rows)


def _evading_table(data: Mapping[str, Any]) -> str:
    """The locating decoders' failure mode: per (workload, a) at its largest N, the shift size they did not flag
    that hurt most, with its MSE, beside the smoothing decoder's worst case."""
    by = {(r["workload"], r["a"], r["N"], r["scheme"]): r for r in data["records"] if r["workload"] != "lenet5_case"}
    largest: dict[tuple, int] = {}
    for workload, a, n, _ in by:
        largest[workload, a] = max(n, largest.get((workload, a), n))
    header = ["workload", "a", "N", "smoothing worst"] + [f"{scheme}: size, MSE" for scheme in LOCATING]
    rows = []
    for (workload, a), n in largest.items():
        row = [workload, f"{a:g}", str(n), f"{by[workload, a, n, 'smoothing']['mse']:.3g}"]
        for scheme in LOCATING:
            evading = by[workload, a, n, scheme].get("evading_shift")
            row.append("-" if evading is None else f"{evading['size']:.3g}, {evading['mse']:.3g}")
        rows.append(row)
    return markdown_grid(header, rows, left=1)


def _lenet5_case_table(data: Mapping[str, Any]) -> str:
    """The LeNet5 case (stragglers and adversaries together): each decoder's worst-case MSE, the family and RelAcc at
    that attack, its lowest RelAcc over every attack, its sign-flip MSE, and (locating decoders) the share of groups
    that flagged the worst attack, the worst sign flip and the worst random ``+-M`` values."""
    header = [
        "decoder",
        "worst-case MSE",
        "worst family",
        "RelAcc at that attack %",
        "lowest RelAcc over every attack %",
        "sign-flip MSE",
        "flagged: worst attack / worst sign flip / worst random +-M",
    ]
    rows = []
    for r in data["records"]:
        if r["workload"] != "lenet5_case":
            continue
        flagged = (
            " / ".join(
                f"{share:.0%}" for share in (r["detection"], *map(r["family_detection"].get, ("signflip", "random_pm")))
            )
            if "detection" in r
            else "-"
        )
        rows.append(
            [
                r["scheme"],
                f"{r['mse']:.3g}",
                r["worst_family"],
                f"{100 * r['agreement']:.1f}",
                f"{100 * r['min_agreement']:.1f}",
                f"{r['family_mse']['signflip']:.3g}",
                flagged,
            ]
        )
    return markdown_grid(header, rows, left=1)


#: The tables :func:`docs_table` makes, by name.
DOCS_TABLES: dict[str, Callable[..., str]] = {
    "worst_case": _worst_case_table,
    "slopes": _slopes_table,
    "evading": _evading_table,
    "lenet5_case": _lenet5_case_table,
}


def docs_table(data: Mapping[str, Any], *, table: str = "worst_case", **options: Any) -> str:
    """One whole table of a committed ``adversarial.json`` (for :mod:`torchgcc.app.docs`): ``table`` is a key of
    :data:`DOCS_TABLES` (``"worst_case"`` takes ``workload="xsinx" | "lenet5"``)."""
    if table not in DOCS_TABLES:
        raise ValueError(f"table: {table!r} is not one of {sorted(DOCS_TABLES)}")
    return DOCS_TABLES[table](data, **options)
