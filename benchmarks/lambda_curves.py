"""Why the default smoothing misses where it misses, and what exact leave-one-out would do, in the cells of suite JSONs.

Every cell of the given ``benchmarks/lambda_suite.py`` JSONs is rebuilt exactly as the suite builds it (same
workload, seed, masks, noise and calibration batch) and decoded with the leave-one-out rule: the default's rule
(:func:`~torchgcc.functional.decoder_smoothing.pooled_gcv_ratio`, the minimiser divided by ``2^(1 - rho)``) applied to
the exact leave-one-out scores (:func:`torchgcc.functional.loo.loo_scores`) of the same calibration groups in place of
the GCV scores; its MSE over the best of natural / spacing / GCV of the suite's record (``loo_rule``, one row per
cell, and ``summary`` per suite against the default's). In the cells where the default is above the tolerance
(``records``) also: the decoder's MSE for every candidate ratio of :data:`torchgcc.codes.gcc.GCV_RATIOS` (one ratio
for every group), with the workload's noise and without it; the best ratio; the default's choice and the pooled GCV
and leave-one-out curves it and the leave-one-out rule were chosen from (minimisers, the share ``gcv_removed`` that
smoothing removes from GCV's). Writes JSON (settings, load average, threads):

    python benchmarks/lambda_curves.py benchmarks/results/lambda_suite_heldout.json \\
        benchmarks/results/lambda_suite_tuning.json benchmarks/results/lambda_suite_unseen.json \\
        --out benchmarks/results/lambda_curves.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from lambda_suite import (  # benchmarks/lambda_suite.py, beside this script
    BASELINES,
    TOLERANCE,
    Workload,
    cell_masks,
    gcc_results,
    measured,
    mse,
    pooled_system,
    rebuilt_cells,
)

import torchgcc
from torchgcc.codes.gcc import GCV_RATIOS, SplineDecoder, spacing_lambda
from torchgcc.functional.decoder_smoothing import informative_groups, pooled_gcv_ratio
from torchgcc.functional.gcv import gcv_scores
from torchgcc.functional.loo import loo_scores


def pooled_curves(decoder: SplineDecoder, results: torch.Tensor, masks: torch.Tensor) -> dict[str, list[float]]:
    """The GCV and leave-one-out scores of the candidates, averaged over the informative groups the default pools,
    each relative to its value at interpolation; and ``loo_rule``: the default's rule
    (:func:`~torchgcc.functional.decoder_smoothing.pooled_gcv_ratio`) applied to the leave-one-out scores."""
    knots, counts, compacted, mu = pooled_system(decoder, results, masks)
    ratios = torch.tensor(GCV_RATIOS, dtype=torch.float64)
    curves = {}
    for name, score in (("gcv", gcv_scores), ("loo", loo_scores)):
        scores = score(knots, counts, compacted, mu)
        mean = scores[informative_groups(scores)].mean(0)
        curves[name] = (mean / mean[0]).tolist()
    curves["loo_rule"] = [pooled_gcv_ratio(scores, ratios).item()]  # scores: the leave-one-out ones
    return curves


def cell_curves(workload: Workload, name: str, seed: int, k: int, n: int, s: int, args, *, curves: bool) -> dict:
    """One cell of the suite, rebuilt as :func:`benchmarks.lambda_suite.measure_cell` builds it: the MSE of the
    leave-one-out rule, and with ``curves`` every candidate ratio's MSE with and without the noise."""
    exact = Workload(workload.workers, workload.reference, workload.inputs, workload.family, 0.0)
    plain = torchgcc.GCC(k, n, lambda_dec=0.0).decoder
    with torch.no_grad():
        noisy, truth = gcc_results(workload, seed, k, n)
        held = args.calibration_groups
        calibration, masks = cell_masks(seed, n, s, len(noisy), args)
        default = torchgcc.GCC(k, n).decoder
        default(noisy[:held], calibration)
        target = measured(truth, args)
        scores = pooled_curves(plain, noisy[:held], calibration)
        loo_rule = scores.pop("loo_rule")[0]
        decoder = SplineDecoder(plain.alpha, plain.beta, lam=spacing_lambda(n - s, loo_rule), min_arrived=2)
        loo_rule_mse = mse(decoder(measured(noisy, args), masks), target)
        default_ratio = default.ratio.item()
        if not curves:
            cell = {"workload": name, "seed": seed, "K": k, "N": n, "S": s, "default_ratio": default_ratio}
            return cell | {"loo_rule_ratio": loo_rule, "loo_rule_mse": loo_rule_mse}
        clean, _ = gcc_results(exact, seed, k, n)
        curve, curve_exact = [], []
        for ratio in GCV_RATIOS:
            decoder = SplineDecoder(plain.alpha, plain.beta, lam=spacing_lambda(n - s, ratio), min_arrived=2)
            curve.append(mse(decoder(measured(noisy, args), masks), target))
            curve_exact.append(mse(decoder(measured(clean, args), masks), target))
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
        "default_ratio": default_ratio,
        "gcv_minimiser": minimiser["gcv"],
        "gcv_removed": 1 - min(scores["gcv"]),
        "loo_minimiser": minimiser["loo"],
        "pooled_gcv": scores["gcv"],
        "pooled_loo": scores["loo"],
        "loo_rule_ratio": loo_rule,
        "loo_rule_mse": loo_rule_mse,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", type=Path, nargs="+", help="lambda_suite JSONs whose cells to rebuild")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/lambda_curves.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_before, start = os.getloadavg(), time.perf_counter()
    rows, everywhere, summary = [], [], {}
    for path, r, workload in rebuilt_cells(args.suites, args, keep=lambda record: True):
        failing = r["ratio_to_best"]["default"] > TOLERANCE
        row = cell_curves(workload, r["workload"], r["seed"], r["K"], r["N"], r["S"], args, curves=failing)
        best = min(r["mse"][rule] for rule in BASELINES)
        fails_bacc = row["loo_rule_mse"] > r["mse"]["bacc"] and r["mse"]["natural"] <= r["mse"]["bacc"]
        row |= {"suite": str(path), "default_ratio_to_best": r["ratio_to_best"]["default"]}
        row |= {"loo_rule_ratio_to_best": row["loo_rule_mse"] / best, "loo_rule_worse_than_bacc": fails_bacc}
        everywhere.append(
            {
                key: value
                for key, value in row.items()
                if key not in ("ratios", "mse", "mse_without_noise", "pooled_gcv", "pooled_loo")
            }
        )
        if failing:
            rows.append(row)
            print(
                f"{r['workload']} {r['seed']} K={r['K']} N={r['N']} S={r['S']}: best r {row['best_ratio']}, "
                f"default {row['default_ratio']:.3f}, GCV r* {row['gcv_minimiser']}, LOO r* {row['loo_minimiser']}",
                file=sys.stderr,
                flush=True,
            )
    for path in args.suites:
        suite = json.loads(path.read_text())
        mine = [r for r in everywhere if r["suite"] == str(path)]
        worst = max(mine, key=lambda r: r["loo_rule_ratio_to_best"])
        summary[str(path)] = {
            "cells": len(mine),
            "loo_rule_worst": worst["loo_rule_ratio_to_best"],
            "loo_rule_worst_cell": [worst[key] for key in ("workload", "seed", "K", "N", "S")],
            "loo_rule_cells_failing": sum(
                r["loo_rule_ratio_to_best"] > TOLERANCE or r["loo_rule_worse_than_bacc"] for r in mine
            ),
            "default_worst": suite["summary"]["worst"]["default"]["ratio"],
            "default_cells_failing": suite["summary"]["cells_failing"]["default"],
        }
        print(f"{path}: {summary[str(path)]}", file=sys.stderr, flush=True)
    run = {"wall_s": time.perf_counter() - start, "load_average_before": list(load_before)}
    run |= {"load_average_after": list(os.getloadavg()), "threads": torch.get_num_threads(), "torch": torch.__version__}
    config = {"suites": [str(p) for p in args.suites], "tolerance": TOLERANCE, "candidates": list(GCV_RATIOS)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"config": config, "run": run, "summary": summary, "records": rows, "loo_rule": everywhere}
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
