"""Choosing GCC's default decoder smoothing by measurement: MSE of every lambda rule on a suite of workloads and S.

Workloads (inputs: Gaussian for the MLPs, scikit-learn's digits for the classifiers; nothing is downloaded):

- ``tanh``: the 2-layer tanh MLP of ``benchmarks/lambda_rule.py`` (20 -> 64 -> 10, float64), exact results;
- ``tanh_noise1e-3``, ``tanh_noise1e-2``: the same with Gaussian noise of absolute standard deviation 1e-3 / 1e-2
  on every worker's result;
- ``relu``, ``gelu``: the same MLP with ReLU / GELU; ``tanh_wide``: a 20 -> 256 -> 10 tanh MLP;
- ``lenet5``, ``vit``: the digits CNN and transformer of the experiments (trained once and cached,
  :func:`torchgcc.app.model_cache.load_or_train`), float32;
- ``lenet5_bf16``, ``vit_bf16``: the same whose workers run in bfloat16 (:class:`torchgcc.noise.LowPrecisionWorkers`),
  measured against the float32 model.

Settings (K, N): every workload at (4, 8) and (8, 16) with S = 0, 1, ..., N - K stragglers, and at its large
setting, (10, 40) for the MLPs and (8, 32) for the classifiers, with S in {0, N/8, N/4, N/2}. A cell is one
(workload, K, N, S). Stragglers are placed at random (:class:`~torchgcc.stragglers.FixedStragglers`, the same masks
for every rule and workload: seed ``10^6 seed + 1000 N + S``, ``+ 500`` for the calibration batch); the noise is
seeded by ``10^6 seed + 1000 N + K`` (``+ 1`` for BACC's results); ``--seed`` also seeds the MLP weights and inputs
and the classifiers' training.

Rules: ``natural`` (lambda_dec = 0), ``spacing``, ``gcv`` (per group, every call), the default ``adaptive``, and
the practitioner's alternative BACC (Berrut encoder and decoder, its own coded inputs and worker results, the same
masks). The default calibrates on the first batch it decodes; as a user would, each cell builds a FRESH default
code, lets it calibrate on a held-out first batch (the first ``--calibration-groups`` groups, under their own
masks) and measures it, like every other rule, on the remaining groups only.

Per cell: each rule's MSE against the uncoded (float32 / float64) model outputs and its ratio to the best of
natural / spacing / GCV. The criterion for the default: ratio <= 1.10 in every cell, and never worse than BACC in a
cell where natural-spline GCC is not. Writes JSON (settings, seeds, load average, threads, wall time, one row per
cell, every rule's worst ratio, the failing cells), progress on stderr:

    python benchmarks/lambda_suite.py                 # ./torchgcc-results/lambda_suite/results.json
    python benchmarks/lambda_suite.py --quick         # seconds: 400 MLP inputs, one mask per group
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

import torchgcc
import torchgcc.codes.gcc
from torchgcc.app.data import load_dataset
from torchgcc.app.evaluate import model_outputs
from torchgcc.app.model_cache import load_or_train
from torchgcc.coded_module import group_samples
from torchgcc.noise import LowPrecisionWorkers
from torchgcc.stragglers import FixedStragglers

#: GCC's decoder rules (``lambda_dec``); every GCC rule shares the natural encoder (``lambda_enc = 0``).
RULES = {"natural": 0.0, "spacing": "spacing", "gcv": "gcv", "adaptive": "adaptive"}
#: The rules the default is measured against.
BASELINES = ("natural", "spacing", "gcv")
#: The default may be at most this much worse than the best baseline in a cell.
TOLERANCE = 1.10
#: Each model family's large (K, N); every workload also runs at these small settings, S = 0 .. N - K.
LARGE = {"mlp": (10, 40), "digits": (8, 32)}
SMALL = ((4, 8), (8, 16))


@dataclass(frozen=True)
class Workload:
    """What the workers run, the uncoded reference, the inputs ``(M, *in)``, the model family and the noise."""

    workers: Callable[[torch.Tensor], torch.Tensor]
    reference: Callable[[torch.Tensor], torch.Tensor]
    inputs: torch.Tensor
    family: str
    sigma: float = 0.0


def mlp(hidden: int, activation: torch.nn.Module) -> torch.nn.Module:
    """A 20 -> hidden -> 10 float64 MLP (weights from torch's global RNG)."""
    return torch.nn.Sequential(torch.nn.Linear(20, hidden), activation, torch.nn.Linear(hidden, 10)).double()


def workloads(seed: int, samples: int, digits_samples: int) -> dict[str, Workload]:
    """The suite, seeded by ``seed``: ``samples`` MLP inputs, the first ``digits_samples`` digits test images."""
    torch.manual_seed(seed)
    tanh, relu, gelu, wide = (
        mlp(64, torch.nn.Tanh()),
        mlp(64, torch.nn.ReLU()),
        mlp(64, torch.nn.GELU()),
        mlp(256, torch.nn.Tanh()),
    )
    x = torch.randn(samples, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    suite = {
        "tanh": Workload(tanh, tanh, x, "mlp"),
        "tanh_noise1e-3": Workload(tanh, tanh, x, "mlp", 1e-3),
        "tanh_noise1e-2": Workload(tanh, tanh, x, "mlp", 1e-2),
        "relu": Workload(relu, relu, x, "mlp"),
        "gelu": Workload(gelu, gelu, x, "mlp"),
        "tanh_wide": Workload(wide, wide, x, "mlp"),
    }
    split = load_dataset("digits", seed=seed)
    images = split.test_x[:digits_samples]
    for name in ("lenet5", "vit"):
        model = load_or_train(name, split, seed=seed, progress=False).model
        suite[name] = Workload(model, model, images, "digits")
        suite[f"{name}_bf16"] = Workload(LowPrecisionWorkers(model, torch.bfloat16), model, images, "digits")
    return suite


def settings(family: str) -> list[tuple[int, int, list[int]]]:
    """``(K, N, S values)`` of a model family."""
    small = [(k, n, list(range(n - k + 1))) for k, n in SMALL]
    k, n = LARGE[family]
    return small + [(k, n, [0, n // 8, n // 4, n // 2])]


def worker_results(code: torch.nn.Module, workload: Workload, groups: torch.Tensor, noise_seed: int) -> torch.Tensor:
    """``(B, N, *out)``: the workers' outputs on ``code``'s coded inputs, plus the workload's seeded noise."""
    coded = code.encoder(groups)
    results = model_outputs(workload.workers, coded.flatten(0, 1)).unflatten(0, coded.shape[:2])
    noise = torch.randn(results.shape, generator=torch.Generator().manual_seed(noise_seed), dtype=results.dtype)
    return results + workload.sigma * noise


def mse(estimate: torch.Tensor, truth: torch.Tensor) -> float:
    return torch.mean((estimate.double() - truth.double()) ** 2).item()


def measure_cell(
    k: int, n: int, s: int, gcc: torch.Tensor, bacc: torch.Tensor, truth: torch.Tensor, args: argparse.Namespace
) -> dict:
    """One cell: every rule's MSE on the measured groups (all but the first ``calibration_groups``) under the same
    seeded masks, the default calibrated first on the held-out groups under their own masks."""
    held = args.calibration_groups
    mask_seed = args.seed * 1_000_000 + n * 1000 + s
    calibration_masks = FixedStragglers(s, seed=mask_seed + 500).sample(held, n)
    masks = FixedStragglers(s, seed=mask_seed).sample((len(gcc) - held) * args.repeats, n)

    def repeat(t: torch.Tensor) -> torch.Tensor:
        return t[held:].repeat(args.repeats, *([1] * (t.ndim - 1)))

    ys, ys_bacc, target = repeat(gcc), repeat(bacc), repeat(truth)
    errors, chosen = {}, None
    for rule, lam in RULES.items():
        decoder = torchgcc.GCC(k, n, lambda_dec=lam).decoder  # fresh: the default calibrates on this cell's data
        if rule == "adaptive":
            decoder(gcc[:held], calibration_masks)
            chosen = decoder.ratio.item()
        errors[rule] = mse(decoder(ys, masks), target)
    errors["bacc"] = mse(torchgcc.BACC(k, n).decoder(ys_bacc, masks), target)
    best = min(errors[rule] for rule in BASELINES)
    ratios = {rule: value / best for rule, value in errors.items()}
    within = ratios["adaptive"] <= TOLERANCE
    not_worse_than_bacc = errors["adaptive"] <= errors["bacc"] or errors["natural"] > errors["bacc"]
    return {
        "K": k,
        "N": n,
        "S": s,
        "mse": errors,
        "ratio_to_best": ratios,
        "best": min(BASELINES, key=errors.__getitem__),
        "adaptive_ratio_chosen": chosen,
        "within_tolerance": within,
        "not_worse_than_bacc": not_worse_than_bacc,
        "passes": within and not_worse_than_bacc,
    }


def summarise(rows: list[dict]) -> dict:
    """Every rule's worst ratio (and where), the failing cells, the counts."""
    worst = {}
    for rule in (*RULES, "bacc"):
        row = max(rows, key=lambda r: r["ratio_to_best"][rule])
        worst[rule] = {"ratio": row["ratio_to_best"][rule], "cell": [row["workload"], row["K"], row["N"], row["S"]]}
    failing = [
        {
            "workload": r["workload"],
            "K": r["K"],
            "N": r["N"],
            "S": r["S"],
            "adaptive_ratio_to_best": r["ratio_to_best"]["adaptive"],
            "why": ", ".join(
                reason
                for reason, failed in (
                    (f"above {TOLERANCE}", not r["within_tolerance"]),
                    ("worse than BACC where natural is not", not r["not_worse_than_bacc"]),
                )
                if failed
            ),
        }
        for r in rows
        if not r["passes"]
    ]
    above = {rule: sum(r["ratio_to_best"][rule] > TOLERANCE for r in rows) for rule in (*RULES, "bacc")}
    return {"cells": len(rows), "worst": worst, "cells_above_tolerance": above, "failing": failing}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2400, help="MLP inputs (groups: samples / K)")
    parser.add_argument("--digits-samples", type=int, default=359, help="digits test images used (at most 359)")
    parser.add_argument("--repeats", type=int, default=8, help="masks per measured group")
    parser.add_argument("--calibration-groups", type=int, default=16, help="held-out first batch the default sees")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--quick", action="store_true", help="a run of seconds: 400 MLP inputs, 1 mask per group")
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/lambda_suite/results.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.samples, args.repeats = 400, 1
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    load_before, start = os.getloadavg(), time.perf_counter()

    rows = []
    for name, workload in workloads(args.seed, args.samples, args.digits_samples).items():
        for k, n, stragglers in settings(workload.family):
            groups = group_samples(workload.inputs, k)
            if len(groups) <= args.calibration_groups:
                raise SystemExit(f"{name}: {len(groups)} groups at K = {k}; need more than --calibration-groups")
            noise_seed = args.seed * 1_000_000 + n * 1000 + k
            gcc = worker_results(torchgcc.GCC(k, n, lambda_dec=0.0), workload, groups, noise_seed)
            bacc = worker_results(torchgcc.BACC(k, n), workload, groups, noise_seed + 1)
            truth = group_samples(model_outputs(workload.reference, workload.inputs), k)
            for s in stragglers:
                row = {"workload": name, "sigma": workload.sigma, **measure_cell(k, n, s, gcc, bacc, truth, args)}
                rows.append(row)
                ratios = " ".join(f"{rule}={value:.2f}" for rule, value in row["ratio_to_best"].items())
                mark = "" if row["passes"] else "  FAIL"
                print(f"{name:15s} K={k:2d} N={n:2d} S={s:2d} {ratios}{mark}", file=sys.stderr, flush=True)

    summary = summarise(rows)
    wall = time.perf_counter() - start
    for rule, worst in summary["worst"].items():
        print(f"{rule}: worst ratio {worst['ratio']:.3f} at {worst['cell']}", file=sys.stderr)
    print(f"failing cells: {len(summary['failing'])} of {len(rows)} ({wall:.0f} s)", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    config = {**vars(args), "out": str(args.out), "rules": {k: str(v) for k, v in RULES.items()}}
    config |= {"baselines": list(BASELINES), "tolerance": TOLERANCE, "large": LARGE, "small": SMALL}
    config |= {"default_pool": torchgcc.codes.gcc.GCV_POOL, "default_candidates": list(torchgcc.codes.gcc.GCV_RATIOS)}
    run = {"wall_s": wall, "load_average_before": list(load_before), "load_average_after": list(os.getloadavg())}
    run |= {"threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "torch": torch.__version__}
    payload = {"config": config, "run": run, "summary": summary, "records": rows}
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
