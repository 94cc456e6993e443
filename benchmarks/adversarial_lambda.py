"""Measuring the constant c of the adversarial lambda ``lambda_d = c (q/n)^(8/5)`` of the seed's smoothing decoder.

f(x) = x sin x at K = 20 inputs ``x_k = 10 alpha_k``, M = 100, no stragglers, q = round(N^a) adversaries, N from 100 to
3200; the error is the worst case over the concentrated and random (+M) attacks of the MSE at the regression points.
For each c and a: the fitted log-log slope against N (theory: (6/5)(a - 1)) and the error at N = 3200. Writes JSON:

    python benchmarks/adversarial_lambda.py --out benchmarks/results/adversarial_lambda.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from torchgcc.attacks import ConcentratedAttack, RandomAttack
from torchgcc.codes.robust import RobustGCC


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--constants", type=float, nargs="+", default=[1e-4, 1e-3, 1e-2, 0.1, 1.0])
    parser.add_argument("--workers", type=int, nargs="+", default=[100, 200, 400, 800, 1600, 3200])
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/adversarial_lambda/results.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    k, f = 20, (lambda t: t * torch.sin(t))
    records = []
    for c in args.constants:
        for a in (0.3, 0.5, 0.7):
            errors = []
            for n in args.workers:
                q = int(round(n**a))
                code = RobustGCC(k, n, q=q, decoder="smoothing", c=c)
                y, truth = f(10 * code.beta).view(1, n, 1), f(10 * code.alpha).view(1, k, 1)
                mask = torch.ones(1, n, dtype=torch.bool)
                attacks = (ConcentratedAttack(q, 100.0), RandomAttack(q, 100.0, seed=n))
                errors.append(
                    max(((code.decoder(attack(y, mask), mask) - truth) ** 2).mean().item() for attack in attacks)
                )
            slope = float(np.polyfit(np.log(args.workers), np.log(errors), 1)[0])
            records.append({"c": c, "a": a, "slope": slope, "theory": 1.2 * (a - 1), "mse": errors, "N": args.workers})
            print(
                f"c={c:g} a={a}: slope {slope:.2f} (theory {1.2 * (a - 1):.2f}), MSE at N={args.workers[-1]}: "
                f"{errors[-1]:.3g}",
                flush=True,
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"config": {**vars(args), "out": str(args.out)}, "records": records}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
