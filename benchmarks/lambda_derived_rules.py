"""Derived smoothing rules in place of the default's, on every cell of suite JSONs: rules tried and not adopted.

Issue 27 asks for the decoder's smoothing derived rather than tuned. The default
(:mod:`torchgcc.functional.decoder_smoothing`) is GCV pooled over the calibration groups with a gap correction
derived for evenly spaced workers. Each rule here comes from a textbook criterion, with no constant fitted to the
suite, and chooses one bandwidth ratio per cell from the same calibration groups (:data:`RULES`):

- ``loo``: the exact leave-one-out scores (:func:`torchgcc.functional.loo.loo_scores`) in place of GCV's, the
  default's gap correction on them;
- ``loo_interior``: the same over each group's interior knots only: leaving out an end knot extrapolates, which the
  decoder does only beyond the outermost survivors;
- ``measured_gap``: GCV, with the gap correction measured on the calibration masks rather than assumed even: the mean
  gap a left-out interior knot is predicted across (``t_{i+1} - t_{i-1}``) over the mean survivor gap that holds a
  regression point (2 for evenly spaced workers);
- ``gml``: generalized maximum likelihood (Wahba, Ann. Statist. 1985), the smoothing spline's marginal likelihood as a
  Gaussian process with noise, summed over the groups; the posterior mean is the Bayes estimate at every point, the
  regression points included, so no gap correction;
- ``thinning``: two-fold thinning cross-validation: the spline of every other survivor predicts the survivors between
  them, each within one gap of the fit as the regression points are (no gap correction); the mean squared error over
  both folds and the groups, on results normalised per group;
- ``late_results``: the calibration batch's late results (a coordinator can wait for them once): the spline of each
  group's arrived results predicts its stragglers between the outermost arrived workers, the same knots and the same
  gaps as the regression points meet, so no gap correction; the least squared error on results normalised per group.
  It reads worker results only, never the uncoded outputs, and differs from the decoder's task only in where it
  predicts: at the coded points ``beta`` of the late workers, not at the regression points ``alpha``.

Beside the rules, the default as a ``CodedModule`` calibrates it, on its first forward or in ``coded.calibrate(x)``
(``validated``): on the calibration groups' results (every worker's) and their uncoded outputs,
``decoder.calibrate(y, mask, reference=outputs)``: the least smoothing within one standard error of the least
squared error over those groups, each decoded under its own mask and under drawn straggler sets with as many
stragglers (:func:`torchgcc.functional.decoder_smoothing.validated_ratio`). The decoder without a model (GCV alone,
the first call of ``GCC(K, N).decoder``) is ``default_rebuilt``; the suite's own record of it is ``default``. And
references that read more than GCV does (:data:`REFERENCES`):

- ``calibration_oracle``: the candidate whose decode of the calibration groups under their own masks only is closest
  to their uncoded outputs in plain mean squared error: ``validated`` without the drawn straggler sets. Where it
  fails, one straggler set per group does not represent the measured masks;
- ``one_set_shares``: the validation before the drawn sets (commit ed5afb2): one set per group, each group's error as a
  share of its error at interpolation, the least mean share over the groups with a share (two at least, else GCV's
  choice), GCV's choice a candidate;
- ``hindsight``: the candidate with the least MSE on the measured groups themselves: where it fails, no single pooled
  ratio meets the criterion in that cell (the best of natural / spacing / GCV includes GCV's per-group choice).

Every cell of the given ``benchmarks/lambda_suite.py`` JSONs is rebuilt exactly as the suite builds it (workload,
seed, masks, noise, calibration batch), each rule's ratio decoded on the measured groups, and its MSE taken over the
best of natural / spacing / GCV of the suite's record. The default is decoded again beside them (``default_rebuilt``;
the suite's own record is ``default``): the workloads' models round differently on another CPU, which moves the MSE by
about 1e-7 relative in float32 and 1e-4 in bfloat16, and where two candidates' GCV scores are that close, the
default's choice. A cell fails as the suite's criterion says (above ``1.10``, or worse than BACC where natural is
not). Writes JSON (settings, load average, threads, one row per cell, and per suite and rule the worst ratio and the
cells failing)::

    python benchmarks/lambda_derived_rules.py benchmarks/results/lambda_suite_tuning.json \\
        benchmarks/results/lambda_suite_heldout.json benchmarks/results/lambda_suite_unseen.json \\
        benchmarks/results/lambda_suite_fresh.json benchmarks/results/lambda_suite_fresh2.json \\
        benchmarks/results/lambda_suite_fresh3.json benchmarks/results/lambda_suite_fresh4.json \\
        benchmarks/results/lambda_suite_fresh5.json --out benchmarks/results/lambda_derived_rules.json
    python benchmarks/lambda_derived_rules.py benchmarks/results/lambda_suite_heldout_pool1.json \\
        benchmarks/results/lambda_suite_heldout_pool4.json --out benchmarks/results/lambda_derived_rules_pools.json
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
from torchgcc.functional import smoothing_spline_matrix
from torchgcc.functional.decoder_smoothing import informative_groups, pooled_gcv_ratio
from torchgcc.functional.gcv import candidate_systems, dense_systems, gcv_scores
from torchgcc.functional.loo import loo_errors, loo_scores

#: A pooled system: the survivors' knots ``(G, W)``, their counts ``(G,)``, results ``(G, W, d)`` and ``mu`` ``(G, L)``.
System = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Calibration:
    """What a rule may read of a cell's calibration batch: the pooled ``system`` that GCV scores, the decoder's points
    (``alpha`` ``(K,)``, ``beta`` ``(N,)``), and every worker's result ``(G, N, *out)`` with the batch's masks
    ``(G, N)`` (True = arrived in time; the others are the late results, which only ``late_results`` reads)."""

    system: System
    alpha: torch.Tensor
    beta: torch.Tensor
    results: torch.Tensor
    masks: torch.Tensor


CANDIDATES = torch.tensor(GCV_RATIOS, dtype=torch.float64)


def loo(calibration: Calibration) -> float:
    """The default's gap-corrected rule on the exact leave-one-out scores of every knot."""
    return float(pooled_gcv_ratio(loo_scores(*calibration.system), CANDIDATES))


