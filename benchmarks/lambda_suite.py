"""Choosing GCC's default decoder smoothing by measurement: MSE of every lambda rule on every workload and S.

Workloads (each decoded under the same seeded random straggler masks by every rule):

- ``mlp``: the 2-layer tanh MLP of ``benchmarks/lambda_rule.py`` (20 -> 64 -> 10, float64, Gaussian inputs),
  K = 10, N = 40, exact results;
- ``mlp_noisy``: the same with Gaussian noise of absolute standard deviation 1e-2 on every result;
- ``lenet5``, ``vit``: the digits classifiers of the experiments (trained once, cached), K = 8, N = 32;
- ``lenet5_bf16``: LeNet5 whose workers run in bfloat16 (:class:`torchgcc.noise.LowPrecisionWorkers`) against the
  float32 reference.

S takes the values 0, N/8, N/4, N/2. Rules: ``natural`` (lambda_dec = 0), ``spacing`` (the default) and ``gcv``.
For each cell the table gives every rule's MSE relative to the best of the three; the criterion for a default is
<= 1.10 at every cell. Writes JSON and prints, per rule, its worst ratio and the cells above 1.10:

    python benchmarks/lambda_suite.py --out benchmarks/results/lambda_suite.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import torchgcc
from torchgcc.app.data import load_dataset
from torchgcc.app.evaluate import model_outputs
from torchgcc.app.model_cache import load_or_train
from torchgcc.coded_module import group_samples
from torchgcc.noise import LowPrecisionWorkers
from torchgcc.stragglers import FixedStragglers

RULES = {"natural": 0.0, "spacing": "spacing", "gcv": "gcv", "adaptive": "adaptive"}
BASELINES = ("natural", "spacing", "gcv")


def workloads(args: argparse.Namespace):
    """``name -> (workers' model, reference model, inputs (M, *in), K, N, noise sigma)``."""
    torch.manual_seed(args.seed)
    mlp = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.Tanh(), torch.nn.Linear(64, 10)).double()
    x = torch.randn(args.groups * 10, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(args.seed))
    out = {"mlp": (mlp, mlp, x, 10, 40, 0.0), "mlp_noisy": (mlp, mlp, x, 10, 40, 1e-2)}
    split = load_dataset("digits", seed=args.seed)
    lenet = load_or_train("lenet5", split, seed=args.seed, progress=False).model
    vit = load_or_train("vit", split, seed=args.seed, progress=False).model
    out["lenet5"] = (lenet, lenet, split.test_x, 8, 32, 0.0)
    out["vit"] = (vit, vit, split.test_x, 8, 32, 0.0)
    out["lenet5_bf16"] = (LowPrecisionWorkers(lenet, torch.bfloat16), lenet, split.test_x, 8, 32, 0.0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100, help="groups of the MLP workloads")
    parser.add_argument("--repeats", type=int, default=4, help="masks per group and S")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/lambda_suite/results.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)

    records = []
    suite = workloads(args)
    torch.set_grad_enabled(False)
    for name, (workers, reference_model, inputs, k, n, sigma) in suite.items():
        reference = model_outputs(reference_model, inputs)
        codes = {rule: torchgcc.GCC(k, n, lambda_dec=lam) for rule, lam in RULES.items()}
        coded = codes["natural"].encoder(group_samples(inputs, k))  # lambda_enc = 0 for every rule: one encoder
        results = model_outputs(workers, coded.flatten(0, 1)).unflatten(0, coded.shape[:2])
        results = results + sigma * torch.randn(
            results.shape, generator=torch.Generator().manual_seed(args.seed + 1), dtype=results.dtype
        )
        groups = coded.shape[0]
        for s in (0, n // 8, n // 4, n // 2):
            masks = FixedStragglers(s, seed=1000 * args.seed + s).sample(groups * args.repeats, n)
            ys = results.repeat(args.repeats, *([1] * (results.ndim - 1)))
            truth = group_samples(reference, k).repeat(args.repeats, *([1] * (reference.ndim)))
            row = {}
            for rule, code in codes.items():
                row[rule] = torch.mean((code.decoder(ys, masks) - truth).double() ** 2).item()
            best = min(row[b] for b in BASELINES)
            for rule, mse in row.items():
                records.append(
                    {"workload": name, "S": s, "N": n, "K": k, "rule": rule, "mse": mse, "ratio_to_best": mse / best}
                )
            print(f"{name:12s} S={s:2d} " + " ".join(f"{r}={row[r]:.3e}({row[r] / best:.2f})" for r in row), flush=True)
    summary = {}
    for rule in RULES:
        mine = [r for r in records if r["rule"] == rule]
        summary[rule] = {
            "worst_ratio": max(r["ratio_to_best"] for r in mine),
            "misses": [
                (r["workload"], r["S"], round(r["ratio_to_best"], 3)) for r in mine if r["ratio_to_best"] > 1.10
            ],
        }
        print(
            f"{rule}: worst ratio to the best = {summary[rule]['worst_ratio']:.3f}; "
            f"cells above 1.10: {summary[rule]['misses'] or 'none'}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "config": {
                    **vars(args),
                    "out": str(args.out),
                    "rules": {k: str(v) for k, v in RULES.items()},
                    "torch": torch.__version__,
                },
                "summary": summary,
                "records": records,
            },
            indent=2,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
