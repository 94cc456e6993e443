"""``torchgcc reproduce manifold``: manifold-aware grouping (our reconstruction) against standard GCC.

Workloads: the digits LeNet5 and the small ViT (test set, K = 8, N = 32) and a cubic polynomial of inputs on a Swiss
roll embedded in R^50 (K = 8, N = 32). For every S in ``stragglers``, GCC codes the batch in its given order
(standard) and in the order of :func:`torchgcc.manifold.manifold_order` (greedy chain and spectral), with the SAME
code, the same straggler masks (seeded) and the same seeds; the records give MSE against the uncoded outputs and, for
the classifiers, RelAcc. ``ratio`` in results.json is each manifold order's MSE over the standard one.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

import torchgcc
from torchgcc.app.evaluate import evaluate_coded, model_outputs
from torchgcc.app.results import ExperimentResult
from torchgcc.app.tables import publish
from torchgcc.manifold import ORDERS, manifold_order
from torchgcc.stragglers import FixedStragglers

__all__ = [
    "DEFAULT",
    "QUICK",
    "Config",
    "add_arguments",
    "configure",
    "cubic_polynomial",
    "report",
    "run",
    "swiss_roll",
]


@dataclass(frozen=True)
class Config:
    workloads: tuple[str, ...] = ("lenet5", "vit", "swissroll")
    num_inputs: int = 8
    num_workers: int = 32
    stragglers: tuple[int, ...] = (0, 4, 8)
    repeats: int = 10
    swissroll_samples: int = 512
    seed: int = 0


def swiss_roll(samples: int, *, dim: int = 50, seed: int = 0) -> torch.Tensor:
    """``(samples, dim)`` float64 points of a Swiss roll in R^3, mapped into R^``dim`` by a random orthonormal map."""
    g = torch.Generator().manual_seed(seed)
    t = 1.5 * math.pi * (1 + 2 * torch.rand(samples, generator=g, dtype=torch.float64))
    height = 10 * torch.rand(samples, generator=g, dtype=torch.float64)
    roll = torch.stack([t * torch.cos(t), height, t * torch.sin(t)], dim=1) / 10
    basis, _ = torch.linalg.qr(torch.randn(dim, 3, generator=g, dtype=torch.float64))
    return roll @ basis.T


def cubic_polynomial(w: torch.Tensor):
    """``f(x) = (z_1^3 + z_2^2 z_3, z_2^3 + z_3^2 z_1, z_3^3 + z_1^2 z_2)`` with ``z = x w`` (``w`` ``(dim, 3)``)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        z = x @ w
        return torch.stack(
            [
                z[:, 0] ** 3 + z[:, 1] ** 2 * z[:, 2],
                z[:, 1] ** 3 + z[:, 2] ** 2 * z[:, 0],
                z[:, 2] ** 3 + z[:, 0] ** 2 * z[:, 1],
            ],
            dim=1,
        )

    return f


def run(config: Config, *, progress: bool = True) -> ExperimentResult:
    """Every workload and S, every order, the same code and masks."""
    from torchgcc.app.data import load_dataset
    from torchgcc.app.model_cache import load_or_train

    k, n = config.num_inputs, config.num_workers
    records: list[dict[str, Any]] = []
    written: dict[str, Any] = {**asdict(config), "torch": torch.__version__, "torchgcc": torchgcc.__version__}
    for workload in config.workloads:
        if workload == "swissroll":
            g = torch.Generator().manual_seed(config.seed)
            x = swiss_roll(config.swissroll_samples, seed=config.seed)
            model = cubic_polynomial(torch.randn(x.shape[1], 3, generator=g, dtype=torch.float64))
            classification = False
        else:
            split = load_dataset("digits", seed=config.seed)
            trained = load_or_train(workload, split, seed=config.seed, progress=progress)
            model, x, classification = trained.model, split.test_x, True
            written[f"{workload}_test_accuracy"] = trained.test_accuracy
        reference = model_outputs(model, x)
        groups = math.ceil(len(x) / k)
        code = torchgcc.make_code("gcc", num_inputs=k, num_workers=n)
        orders = {"standard": torch.arange(len(x))}
        orders.update({order: manifold_order(x.reshape(len(x), -1), order=order) for order in ORDERS})
        for s in config.stragglers:
            masks = FixedStragglers(s, seed=1000 * config.seed + s).sample(groups * config.repeats, n)
            masks = masks.view(config.repeats, groups, n)
            base = None
            for name, perm in orders.items():
                stats = evaluate_coded(
                    model, code, x[perm], masks, reference=reference[perm], classification=classification
                )
                base = stats["mse"] if base is None else base
                records.append(
                    {
                        "workload": workload,
                        "scheme": name,
                        "N": n,
                        "K": k,
                        "S": s,
                        "repeats": config.repeats,
                        **stats,
                        "ratio": stats["mse"] / base,
                    }
                )
    return ExperimentResult(records, written)


#: The published run: three workloads, S in {0, 4, 8}, 10 repeats.
DEFAULT = Config()
#: ``--quick``: S in {0, 8}, 2 repeats, 256 Swiss-roll samples.
QUICK = Config(stragglers=(0, 8), repeats=2, swissroll_samples=256)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options beyond the run options."""


def configure(args: argparse.Namespace) -> Config:
    return replace(QUICK if args.quick else DEFAULT, seed=args.seed)


def report(result: ExperimentResult, out: Path, *, console: Any) -> list[Path]:
    """The table and each order's MSE ratio to the standard order; results and table in ``out``."""
    config = result.config
    title = (
        f"Manifold-aware grouping (our reconstruction) vs standard GCC, K={config['num_inputs']}, "
        f"N={config['num_workers']}, random stragglers, same masks"
    )
    paths = publish(
        out,
        config=config,
        records=result.records,
        setting="S",
        title=title,
        console=console,
        series=lambda r: f"{r['workload']} {r['scheme']}",
    )
    for r in result.records:
        if r["scheme"] != "standard":
            console.print(
                f"{r['workload']} S={r['S']} {r['scheme']}: MSE ratio to standard {r['ratio']:.3f}"
                + (f", RelAcc {100 * r['agreement']:.1f}%" if "agreement" in r else "")
            )
    return list(paths.values())