def loo_interior(calibration: Calibration) -> float:
    """The default's gap-corrected rule on the leave-one-out scores of each group's interior knots."""
    knots, counts = calibration.system[0], calibration.system[1]
    index = torch.arange(knots.shape[1])
    interior = (index > 0) & (index < (counts - 1).unsqueeze(-1))  # (G, W)
    errors = loo_errors(*calibration.system) * interior.unsqueeze(1)
    return float(pooled_gcv_ratio(errors.sum(-1) / interior.sum(-1, keepdim=True).clamp_min(1), CANDIDATES))


def measured_gap(calibration: Calibration) -> float:
    """The default's rule on the GCV scores, its gap the mean ``t_{i+1} - t_{i-1}`` over the mean survivor gap that
    holds a point of ``alpha`` (``(K,)``, clamped to the end gaps), in the groups GCV can score."""
    system, alpha = calibration.system, calibration.alpha
    knots, counts = system[0], system[1]
    left_out, holding = [], []
    for row, count in zip(knots, counts.tolist()):
        if count < 4:  # GCV does not depend on the smoothing (informative_groups)
            continue
        t = row[:count]
        left_out.append(t[2:] - t[:-2])
        interval = (torch.searchsorted(t, alpha, right=True) - 1).clamp(0, count - 2)
        holding.append(t[interval + 1] - t[interval])
    if not left_out:
        return 0.0
    gap = torch.cat(left_out).mean() / torch.cat(holding).mean()
    return float(pooled_gcv_ratio(gcv_scores(*system), CANDIDATES, left_out_gap=gap))


def gml(calibration: Calibration) -> float:
    """argmin over the candidates of ``sum_g (n_g - 2) log(tr(Z^T M^-1 Z)) + log det M`` (``Z = Q^T y``, ``M = R +
    mu Q^T Q``: the profile negative log-likelihood up to constants; the padding rows of ``M`` are the identity), over
    the groups whose scores depend on the smoothing (:func:`informative_groups` of their GCV scores: four knots or
    more, results not on a line)."""
    system = calibration.system
    counts = system[1]
    plan, _, _, bands, z = candidate_systems(*system)
    factor = torch.linalg.cholesky(dense_systems(plan, bands))  # (G, L, size, size)
    quadratic = torch.linalg.solve_triangular(factor, z.unsqueeze(1).expand(-1, len(CANDIDATES), -1, -1), upper=False)
    log_det = 2 * torch.diagonal(factor, dim1=-2, dim2=-1).log().sum(-1)
    likelihood = (counts - 2).unsqueeze(-1) * quadratic.pow(2).sum((-2, -1)).log() + log_det  # (G, L)
    informative = informative_groups(gcv_scores(*system))
    return float(CANDIDATES[int(likelihood[informative].sum(0).argmin())]) if informative.any() else 0.0


