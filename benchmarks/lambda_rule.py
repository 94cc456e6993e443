"""The evidence behind GCC's default decoder smoothing: MSE against the uncoded model for several bandwidth ratios.

f is a 2-layer tanh MLP (20 -> 64 -> 10, float64, seed 0), inputs are Gaussian, K = 10, N = 40, S random stragglers
(seeded per S), and worker results optionally carry Gaussian noise of standard deviation sigma. For each bandwidth
ratio r the decoder uses lambda_dec = (r * 2 / (n - 1))^4 for a fit to n = N - S results (r = 0: interpolation;
r = 0.2: the default); BACC is the baseline. Prints a table and writes JSON, by default to a fresh
``torchgcc-results/lambda_rule/<date>-<time>/lambda_rule.json`` (the committed copy,
benchmarks/results/lambda_rule.json,
was written with ``--out benchmarks/results/lambda_rule.json``):

    python benchmarks/lambda_rule.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import torchgcc
from torchgcc.app.options import fresh_output_dir
from torchgcc.codes.gcc import spacing_lambda
from torchgcc.stragglers import FixedStragglers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3, 0.5, 1.0])
    parser.add_argument("--stragglers", type=int, nargs="+", default=[0, 4, 10, 20])
    parser.add_argument("--sigmas", type=float, nargs="+", default=[0.0, 1e-3, 1e-2])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON file (default: a fresh torchgcc-results/lambda_rule/<date>-<time>/lambda_rule.json)",
    )
    args = parser.parse_args()
    args.out = args.out or fresh_output_dir("lambda_rule") / "lambda_rule.json"

    K, N = 10, 40
    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.Tanh(), torch.nn.Linear(64, 10)).double()
    x = torch.randn(args.groups, K, 20, dtype=torch.float64)
    noise = torch.Generator().manual_seed(args.seed + 1)
    records = []
    with torch.no_grad():
        reference = model(x)
        for sigma in args.sigmas:
            for s in args.stragglers:
                mask = FixedStragglers(s, seed=s).sample(args.groups, N)
                codes = {"bacc": torchgcc.BACC(K, N)}
                codes.update({f"r={r:g}": torchgcc.GCC(K, N, lambda_dec=spacing_lambda(N - s, r)) for r in args.ratios})
                for name, code in codes.items():
                    y = model(code.encoder(x))
                    y = y + sigma * torch.randn(y.shape, generator=noise, dtype=y.dtype)
                    mse = torch.mean((code.decoder(y, mask) - reference) ** 2).item()
                    records.append({"scheme": name, "sigma": sigma, "S": s, "N": N, "K": K, "mse": mse})
    names = ["bacc"] + [f"r={r:g}" for r in args.ratios]
    print(f"{'sigma':>7} {'S':>3} " + " ".join(f"{n:>10}" for n in names))
    for sigma in args.sigmas:
        for s in args.stragglers:
            row = {r["scheme"]: r["mse"] for r in records if r["sigma"] == sigma and r["S"] == s}
            print(f"{sigma:7.0e} {s:3d} " + " ".join(f"{row[n]:10.3e}" for n in names))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"config": vars(args) | {"out": str(args.out), "K": K, "N": N}, "records": records}, indent=2)
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
