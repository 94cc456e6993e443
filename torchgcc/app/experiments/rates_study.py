"""The Fig. 4 experiment: how fast the coded-inference MSE falls as the number of workers N grows.

``f`` is a fixed random smooth network (a tanh MLP on low-dimensional inputs, float64), the smooth regime of the
theory. (a) GCC vs BACC with ``S`` stragglers placed worst-case (GCC: ``O(S^3 N^-3)``); (b) GCC when every
worker straggles independently with probability ``p`` (``O(log_{1/p}(N)^3 N^-3)``) beside the worst case.
The fitted log-log slopes (``np.polyfit(log N, log MSE, 1)``) go to ``results.json`` under ``"slopes"``:
``"gcc"`` and ``"bacc"`` for the worst case, ``"gcc_p<p>"`` for the Bernoulli runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

import torchgcc
from torchgcc.app.evaluate import evaluate_sweep, model_outputs
from torchgcc.stragglers import BernoulliStragglers, FixedStragglers

__all__ = ["RatesExperiment", "SmoothMLP", "fit_slopes", "run_rates"]


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
class RatesExperiment:
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


def fit_slopes(records: list[dict[str, Any]]) -> dict[str, float]:
    """Least-squares slope of log MSE against log N per series: ``"gcc"``, ``"bacc"`` (worst case), ``"gcc_p<p>"``."""
    series: dict[str, list[tuple[float, float]]] = {}
    for record in records:
        key = record["scheme"] if record.get("p") is None else f"{record['scheme']}_p{record['p']:g}"
        if record["mse"] > 0:
            series.setdefault(key, []).append((record["N"], record["mse"]))
    return {
        key: float(np.polyfit(np.log([n for n, _ in points]), np.log([m for _, m in points]), 1)[0])
        for key, points in series.items()
        if len(points) >= 2
    }


def run_rates(experiment: RatesExperiment, *, progress: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Sweep N for both panels. Returns the records and a config dict (the slopes come from :func:`fit_slopes`)."""
    f = SmoothMLP(dim=experiment.dim, seed=experiment.seed)
    inputs = torch.randn(
        experiment.samples,
        experiment.dim,
        dtype=torch.float64,
        generator=torch.Generator().manual_seed(experiment.seed + 1),
    )
    reference = model_outputs(f, inputs)
    records: list[dict[str, Any]] = []
    lambda_dec: dict[int, Any] = {}
    for num_workers in tqdm(experiment.workers, desc="workers N", disable=not progress, leave=False):
        size = dict(num_inputs=experiment.num_inputs, num_workers=num_workers)
        gcc = torchgcc.make_code("gcc", **size, **dict(experiment.gcc))
        lambda_enc, lambda_dec[num_workers] = gcc.lambda_enc, gcc.lambda_dec
        worst = [
            (
                {"S": experiment.num_stragglers},
                FixedStragglers(num_stragglers=experiment.num_stragglers, placement="worst", seed=experiment.seed),
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
                BernoulliStragglers(p=p, seed=1000 * experiment.seed + num_workers, min_arrived=experiment.min_arrived),
            )
            for p in experiment.probabilities
        ]
        records += evaluate_sweep(
            f,
            inputs,
            codes={"gcc": gcc},
            settings=bernoulli,
            repeats=experiment.repeats,
            reference=reference,
            classification=False,
            progress=False,
        )
    config = {
        **asdict(experiment),
        "function": f"f(x) = tanh(x W1 + b1) W2, fixed random, {experiment.dim} -> 16 -> 4, float64",
        "placement": "worst",
        "gcc_lambda_enc": lambda_enc,
        "gcc_lambda_dec_by_N": lambda_dec,
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
    }
    return records, config
