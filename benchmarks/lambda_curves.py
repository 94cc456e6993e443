"""Why the default smoothing misses where it misses: every bandwidth ratio's MSE in the cells of a suite JSON.

For each cell (by default the cells of ``benchmarks/lambda_suite.py`` JSONs where the default is above the tolerance),
rebuilt exactly as the suite builds it (same workload, seed, masks, noise and calibration batch): the decoder's MSE for
every candidate ratio of :data:`torchgcc.codes.gcc.GCV_RATIOS` (``spacing_lambda(n, r)``, one ratio for every group),
with the workload's noise and without it; the best ratio (the oracle); the default's choice and the pooled GCV curve
it was chosen from (minimiser ``r*``, share ``rho`` that smoothing removes); and the pooled exact leave-one-out
curve (:func:`torchgcc.functional.loo.loo_scores`) of the same calibration groups, with its minimiser. Writes JSON
(settings, load average, threads, one row per cell):

    python benchmarks/lambda_curves.py benchmarks/results/lambda_suite_heldout.json \\
        benchmarks/results/lambda_suite_tuning.json --out benchmarks/results/lambda_curves.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

import torchgcc
from benchmarks.lambda_suite import TOLERANCE, Workload, mse, worker_results, workloads
from torchgcc.app.evaluate import model_outputs
from torchgcc.coded_module import group_samples
from torchgcc.codes.gcc import GCV_POOL, GCV_RATIOS, SplineDecoder, spacing_lambda
from torchgcc.functional.decoder_smoothing import informative_groups
from torchgcc.functional.gcv import gcv_scores
from torchgcc.functional.loo import loo_scores
from torchgcc.stragglers import FixedStragglers


def pooled_curves(decoder: SplineDecoder, results: torch.Tensor, masks: torch.Tensor) -> dict[str, list[float]]:
    """The GCV and leave-one-out scores of the candidates, averaged over the informative groups the default pools,
    each relative to its value at interpolation."""
    pooled = min(len(masks), GCV_POOL, max(1, 1024 // decoder.num_workers))
    index = torch.linspace(0, len(masks) - 1, pooled).round().long()
    survivors = decoder.survivors(masks[index])
    flat = results[index].reshape(pooled, decoder.num_workers, -1).double()
    width = min(decoder.num_workers, survivors.order.shape[-1])
    order = survivors.order[:, :width].clamp(max=decoder.num_workers - 1)
    compacted = flat.gather(1, order.unsqueeze(-1).expand(-1, -1, flat.shape[-1]))
    ratios = torch.tensor(GCV_RATIOS, dtype=torch.float64)
    mu = survivors.counts.unsqueeze(-1) * spacing_lambda(survivors.counts.unsqueeze(-1), ratios)
    curves = {}
    for name, score in (("gcv", gcv_scores), ("loo", loo_scores)):
        scores = score(survivors.knots[:, :width], survivors.counts, compacted, mu)
        mean = scores[informative_groups(scores)].mean(0)
        curves[name] = (mean / mean[0]).tolist()
    return curves


def cell_curves(workload: Workload, name: str, seed: int, k: int, n: int, s: int, args) -> dict:
    """One cell of the suite, rebuilt as :func:`benchmarks.lambda_suite.measure_cell` builds it."""
    groups = group_samples(workload.inputs, k)
    noise_seed = seed * 1_000_000 + n * 1000 + k
    exact = Workload(workload.workers, workload.reference, workload.inputs, workload.family, 0.0)
    plain = torchgcc.GCC(k, n, lambda_dec=0.0).decoder
    with torch.no_grad():
        noisy = worker_results(torchgcc.GCC(k, n, lambda_dec=0.0), workload, groups, noise_seed)
        clean = worker_results(torchgcc.GCC(k, n, lambda_dec=0.0), exact, groups, noise_seed)
        truth = group_samples(model_outputs(workload.reference, workload.inputs), k)
        held = args.calibration_groups
        mask_seed = seed * 1_000_000 + n * 1000 + s
        calibration = FixedStragglers(s, seed=mask_seed + 500).sample(held, n)
        masks = FixedStragglers(s, seed=mask_seed).sample((len(noisy) - held) * args.repeats, n)
        default = torchgcc.GCC(k, n).decoder
        default(noisy[:held], calibration)

        def repeat(t: torch.Tensor) -> torch.Tensor:
            return t[held:].repeat(args.repeats, *([1] * (t.ndim - 1)))

        target = repeat(truth)
        curve, curve_exact = [], []
        for ratio in GCV_RATIOS:
            decoder = SplineDecoder(plain.alpha, plain.beta, lam=spacing_lambda(n - s, ratio), min_arrived=2)
            curve.append(mse(decoder(repeat(noisy), masks), target))
            curve_exact.append(mse(decoder(repeat(clean), masks), target))
        scores = pooled_curves(plain, noisy[:held], calibration)
    best = min(range(len(curve)), key=curve.__getitem__)
    minimiser = {key: GCV_RATIOS[min(range(len(v)), key=v.__getitem__)] for key, v in scores.items()}
    return {
        "workload": name,
        "seed": seed,
        "K": k,
        "N": n,
        "S": s,
        "sigma": workload.sigma,
        "ratios": list(GCV_RATIOS),
        "mse": curve,
        "mse_without_noise": curve_exact,
        "best_ratio": GCV_RATIOS[best],
        "default_ratio": default.ratio.item(),
        "gcv_minimiser": minimiser["gcv"],
        "gcv_removed": 1 - min(scores["gcv"]),
        "loo_minimiser": minimiser["loo"],
        "pooled_gcv": scores["gcv"],
        "pooled_loo": scores["loo"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", type=Path, nargs="+", help="lambda_suite JSONs whose failing cells to rebuild")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/lambda_curves.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_before, start = os.getloadavg(), time.perf_counter()
    rows = []
    for path in args.suites:
        suite = json.loads(path.read_text())
        config = suite["config"]
        args.repeats, args.calibration_groups = config["repeats"], config["calibration_groups"]
        cells = [r for r in suite["records"] if r["ratio_to_best"]["default"] > TOLERANCE]
        for seed in sorted({r["seed"] for r in cells}):
            names = tuple(dict.fromkeys(r["workload"] for r in cells if r["seed"] == seed))
            built = workloads(names, seed, config["samples"], config["digits_samples"])
            for r in (r for r in cells if r["seed"] == seed):
                row = cell_curves(built[r["workload"]], r["workload"], seed, r["K"], r["N"], r["S"], args)
                rows.append({"suite": str(path), "default_ratio_to_best": r["ratio_to_best"]["default"], **row})
                print(
                    f"{r['workload']} {seed} K={r['K']} N={r['N']} S={r['S']}: best r {row['best_ratio']}, default "
                    f"{row['default_ratio']:.3f}, GCV r* {row['gcv_minimiser']}, LOO r* {row['loo_minimiser']}",
                    file=sys.stderr,
                    flush=True,
                )
    run = {"wall_s": time.perf_counter() - start, "load_average_before": list(load_before)}
    run |= {"load_average_after": list(os.getloadavg()), "threads": torch.get_num_threads(), "torch": torch.__version__}
    config = {"suites": [str(p) for p in args.suites], "tolerance": TOLERANCE, "candidates": list(GCV_RATIOS)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"config": config, "run": run, "records": rows}, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
