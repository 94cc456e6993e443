"""The Fig. 3 experiment: GCC vs LCC on a polynomial task as the number of stragglers S grows.

``f`` is a fixed random quadratic map of vectors (degree 2), computed in float64, so LCC with ``degree=2`` is
exact whenever at least its recovery threshold ``(K - 1) * 2 + 1`` results arrive, i.e. for
``S <= N - threshold``. Beyond that LCC interpolates the survivors with a lower-degree polynomial
(``below_threshold="interpolate"``), which is unstable; GCC degrades gracefully.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import torch
from torch import nn

import torchgcc
from torchgcc.app.evaluate import evaluate_sweep
from torchgcc.stragglers import FixedStragglers

__all__ = ["PolynomialExperiment", "QuadraticMap", "run_polynomial"]


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
class PolynomialExperiment:
    """Settings: ``samples`` standard-normal inputs of ``dim`` coordinates coded ``num_inputs`` per group on
    ``num_workers`` workers; S runs over ``stragglers`` (default: 0 to N - 2) with random placement."""

    num_inputs: int = 8
    num_workers: int = 32
    stragglers: tuple[int, ...] | None = None
    samples: int = 512
    dim: int = 4
    repeats: int = 10
    seed: int = 0
    gcc: Mapping[str, Any] = field(default_factory=dict)

    @property
    def threshold(self) -> int:
        """LCC's recovery threshold for a degree-2 ``f``: ``(K - 1) * 2 + 1`` results."""
        return (self.num_inputs - 1) * 2 + 1


def run_polynomial(
    experiment: PolynomialExperiment, *, progress: bool = True
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Sweep S for GCC and LCC. Returns the records and a config dict (with ``threshold_stragglers``)."""
    f = QuadraticMap(dim=experiment.dim, seed=experiment.seed)
    inputs = torch.randn(
        experiment.samples,
        experiment.dim,
        dtype=torch.float64,
        generator=torch.Generator().manual_seed(experiment.seed + 1),
    )
    size = dict(num_inputs=experiment.num_inputs, num_workers=experiment.num_workers)
    codes = {
        "gcc": torchgcc.make_code("gcc", **size, **dict(experiment.gcc)),
        "lcc": torchgcc.make_code("lcc", **size, degree=2, below_threshold="interpolate"),
    }
    stragglers = experiment.stragglers or tuple(range(experiment.num_workers - 1))
    settings = [
        ({"S": s}, FixedStragglers(num_stragglers=s, placement="random", seed=1000 * experiment.seed + s))
        for s in stragglers
    ]
    records = evaluate_sweep(
        f,
        inputs,
        codes=codes,
        settings=settings,
        repeats=experiment.repeats,
        classification=False,
        progress=progress,
        desc="polynomial task",
    )
    config = {
        **asdict(experiment),
        "stragglers": list(stragglers),
        "function": "f(x) = (xA)*(xB) + xC + c, fixed random, float64",
        "lcc_degree": 2,
        "lcc_threshold": experiment.threshold,
        "threshold_stragglers": experiment.num_workers - experiment.threshold,
        "gcc_lambda_enc": codes["gcc"].lambda_enc,
        "gcc_lambda_dec": codes["gcc"].lambda_dec,
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
    }
    return records, config
