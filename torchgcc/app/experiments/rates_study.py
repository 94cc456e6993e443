"""``torchgcc reproduce rates``: the Fig. 4 experiment, how fast the coded-inference MSE falls as N grows.

``f`` is a fixed random smooth network (a tanh MLP on low-dimensional inputs, float64), the smooth regime of the
theory. (a) GCC vs BACC with ``S`` stragglers placed worst-case (GCC: ``O(S^3 N^-3)``); (b) GCC when every
worker straggles independently with probability ``p`` (``O(log_{1/p}(N)^3 N^-3)``) beside the worst case.
The fitted log-log slopes (:func:`torchgcc.app.statistics.loglog_slope`) go to ``results.json`` under ``"slopes"``:
``"gcc"`` and ``"bacc"`` for the worst case, ``"gcc_p<p>"`` for the Bernoulli runs.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

import torchgcc
from torchgcc.app.evaluate import evaluate_sweep, model_outputs
from torchgcc.app.options import add_gcc_arguments, gcc_options
from torchgcc.app.plots import (
    COLOURS,
    SCHEME_LABELS,
    log_errorbar,
    plt,
    reference_curve,
    save_figure,
    schemes_of,
    series,
)
from torchgcc.app.results import ExperimentResult
from torchgcc.app.statistics import loglog_slope
from torchgcc.app.tables import publish
from torchgcc.stragglers import BernoulliStragglers, FixedStragglers

__all__ = ["DEFAULT", "QUICK", "Config", "SmoothMLP", "add_arguments", "configure", "fit_slopes", "report", "run"]


class SmoothMLP(nn.Module):
    """``f(x) = tanh(x W1 + b1) W2``: a fixed random smooth map ``(M, dim) -> (M, out_dim)`` in float64."""

    def __init__(self, *, dim: int = 2, hidden: int = 16, out_dim: int = 4, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        draw = lambda *shape: torch.randn(*shape, generator=generator, dtype=torch.float64)  # noqa: E731
        self.register_buffer("w1", draw(dim, hidden) / dim**0.5)
        self.register_buffer("b1", draw(hidden))
        self.register_buffer("w2", draw(hidden, out_dim) / hidden**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ self.w1 + self.b1) @ self.w2


@dataclass(frozen=True)
class Config:
    """Settings: ``samples`` standard-normal inputs of ``dim`` coordinates, coded ``num_inputs`` per group, for every
    N in ``workers``; ``num_stragglers`` worst-case stragglers, and Bernoulli stragglers for each p in ``probabilities``
    (at least ``min_arrived`` results always arrive), with ``repeats`` masks per group (the worst case has one)."""

    num_inputs: int = 8
    workers: tuple[int, ...] = (32, 45, 64, 91, 128, 181, 256, 362, 512)
    num_stragglers: int = 4
    probabilities: tuple[float, ...] = (0.05, 0.1, 0.2)
    samples: int = 256
    dim: int = 2
    repeats: int = 10
    min_arrived: int = 2
    seed: int = 0
    gcc: Mapping[str, Any] = field(default_factory=dict)


#: The published run: K = 8, N from 32 to 512, S = 4 worst case, p in {0.05, 0.1, 0.2}.
DEFAULT = Config()
#: ``--quick``: four N, one p, 64 samples, 3 repeats.
QUICK = replace(DEFAULT, workers=(16, 32, 64, 128), probabilities=(0.1,), samples=64, repeats=3)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_gcc_arguments(parser)


def configure(args: argparse.Namespace) -> Config:
    return replace(QUICK if args.quick else DEFAULT, seed=args.seed, gcc=gcc_options(args))


def fit_slopes(records: list[dict[str, Any]]) -> dict[str, float]:
    """Slope of log MSE against log N per series: ``"gcc"``, ``"bacc"`` (worst case), ``"gcc_p<p>"``."""
    series: dict[str, list[tuple[float, float]]] = {}
    for record in records:
        key = record["scheme"] if record.get("p") is None else f"{record['scheme']}_p{record['p']:g}"
        series.setdefault(key, []).append((record["N"], record["mse"]))
    slopes = {key: loglog_slope(*zip(*points)) for key, points in series.items()}
    return {key: slope for key, slope in slopes.items() if not np.isnan(slope)}


def run(config: Config, *, progress: bool = True) -> ExperimentResult:
    """Sweep N for both panels; ``extra`` holds the slopes."""
    f = SmoothMLP(dim=config.dim, seed=config.seed)
    inputs = torch.randn(
        config.samples,
        config.dim,
        dtype=torch.float64,
        generator=torch.Generator().manual_seed(config.seed + 1),
    )
    reference = model_outputs(f, inputs)
    records: list[dict[str, Any]] = []
    lambda_dec: dict[int, Any] = {}
    for num_workers in tqdm(config.workers, desc="workers N", disable=not progress, leave=False):
        size = dict(num_inputs=config.num_inputs, num_workers=num_workers)
        gcc = torchgcc.make_code("gcc", **size, **dict(config.gcc))
        lambda_enc, lambda_dec[num_workers] = gcc.lambda_enc, gcc.lambda_dec
        worst = [
            (
                {"S": config.num_stragglers},
                FixedStragglers(num_stragglers=config.num_stragglers, placement="worst", seed=config.seed),
            )
        ]
        records += evaluate_sweep(
            f,
            inputs,
            codes={"gcc": gcc, "bacc": torchgcc.make_code("bacc", **size)},
            settings=worst,
            repeats=1,
            reference=reference,  # "worst" is deterministic
            classification=False,
            progress=False,
        )
        bernoulli = [
            (
                {"p": p},
                BernoulliStragglers(p=p, seed=1000 * config.seed + num_workers, min_arrived=config.min_arrived),
            )
            for p in config.probabilities
        ]
        records += evaluate_sweep(
            f,
            inputs,
            codes={"gcc": gcc},
            settings=bernoulli,
            repeats=config.repeats,
            reference=reference,
            classification=False,
            progress=False,
        )
    written = {
        **asdict(config),
        "function": f"f(x) = tanh(x W1 + b1) W2, fixed random, {config.dim} -> 16 -> 4, float64",
        "placement": "worst",
        "gcc_lambda_enc": lambda_enc,
        "gcc_lambda_dec_by_N": lambda_dec,
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
    }
    return ExperimentResult(records, written, {"slopes": fit_slopes(records)})


def report(result: ExperimentResult, out: Path, *, console: Any) -> list[Path]:
    """The table and slopes; results, table and ``rates.png`` in ``out``."""
    config, slopes = result.config, result.extra["slopes"]
    lambdas = {key: config["gcc"][key] for key in config["gcc"]}
    title = (
        f"Fig. 4 analogue: smooth f, K={config['num_inputs']}, worst-case S={config['num_stragglers']} "
        f"and Bernoulli(p) stragglers\nGCC lambdas: {lambdas or 'library defaults'}"
    )
    paths = publish(
        out, config=config, records=result.records, setting="N", title=title, console=console, **result.extra
    )
    plot = plot_rates(
        result.records, out / "rates.png", num_stragglers=config["num_stragglers"], slopes=slopes, title=title
    )
    console.print("fitted log-log slopes of MSE vs N: " + ", ".join(f"{k} {v:.2f}" for k, v in slopes.items()))
    return [*paths.values(), plot]


def plot_rates(
    records: Sequence[dict], path: str | Path, *, num_stragglers: int, slopes: Mapping[str, float], title: str = ""
) -> Path:
    """Log-log MSE vs N: (a) GCC vs BACC with ``num_stragglers`` worst-case stragglers and the ``S^3 N^-3`` curve;
    (b) GCC with Bernoulli(p) stragglers beside the worst case, with ``log_{1/p}(N)^3 N^-3`` curves.

    Records of the worst case carry ``S``; the Bernoulli ones carry ``p``. ``slopes`` labels each line.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    worst = [r for r in records if "S" in r and r.get("p") is None]
    for scheme in schemes_of(worst):
        xs, ys, ci = series(worst, x="N", y="mse", scheme=scheme)
        colour = COLOURS.get(scheme)
        log_errorbar(
            left,
            xs,
            ys,
            ci,
            "o-",
            colour,
            f"{SCHEME_LABELS.get(scheme, scheme)} (slope {slopes.get(scheme, np.nan):.2f})",
        )
        if scheme == "gcc":
            reference_curve(left, xs, lambda n: num_stragglers**3 / n**3, ys[0], r"$S^3 N^{-3}$", colour)
    left.set(title=f"(a) worst-case S = {num_stragglers}")

    xs, ys, ci = series(worst, x="N", y="mse", scheme="gcc")
    log_errorbar(
        right, xs, ys, ci, "o-", "k", f"worst case S = {num_stragglers} (slope {slopes.get('gcc', np.nan):.2f})"
    )
    bernoulli = [r for r in records if r.get("p") is not None]
    for index, p in enumerate(sorted({r["p"] for r in bernoulli})):
        xs, ys, ci = series(bernoulli, x="N", y="mse", scheme="gcc", p=p)
        colour = f"C{index + 4}"
        log_errorbar(right, xs, ys, ci, "s-", colour, f"p = {p:g} (slope {slopes.get(f'gcc_p{p:g}', np.nan):.2f})")
        reference_curve(
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
    return save_figure(fig, path)
