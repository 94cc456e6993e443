"""Would smoothing scaled by each group's own gaps fix the default's missed cells? A rule tried and not adopted.

The default smoothing (:mod:`torchgcc.functional.decoder_smoothing`) gives every group of ``n`` results the same
``lambda = spacing_lambda(n, r)``: its length scale is ``r`` times the MEAN gap between the group's worker points. The
cells where it misses the 1.10 tolerance (``benchmarks/results/lambda_curves.json``) have about half the workers
straggling, so some gaps are several spacings wide. The rule tried here scales each group's smoothing by its own gaps:
``lambda_g = spacing_lambda(n_g, r) * (||gaps_g||_p / mean(gaps_g))^4`` (``p = --power``, 4 by default: the fourth
power, as the error of bridging a gap of length ``h`` grows as ``h^4``), with ``r`` chosen as the default chooses it
(:func:`~torchgcc.functional.decoder_smoothing.pooled_gcv_ratio`) from the GCV scores of the same calibration groups
under the same scaling. Each cell of the given ``benchmarks/lambda_suite.py`` JSONs is rebuilt as the suite builds it
(workload, seed, masks, noise, calibration batch; ``--all`` for every cell, else the default's failing cells only) and
decoded with the rule on the numba kernel (each group's own smoothing table); MSE over the best of natural / spacing /
GCV of the suite's record. Writes JSON (settings, load average, one row per cell):

    python benchmarks/lambda_gap_rule.py benchmarks/results/lambda_suite_heldout.json \\
        benchmarks/results/lambda_suite_tuning.json benchmarks/results/lambda_suite_unseen.json \\
        --out benchmarks/results/lambda_gap_rule.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from lambda_suite import (  # benchmarks/lambda_suite.py, beside this script
    BASELINES,
    TOLERANCE,
    cell_masks,
    gcc_results,
    measured,
    mse,
    pooled_system,
    rebuilt_cells,
)

import torchgcc
from torchgcc.codes.gcc import GCV_RATIOS, SplineDecoder, spacing_lambda
from torchgcc.functional import numba_decode
from torchgcc.functional.decoder_smoothing import pooled_gcv_ratio
from torchgcc.functional.gcv import gcv_scores


def gap_factor(knots: torch.Tensor, counts: torch.Tensor, power: float) -> torch.Tensor:
    """``(G,)``: ``(||gaps||_p / mean gap)^4`` of each group's first ``counts`` knots ``(G, W)`` (1 for even gaps)."""
    factors = []
    for row, count in zip(knots, counts.tolist()):
        gaps = torch.diff(row[:count])
        factors.append(((gaps**power).mean() ** (1 / power) / gaps.mean()) ** 4)
    return torch.stack(factors)


def decode(decoder: SplineDecoder, results: torch.Tensor, masks: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """``(B, K, d)`` float64 estimates of the smoothing spline with each group's own ``lam`` ``(B,)``."""
    mu = torch.arange(decoder.num_workers + 1, dtype=torch.float64) * lam.unsqueeze(-1)  # mu[g, n] = n lam_g
    rows = numba_decode.spline_rows(
        masks.contiguous(), decoder.beta, decoder.alpha, mu, decoder.min_arrived, torch.float64
    )
    return torch.bmm(rows.transpose(1, 2), results.reshape(len(results), decoder.num_workers, -1).double())


def cell_mse(workload, seed: int, k: int, n: int, s: int, args) -> tuple[float, float]:
    """The gap-scaled rule's MSE in one cell, rebuilt as the suite builds it, and the ratio ``r`` it chose."""
    plain = torchgcc.GCC(k, n, lambda_dec=0.0).decoder
    with torch.no_grad():
        results, truth = gcc_results(workload, seed, k, n)
        calibration, masks = cell_masks(seed, n, s, len(results), args)
        knots, counts, compacted, mu = pooled_system(plain, results[: args.calibration_groups], calibration)
        mu = mu * gap_factor(knots, counts, args.power).unsqueeze(-1)
        ratio = pooled_gcv_ratio(
            gcv_scores(knots, counts, compacted, mu), torch.tensor(GCV_RATIOS, dtype=torch.float64)
        )
        survivors = plain.survivors(masks)
        lam = spacing_lambda(survivors.counts, ratio) * gap_factor(survivors.knots, survivors.counts, args.power)
        estimate = decode(plain, measured(results, args), masks, lam)
    target = measured(truth, args)
    return mse(estimate.reshape(target.shape), target), float(ratio)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", type=Path, nargs="+", help="lambda_suite JSONs whose cells to rebuild")
    parser.add_argument("--power", type=float, default=4.0, help="p of the gaps' L_p mean")
    parser.add_argument("--all", action="store_true", help="every cell, not only the default's failing ones")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/lambda_gap_rule.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_before, start = os.getloadavg(), time.perf_counter()
    rows = []
    keep = (lambda record: True) if args.all else (lambda record: record["ratio_to_best"]["default"] > TOLERANCE)
    for path, r, workload in rebuilt_cells(args.suites, args, keep):
        value, ratio = cell_mse(workload, r["seed"], r["K"], r["N"], r["S"], args)
        best = min(r["mse"][rule] for rule in BASELINES)
        row = {"suite": str(path), "workload": r["workload"], "seed": r["seed"], "K": r["K"], "N": r["N"]}
        row |= {"S": r["S"], "gap_rule_ratio": ratio, "gap_rule_ratio_to_best": value / best}
        row |= {"default_ratio_to_best": r["ratio_to_best"]["default"]}
        row |= {"gap_rule_worse_than_bacc": value > r["mse"]["bacc"] and r["mse"]["natural"] <= r["mse"]["bacc"]}
        rows.append(row)
        print(row, flush=True)
    run = {"wall_s": time.perf_counter() - start, "load_average_before": list(load_before)}
    run |= {"load_average_after": list(os.getloadavg()), "threads": torch.get_num_threads(), "torch": torch.__version__}
    config = {"suites": [str(p) for p in args.suites], "power": args.power, "all": args.all, "tolerance": TOLERANCE}
    summary = {
        "cells": len(rows),
        "gap_rule_worst": max(r["gap_rule_ratio_to_best"] for r in rows),
        "gap_rule_failing": sum(r["gap_rule_ratio_to_best"] > TOLERANCE or r["gap_rule_worse_than_bacc"] for r in rows),
        "default_worst": max(r["default_ratio_to_best"] for r in rows),
        "default_failing": sum(r["default_ratio_to_best"] > TOLERANCE for r in rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"config": config, "run": run, "summary": summary, "records": rows}, indent=1))
    print(summary)


if __name__ == "__main__":
    main()