def thinning(calibration: Calibration) -> float:
    """argmin over the candidates of the squared error of the spline of every other survivor (``spacing_lambda`` of
    its own count) at the survivors between them, summed over both folds and the groups."""
    knots, counts, y, _ = calibration.system
    squared, predicted = torch.zeros(len(CANDIDATES), dtype=torch.float64), 0
    for row, count, data in zip(knots, counts.tolist(), y):
        t, values = row[:count], data[:count].reshape(count, -1)
        values = values / values.norm().clamp_min(torch.finfo(torch.float64).tiny)
        for fold in (0, 1):
            fit = torch.arange(fold, count, 2)
            if len(fit) < 3:  # a fit through two knots is a line whatever the smoothing
                continue
            inside = [i for i in range(count) if i % 2 != fold and t[fit[0]] < t[i] < t[fit[-1]]]
            if not inside:
                continue
            lam = spacing_lambda(len(fit), CANDIDATES)
            points = t[inside]
            weights = smoothing_spline_matrix(t[fit].expand(len(lam), -1), points.expand(len(lam), -1), lam)
            squared += (weights @ values[fit] - values[inside]).pow(2).sum((1, 2))
            predicted += len(inside)
    return float(CANDIDATES[int(squared.argmin())]) if predicted else 0.0


def late_results(calibration: Calibration) -> float:
    """argmin over the candidates of the squared error with which each calibration group's spline of its arrived
    results predicts its late ones, at the late workers between its outermost arrived ones (within a gap of the
    arrived set, as the regression points are), on results normalised per group; the default's ratio (from the
    pooled GCV scores) where no worker is late."""
    masks = calibration.masks
    index = torch.arange(masks.shape[1])
    first = torch.where(masks, index, masks.shape[1]).amin(dim=1, keepdim=True)
    last = torch.where(masks, index, -1).amax(dim=1, keepdim=True)
    late = ~masks & (index > first) & (index < last)  # (G, N)
    if not late.any():
        return float(pooled_gcv_ratio(gcv_scores(*calibration.system), CANDIDATES))
    y = calibration.results.reshape(*masks.shape, -1).double()
    y = y / y.flatten(1).norm(dim=1).clamp_min(torch.finfo(torch.float64).tiny)[:, None, None]
    errors = []
    for ratio in GCV_RATIOS:  # the decoder's spline of the arrived results, evaluated at every worker point
        spline = SplineDecoder(calibration.beta, calibration.beta, lam=None, bandwidth_ratio=ratio, min_arrived=2)
        errors.append(float(((spline(y, masks) - y).pow(2).sum(-1) * late).sum()))
    return GCV_RATIOS[min(range(len(errors)), key=errors.__getitem__)]


#: Every rule: its name and what chooses its ratio from a cell's calibration batch.
RULES: dict[str, Callable[[Calibration], float]] = {
    "loo": loo,
    "loo_interior": loo_interior,
    "measured_gap": measured_gap,
    "gml": gml,
    "thinning": thinning,
    "late_results": late_results,
}


#: The references: choices that read the uncoded outputs (no decoder can), bounds on what one pooled ratio can do.
REFERENCES = ("calibration_oracle", "one_set_shares", "hindsight")


def decoded_mse(
    plain: SplineDecoder, ratio: float, results: torch.Tensor, masks: torch.Tensor, truth: torch.Tensor
) -> float:
    """The MSE against ``truth`` of the spline decode of ``results`` under ``masks`` at bandwidth ``ratio`` (the points
    of ``plain``)."""
    decoder = SplineDecoder(plain.alpha, plain.beta, lam=None, bandwidth_ratio=ratio, min_arrived=2)
    return mse(decoder(results, masks), truth)


def least_error_ratio(plain: SplineDecoder, results: torch.Tensor, masks: torch.Tensor, truth: torch.Tensor) -> float:
    """The candidate of :data:`GCV_RATIOS` whose decode of ``results`` under ``masks`` has the least MSE against
    ``truth`` (the first of equal ones)."""
    errors = [decoded_mse(plain, ratio, results, masks, truth) for ratio in GCV_RATIOS]
    return GCV_RATIOS[min(range(len(errors)), key=errors.__getitem__)]


def one_set_shares(
    plain: SplineDecoder, results: torch.Tensor, masks: torch.Tensor, truth: torch.Tensor, proposed: float
) -> float:
    """The former validation (``one_set_shares`` in the module docstring) among :data:`GCV_RATIOS` and GCV's
    ``proposed`` ratio."""
    candidates = [*GCV_RATIOS, proposed]
    decoders = [SplineDecoder(plain.alpha, plain.beta, lam=None, bandwidth_ratio=r, min_arrived=2) for r in candidates]
    errors = torch.stack(
        [(decoder(results, masks).double() - truth.double()).pow(2).flatten(1).sum(1) for decoder in decoders], dim=1
    )
    counted = errors[:, 0] > 0
    if int(counted.sum()) < 2:
        return proposed
    shares = errors[counted] / errors[counted, :1]
    return candidates[int(shares.mean(0).argmin())]


