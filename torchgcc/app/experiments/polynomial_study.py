"""``torchgcc reproduce polynomial``: the Fig. 3 experiment, GCC vs LCC on a polynomial task as S grows.

``f`` is a fixed random quadratic map of vectors (degree 2), computed in float64, so LCC with ``degree=2`` is
exact whenever at least its recovery threshold ``(K - 1) * 2 + 1`` results arrive, i.e. for
``S <= N - threshold``. Beyond that LCC interpolates the survivors with a lower-degree polynomial
(``below_threshold="interpolate"``), which is unstable; GCC degrades gracefully.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import nn

import torchgcc
from torchgcc.app.evaluate import evaluate_sweep
from torchgcc.app.options import add_gcc_arguments, gcc_options
from torchgcc.app.plots import draw_schemes, plt, save_figure
from torchgcc.app.results import ExperimentResult
from torchgcc.app.tables import lambda_label, markdown_table, publish
from torchgcc.stragglers import FixedStragglers

__all__ = [
    "DEFAULT",
    "QUICK",
    "Config",
    "QuadraticMap",
    "add_arguments",
    "configure",
    "docs_table",
    "report",
    "run",
]


class QuadraticMap(nn.Module):
    """``f(x) = (x A) * (x B) + x C + c``: a fixed random degree-2 map ``(M, dim) -> (M, out_dim)`` (float64).

    Entries are standard normal, scaled by ``1 / dim`` (quadratic part) and ``1 / sqrt(dim)`` (linear part).
    """

    def __init__(self, *, dim: int = 4, out_dim: int = 4, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        draw = lambda *shape: torch.randn(*shape, generator=generator, dtype=torch.float64)  # noqa: E731
        self.register_buffer("a", draw(dim, out_dim) / dim**0.5)
        self.register_buffer("b", draw(dim, out_dim) / dim**0.5)
        self.register_buffer("c", draw(dim, out_dim) / dim**0.5)
        self.register_buffer("bias", draw(out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x @ self.a) * (x @ self.b) + x @ self.c + self.bias


@dataclass(frozen=True)
class Config:
    """Settings: ``samples`` standard-normal inputs of ``dim`` coordinates coded ``num_inputs`` per group on
    ``num_workers`` workers; S runs over ``straggler_counts`` (default: 0 to N - 2) with random placement."""

    num_inputs: int = 8
    num_workers: int = 32
    straggler_counts: tuple[int, ...] | None = None
    samples: int = 512
    dim: int = 4
    repeats: int = 10
    seed: int = 0
    gcc: Mapping[str, Any] = field(default_factory=dict)

    @property
    def threshold(self) -> int:
        """LCC's recovery threshold for a degree-2 ``f``: ``(K - 1) * 2 + 1`` results."""
        return (self.num_inputs - 1) * 2 + 1


#: The published run: (K, N) = (8, 32), so LCC's threshold is 15 results (S <= 17); S = 0..30, 10 repeats.
DEFAULT = Config()
#: ``--quick``: (K, N) = (4, 16), 128 samples, 3 repeats.
QUICK = Config(num_inputs=4, num_workers=16, samples=128, repeats=3)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_gcc_arguments(parser)


def configure(args: argparse.Namespace) -> Config:
    return replace(QUICK if args.quick else DEFAULT, seed=args.seed, gcc=gcc_options(args))


def run(config: Config, *, progress: bool = True) -> ExperimentResult:
    """Sweep S for GCC and LCC; the config dict carries ``lcc_threshold`` and ``threshold_stragglers``."""
    f = QuadraticMap(dim=config.dim, seed=config.seed)
    inputs = torch.randn(
        config.samples, config.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(config.seed + 1)
    )
    size = dict(num_inputs=config.num_inputs, num_workers=config.num_workers)
    codes = {
        "gcc": torchgcc.make_code("gcc", **size, **dict(config.gcc)),
        "lcc": torchgcc.make_code("lcc", **size, degree=2, below_threshold="interpolate"),
    }
    counts = config.straggler_counts or tuple(range(config.num_workers - 1))
    settings = [
        ({"S": s}, FixedStragglers(num_stragglers=s, placement="random", seed=1000 * config.seed + s)) for s in counts
    ]
    records = evaluate_sweep(
        f,
        inputs,
        codes=codes,
        settings=settings,
        repeats=config.repeats,
        classification=False,
        progress=progress,
        desc="polynomial task",
    )
    written = {
        **asdict(config),
        "straggler_counts": list(counts),
        "function": "f(x) = (xA)*(xB) + xC + c, fixed random, float64",
        "lcc_degree": 2,
        "lcc_threshold": config.threshold,
        "threshold_stragglers": config.num_workers - config.threshold,
        "gcc_lambda_enc": codes["gcc"].lambda_enc,
        "gcc_lambda_dec": codes["gcc"].lambda_dec,
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
    }
    return ExperimentResult(records, written)


def report(result: ExperimentResult, out: Path, *, console: Any) -> list[Path]:
    """The table; results, table and ``polynomial.png`` in ``out``."""
    config = result.config
    title = (
        f"Fig. 3 analogue: quadratic f, K={config['num_inputs']}, N={config['num_workers']}, "
        f"LCC threshold {config['lcc_threshold']} results (S <= {config['threshold_stragglers']})\n"
        f"{lambda_label(config)}"
    )
    paths = publish(out, config=config, records=result.records, setting="S", title=title, console=console)
    plot = plot_polynomial(
        result.records, out / "polynomial.png", threshold_stragglers=config["threshold_stragglers"], title=title
    )
    return [*paths.values(), plot]


def plot_polynomial(records: Sequence[dict], path: str | Path, *, threshold_stragglers: int, title: str = "") -> Path:
    """MSE vs S for GCC and LCC: a zoom on the range LCC tolerates (linear axis) and the full range (log axis).

    ``threshold_stragglers`` is the most stragglers LCC tolerates (``N - recovery threshold``), drawn dashed.
    """
    fig, (zoom, full) = plt.subplots(1, 2, figsize=(10, 4))
    zoom_records = [r for r in records if r["S"] <= threshold_stragglers + 2]
    draw_schemes(zoom, zoom_records, x="S", y="mse", log=False)
    in_range = [r["mse"] for r in zoom_records if r["scheme"] != "lcc" and r["mse"] is not None]
    if in_range:
        zoom.set_ylim(-0.05 * max(in_range), 1.5 * max(in_range))
    draw_schemes(full, records, x="S", y="mse", log=True)
    for ax, name in ((zoom, "zoom"), (full, "full range")):
        ax.axvline(threshold_stragglers, ls="--", color="grey", lw=1, label="LCC threshold")
        ax.set(xlabel="stragglers S", ylabel="MSE", title=name)
    full.legend()
    fig.suptitle(title)
    return save_figure(fig, path)


def docs_table(data: Mapping[str, Any]) -> str:
    """The table ``report`` writes to ``table.md``, made from a committed ``results.json`` (for
    :mod:`torchgcc.app.docs`)."""
    return markdown_table(data["records"], setting="S")
