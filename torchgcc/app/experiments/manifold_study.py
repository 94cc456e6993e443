"""``torchgcc reproduce manifold``: manifold-aware grouping (our reconstruction) against standard GCC.

Workloads: the digits LeNet5 and the small ViT (test set, K = 8, N = 32) and a cubic polynomial of inputs on a Swiss
roll embedded in R^50 (K = 8, N = 32). For every S in ``stragglers``, GCC codes the batch in its given order
(standard) and in the order of :func:`torchgcc.manifold.manifold_order` (greedy chain and spectral), with the SAME
code, the same straggler masks (seeded) and the same seeds; the records give MSE against the uncoded outputs and, for
the classifiers, RelAcc. ``ratio`` in results.json is each manifold order's MSE over the standard one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

import torchgcc
from torchgcc.app.evaluate import evaluate_coded, model_outputs
from torchgcc.manifold import ORDERS, manifold_order
from torchgcc.stragglers import FixedStragglers

__all__ = ["ManifoldExperiment", "cubic_polynomial", "run_manifold", "swiss_roll"]


@dataclass(frozen=True)
class ManifoldExperiment:
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


def run_manifold(experiment: ManifoldExperiment, *, progress: bool = True) -> tuple[list[dict[str, Any]], dict]:
    from torchgcc.app.data import load_dataset
    from torchgcc.app.model_cache import load_or_train

    k, n = experiment.num_inputs, experiment.num_workers
    records: list[dict[str, Any]] = []
    config: dict[str, Any] = {**asdict(experiment), "torch": torch.__version__, "torchgcc": torchgcc.__version__}
    for workload in experiment.workloads:
        if workload == "swissroll":
            g = torch.Generator().manual_seed(experiment.seed)
            x = swiss_roll(experiment.swissroll_samples, seed=experiment.seed)
            model = cubic_polynomial(torch.randn(x.shape[1], 3, generator=g, dtype=torch.float64))
            classification = False
        else:
            split = load_dataset("digits", seed=experiment.seed)
            trained = load_or_train(workload, split, seed=experiment.seed, progress=progress)
            model, x, classification = trained.model, split.test_x, True
            config[f"{workload}_test_accuracy"] = trained.test_accuracy
        reference = model_outputs(model, x)
        groups = math.ceil(len(x) / k)
        code = torchgcc.make_code("gcc", num_inputs=k, num_workers=n)
        orders = {"standard": torch.arange(len(x))}
        orders.update({order: manifold_order(x.reshape(len(x), -1), order=order) for order in ORDERS})
        for s in experiment.stragglers:
            masks = FixedStragglers(s, seed=1000 * experiment.seed + s).sample(groups * experiment.repeats, n)
            masks = masks.view(experiment.repeats, groups, n)
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
                        "repeats": experiment.repeats,
                        **stats,
                        "ratio": stats["mse"] / base,
                    }
                )
    return records, config


QUICK = ManifoldExperiment(stragglers=(0, 8), repeats=2, swissroll_samples=256)


def run(args) -> int:
    """``torchgcc reproduce manifold``."""
    from dataclasses import replace

    from rich.console import Console

    from torchgcc.app.options import apply_threads, output_dir
    from torchgcc.app.tables import publish

    apply_threads(args)
    console = Console()
    experiment = replace(QUICK if args.quick else ManifoldExperiment(), seed=args.seed)
    records, config = run_manifold(experiment, progress=args.progress)
    out = output_dir(args)
    title = (
        f"Manifold-aware grouping (our reconstruction) vs standard GCC, K={experiment.num_inputs}, "
        f"N={experiment.num_workers}, random stragglers, same masks"
    )
    publish(
        out,
        config=config,
        records=records,
        setting="S",
        title=title,
        console=console,
        series=lambda r: f"{r['workload']} {r['scheme']}",
    )
    for r in records:
        if r["scheme"] != "standard":
            console.print(
                f"{r['workload']} S={r['S']} {r['scheme']}: MSE ratio to standard {r['ratio']:.3f}"
                + (f", RelAcc {100 * r['agreement']:.1f}%" if "agreement" in r else "")
            )
    console.print(f"wrote {out}/results.json, results.csv, table.md")
    return 0
