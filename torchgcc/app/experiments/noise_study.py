"""``torchgcc reproduce noisy``: coded inference when the workers' results are noisy (the LeTCC setting).

``f`` is the fixed random smooth network of the rates experiment (a tanh MLP, 2 -> 16 -> 4, float64); every result
gets Gaussian noise of standard deviation ``sigma`` times its group's result RMS
(:class:`torchgcc.noise.GaussianNoise`), and ``S`` random workers straggle. Decoders: GCC with the noise-aware
lambda ``0.01 (sigma^2 / n)^(4/5)`` for ``n`` fitted results (OUR RECONSTRUCTION of the ``lambda ~ n^(-4/5)``
scaling of the noisy-GCC analysis, with the known relative noise level), natural-spline GCC, GCC with GCV, and BACC.
Two sweeps: N at fixed sigma, and sigma at fixed N. The fitted log-log slope of MSE against N goes beside the
``S^(8/5) N^(-3/5)`` bound's -0.6. A last panel runs the workers in bfloat16
(:class:`torchgcc.noise.LowPrecisionWorkers`) as a real noise source.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

import torchgcc
from torchgcc.app.evaluate import model_outputs
from torchgcc.app.experiments.rates_study import SmoothMLP
from torchgcc.app.results import ExperimentResult
from torchgcc.app.statistics import loglog_slope
from torchgcc.app.tables import publish
from torchgcc.coded_module import group_samples
from torchgcc.metrics import mean_ci
from torchgcc.noise import GaussianNoise, LowPrecisionWorkers
from torchgcc.stragglers import FixedStragglers

__all__ = ["DEFAULT", "QUICK", "Config", "add_arguments", "configure", "noise_aware_lambda", "report", "run"]


#: Constant of :func:`noise_aware_lambda` (1 smoothed far too much in a first measurement; not tuned further).
NOISE_C = 0.01


def noise_aware_lambda(sigma: float, num_points: int, c: float = NOISE_C) -> float:
    """``c (sigma^2 / n)^(4/5)``: the decoder smoothing for relative noise ``sigma`` and ``n`` fitted results."""
    return c * (sigma**2 / num_points) ** 0.8


@dataclass(frozen=True)
class Config:
    num_inputs: int = 8
    workers: tuple[int, ...] = (32, 45, 64, 91, 128, 181, 256)
    sigma: float = 1e-2
    sigmas: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1)
    sigma_workers: int = 128
    num_stragglers: int = 4
    samples: int = 128
    repeats: int = 2
    seed: int = 0


@torch.no_grad()
def _evaluate(
    f, workers_f, inputs, reference, *, k: int, n: int, s: int, sigma: float, repeats: int, seed: int
) -> list[dict[str, Any]]:
    groups = math.ceil(len(inputs) / k)
    masks = FixedStragglers(s, seed=1000 * seed + n).sample(groups * repeats, n)
    codes = {
        "noise-aware": torchgcc.GCC(k, n, lambda_dec=noise_aware_lambda(sigma, n - s)),
        "natural": torchgcc.make_code("natural", num_inputs=k, num_workers=n),
        "gcv": torchgcc.GCC(k, n, lambda_dec="gcv"),
        "gcc": torchgcc.GCC(k, n),
        "bacc": torchgcc.make_code("bacc", num_inputs=k, num_workers=n),
    }
    truth = group_samples(reference, k).repeat(repeats, 1, 1)
    records = []
    for scheme, code in codes.items():
        coded = code.encoder(group_samples(inputs, k))
        results = model_outputs(workers_f, coded.flatten(0, 1)).unflatten(0, coded.shape[:2]).repeat(repeats, 1, 1)
        if sigma > 0:
            results = GaussianNoise(sigma, seed=seed + n)(results, masks)
        per_group = (code.decoder(results, masks).double() - truth).pow(2).flatten(1).mean(dim=1)
        records.append(
            {
                "scheme": scheme,
                "N": n,
                "K": k,
                "S": s,
                "sigma": sigma,
                "mse": per_group.mean().item(),
                "mse_ci": mean_ci(per_group)[1],
            }
        )
    return records


def run(config: Config, *, progress: bool = True) -> ExperimentResult:
    """The N sweep, the sigma sweep and the bf16 workers; ``extra`` holds the slopes and the sigma records."""
    f = SmoothMLP(seed=config.seed)
    inputs = torch.randn(
        config.samples, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(config.seed + 1)
    )
    reference = model_outputs(f, inputs)
    common = dict(k=config.num_inputs, s=config.num_stragglers, repeats=config.repeats, seed=config.seed)
    records = []
    for n in config.workers:
        records += [{**r, "sweep": "N"} for r in _evaluate(f, f, inputs, reference, n=n, sigma=config.sigma, **common)]
    for sigma in config.sigmas:
        records += [
            {**r, "sweep": "sigma"}
            for r in _evaluate(f, f, inputs, reference, n=config.sigma_workers, sigma=sigma, **common)
        ]
    low = LowPrecisionWorkers(f.float(), torch.bfloat16)
    f32, x32 = SmoothMLP(seed=config.seed).float(), inputs.float()
    for n in config.workers:
        records += [
            {**r, "sweep": "bf16", "sigma": 0.0}
            for r in _evaluate(f32, low, x32, model_outputs(f32, x32), n=n, sigma=0.0, **common)
        ]
    written = {
        **asdict(config),
        "function": "tanh MLP 2 -> 16 -> 4 (rates experiment)",
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
    }
    slopes = {"N": fit_slopes(records, "N"), "bf16": fit_slopes(records, "bf16"), "bound": -0.6}
    sigma_records = [r for r in records if r["sweep"] == "sigma"]
    return ExperimentResult(
        [r for r in records if r["sweep"] != "sigma"], written, {"slopes": slopes, "sigma_records": sigma_records}
    )


def fit_slopes(records: list[dict[str, Any]], sweep: str = "N") -> dict[str, float]:
    """Log-log slope of MSE against N per scheme in ``sweep`` (``"N"`` or ``"bf16"``)."""
    slopes = {}
    for scheme in dict.fromkeys(r["scheme"] for r in records):
        rows = [r for r in records if r["sweep"] == sweep and r["scheme"] == scheme]
        slopes[scheme] = loglog_slope([r["N"] for r in rows], [r["mse"] for r in rows])
    return slopes


#: The published run: N from 32 to 256 at sigma = 1e-2, sigma from 1e-4 to 1e-1 at N = 128.
DEFAULT = Config()
#: ``--quick``: three N, two sigma, 128 samples, 2 repeats.
QUICK = Config(workers=(32, 64, 128), sigmas=(1e-3, 1e-1), sigma_workers=64, samples=128, repeats=2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options beyond the run options: the decoders compared are the experiment's subject."""


def configure(args: argparse.Namespace) -> Config:
    return replace(QUICK if args.quick else DEFAULT, seed=args.seed)


def report(result: ExperimentResult, out: Path, *, console: Any) -> list[Path]:
    """The N and bf16 table, the sigma sweep and the slopes; results and table in ``out``."""
    config = result.config
    title = (
        f"Noisy workers: tanh MLP, K={config['num_inputs']}, S={config['num_stragglers']} random, "
        f"relative Gaussian noise sigma={config['sigma']:g} (N sweep), N={config['sigma_workers']} (sigma sweep)"
    )
    paths = publish(
        out,
        config=config,
        records=result.records,
        setting="N",
        title=title,
        console=console,
        series=lambda r: f"{r['sweep']} {r['scheme']}",
        **result.extra,
    )
    for r in result.extra["sigma_records"]:
        console.print(f"sigma={r['sigma']:g} N={r['N']} {r['scheme']}: MSE {r['mse']:.3g}")
    console.print(f"slopes of MSE vs N (bound S^(8/5) N^(-3/5): -0.6): {result.extra['slopes']}")
    return list(paths.values())