def cell_rules(workload, record: dict, args) -> dict:
    """One cell, rebuilt as the suite builds it: every rule's ratio and MSE, and the default's MSE recomputed."""
    k, n, s, seed = record["K"], record["N"], record["S"], record["seed"]
    plain = torchgcc.GCC(k, n, lambda_dec=0.0).decoder
    with torch.no_grad():
        results, truth = gcc_results(workload, seed, k, n)
        held = args.calibration_groups
        calibration, masks = cell_masks(seed, n, s, len(results), args)
        ys, target = measured(results, args), measured(truth, args)
        default = torchgcc.GCC(k, n).decoder
        default(results[:held], calibration)
        default_mse = mse(default(ys, masks), target)
        validated = torchgcc.GCC(k, n).decoder  # the default calibrated as a CodedModule does: with the outputs
        validated.calibrate(results[:held], calibration, reference=truth[:held])
        system = pooled_system(plain, results[:held], calibration)
        batch = Calibration(system, plain.alpha, plain.beta, results[:held], calibration)
        chosen = {name: rule(batch) for name, rule in RULES.items()}
        chosen["calibration_oracle"] = least_error_ratio(plain, results[:held], calibration, truth[:held])
        chosen["one_set_shares"] = one_set_shares(
            plain, results[:held], calibration, truth[:held], float(default.ratio)
        )
        chosen["hindsight"] = least_error_ratio(plain, ys, masks, target)
        errors = {name: decoded_mse(plain, ratio, ys, masks, target) for name, ratio in chosen.items()}
    best = min(record["mse"][rule] for rule in BASELINES)
    errors |= {"validated": mse(validated(ys, masks), target), "default_rebuilt": default_mse}
    chosen |= {"validated": validated.ratio.item(), "default_rebuilt": default.ratio.item()}
    fails = {
        name: value / best > TOLERANCE
        or (value > record["mse"]["bacc"] and record["mse"]["natural"] <= record["mse"]["bacc"])
        for name, value in errors.items()
    }
    cell = {key: record[key] for key in ("workload", "seed", "K", "N", "S")}
    return cell | {
        "ratio": chosen,
        "ratio_to_best": {name: value / best for name, value in errors.items()},
        "fails": fails,
        "default_ratio_to_best": record["ratio_to_best"]["default"],
        "default_fails": not record["passes"],
        "default_rebuilt_relative_difference": abs(default_mse / record["mse"]["default"] - 1),
    }


def summarise(rows: list[dict]) -> dict:
    """Per rule, reference (and the default): the worst ratio to the best, its cell, and the cells failing."""
    summary = {}
    for name in [*RULES, *REFERENCES, "validated", "default_rebuilt", "default"]:
        ratio = (
            (lambda r: r["default_ratio_to_best"])
            if name == "default"
            else (lambda r, name=name: r["ratio_to_best"][name])
        )
        failed = (lambda r: r["default_fails"]) if name == "default" else (lambda r, name=name: r["fails"][name])
        worst = max(rows, key=ratio)
        summary[name] = {
            "worst": ratio(worst),
            "worst_cell": [worst[key] for key in ("workload", "seed", "K", "N", "S")],
            "cells_failing": sum(failed(r) for r in rows),
        }
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", type=Path, nargs="+", help="lambda_suite JSONs whose cells to rebuild")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/lambda_derived_rules.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_before, start = os.getloadavg(), time.perf_counter()
    rows = []
    for path, record, workload in rebuilt_cells(args.suites, args, keep=lambda record: True):
        row = {"suite": str(path)} | cell_rules(workload, record, args)
        rows.append(row)
        marks = " ".join(f"{name}={value:.2f}" for name, value in row["ratio_to_best"].items())
        print(
            f"{path.stem} {row['workload']} {row['seed']} K={row['K']} N={row['N']} S={row['S']} {marks}",
            file=sys.stderr,
            flush=True,
        )
    summary = {str(path): summarise([r for r in rows if r["suite"] == str(path)]) for path in args.suites}
    for path, rules in summary.items():
        print(path, {name: (round(v["worst"], 3), v["cells_failing"]) for name, v in rules.items()}, file=sys.stderr)
    run = {"wall_s": time.perf_counter() - start, "load_average_before": list(load_before)}
    run |= {"load_average_after": list(os.getloadavg()), "threads": torch.get_num_threads(), "torch": torch.__version__}
    run |= {"default_rebuilt_max_relative_difference": max(r["default_rebuilt_relative_difference"] for r in rows)}
    config = {"suites": [str(p) for p in args.suites], "tolerance": TOLERANCE, "candidates": list(GCV_RATIOS)}
    config |= {"rules": list(RULES), "references": list(REFERENCES)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"config": config, "run": run, "summary": summary, "records": rows}, indent=1) + "\n"
    )
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
