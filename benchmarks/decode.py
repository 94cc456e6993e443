"""Decode cost against a bare ``torch.bmm``: every decode rule, fresh masks, over batch sizes and numbers of workers.

For each N in ``--workers``, B in ``--groups`` and mask kind (``fixed``: S = N / 4 stragglers at random places, one
survivor count; ``bernoulli``: each worker straggles with probability ``--p``, many survivor counts), with K =
``--inputs`` and ``--outputs`` results per worker (fewer where B N d would pass ``--max-elements``; the row says), it
measures in one run, interleaved repeat by repeat (the order rotating, so that no call always runs first) so that
load and cache effects hit all alike:

- ``bmm``: the bare ``torch.bmm`` of ``(B, K, N)`` matrices with ``(B, N, d)`` results, the floor of any linear decode;
- ``default``: ``GCC(K, N)`` (``lambda_dec="adaptive"``), calibrated beforehand on one batch: the steady state, its
  matrices built from each fresh mask in the call (nothing is cached between calls);
- ``default_first_call``: the calibrating first call of a fresh default decoder (pooled GCV, then the decode);
- ``spacing`` and ``natural`` (``lambda_dec=0``): mask-only rules, each call building its matrices;
- ``spacing_torch``: the spacing rule on the batched torch path (``backend="torch"``: what ``torch.compile`` traces,
  and every device without a kernel), beside the default backend the others use (numba on CPU, Triton on CUDA;
  the row's ``backend`` says which ran);
- per call, with one ``torch.profiler`` pass each: aten ops and host reads (``_local_scalar_dense``, ``nonzero``,
  ``unique``), with the default ``check=True`` and with ``check=False``.

Times are medians over ``--repeats`` repeats (at most ``--large-repeats`` where N > 256: a call costs seconds
there); ratios are medians of each repeat's own ratio to its bmm (paired: on a shared machine a slow spell that
lasts some calls hits the bmm and the decode of one repeat alike). Writes JSON (settings, seeds, the load average
before and after, threads, environment, every row) to ``--out`` and prints the rows. The acceptance settings of
issue 17 are the row N = 64, B = 512 (``--threads 2``: default <= 2.5x and spacing <= 1.5x the bmm, for both mask
kinds)::

    python benchmarks/decode.py --threads 2 --out benchmarks/results/decode.json
    python benchmarks/decode.py --quick                  # N = 32, 64 only, fewer repeats
    python benchmarks/decode.py --device cuda            # on a GPU (the fused kernel where available)
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
from pathlib import Path

import torch
from torch.profiler import profile

import torchgcc
from torchgcc.stragglers import BernoulliStragglers, FixedStragglers
from torchgcc.timing import make_timer

#: Profiler events that read device memory back to the host.
READS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::unique", "aten::_unique2", "aten::unique_consecutive"}
#: Each timed decoder: its ``lambda_dec`` and ``backend``.
RULES = {
    "default": ("adaptive", "auto"),
    "spacing": ("spacing", "auto"),
    "natural": (0.0, "auto"),
    "spacing_torch": ("spacing", "torch"),
}
#: Issue 17's targets at N = 64, B = 512: time against the bmm, and aten ops per call.
TARGETS = {"default_over_bmm": 2.5, "spacing_over_bmm": 1.5, "ops": 300}


def ops_and_reads(fn) -> dict[str, int]:
    """Aten ops and host reads of one call of ``fn`` (after a warm-up call)."""
    fn()
    with profile() as recorded:
        fn()
    names = [event.name for event in recorded.events() if event.name.startswith("aten::")]
    return {"ops": len(names), "reads": sum(name in READS for name in names)}


def mask_sampler(kind: str, num_workers: int, p: float, seed: int):
    if kind == "fixed":
        return FixedStragglers(num_workers // 4, seed=seed)
    return BernoulliStragglers(p, seed=seed, min_arrived=2)


def measure_row(args, num_workers: int, groups: int, kind: str, device: torch.device) -> dict:
    """One row: the timings and counts of every rule at (N, B, mask kind)."""
    k = args.inputs
    outputs = max(1, min(args.outputs, args.max_elements // (groups * num_workers)))
    generator = torch.Generator().manual_seed(args.seed)
    y = torch.randn(groups, num_workers, outputs, generator=generator).to(device)
    matrices = torch.randn(groups, k, num_workers, generator=generator).to(device)
    sampler = mask_sampler(kind, num_workers, args.p, args.seed)
    repeats = args.repeats if num_workers <= 256 else min(args.repeats, args.large_repeats)
    masks = [sampler.sample(groups, num_workers).to(device) for _ in range(repeats + 1)]
    codes = {
        name: torchgcc.GCC(k, num_workers, lambda_dec=rule, backend=backend).to(device)
        for name, (rule, backend) in RULES.items()
    }
    codes["default"].decoder(y, masks[0])  # calibrate on one batch: later calls are the steady state
    timer = make_timer(device)
    times: dict[str, list[float]] = {name: [] for name in ("bmm", *RULES, "default_first_call")}
    for repeat, mask in enumerate(masks[1:]):  # interleaved, a fresh mask each repeat
        calls = {"bmm": lambda: torch.bmm(matrices, y)}
        calls.update({name: lambda code=code, mask=mask: code.decoder(y, mask) for name, code in codes.items()})
        fresh = torchgcc.GCC(k, num_workers).to(device)
        calls["default_first_call"] = lambda fresh=fresh, mask=mask: fresh.decoder(y, mask)
        order = list(calls)
        for name in order[repeat % len(order) :] + order[: repeat % len(order)]:  # each call first in turn
            times[name].append(timer.time_once(calls[name]))
    median = {name: statistics.median(values) for name, values in times.items()}
    counts = {}
    for name, (rule, backend) in RULES.items():
        for check in (True, False):
            code = torchgcc.GCC(k, num_workers, lambda_dec=rule, backend=backend, check=check).to(device)
            code.decoder(y, masks[0])
            counts[f"{name}{'' if check else '_check_false'}"] = ops_and_reads(
                lambda code=code: code.decoder(y, masks[1])
            )
    return {
        "N": num_workers,
        "B": groups,
        "masks": kind,
        "backend": codes["spacing"].decoder.kernel_backend(device),
        "outputs": outputs,
        "repeats": repeats,
        "distinct_survivor_counts": len(torch.unique(torch.stack(masks[1:]).sum(-1))),
        "median_seconds": median,
        "over_bmm": {  # paired: the calls of one repeat run back to back, so a slow spell of the machine hits both
            name: statistics.median(value / bmm for value, bmm in zip(values, times["bmm"]))
            for name, values in times.items()
            if name != "bmm"
        },
        "per_call": counts,
        "calibrated_ratio": float(codes["default"].decoder.ratio),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--inputs", type=int, default=16, help="K")
    parser.add_argument("--workers", type=int, nargs="+", default=[32, 64, 256, 1024, 4096], help="N values")
    parser.add_argument("--groups", type=int, nargs="+", default=[8, 512], help="B values")
    parser.add_argument("--outputs", type=int, default=1000, help="results per worker d")
    parser.add_argument("--max-elements", type=int, default=2**27, help="cap on B N d (d is lowered to fit)")
    parser.add_argument("--p", type=float, default=0.25, help="straggling probability of the Bernoulli masks")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--large-repeats", type=int, default=3, help="repeats where N > 256")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="N = 32, 64 only, 3 repeats")
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/decode/decode.json"))
    args = parser.parse_args()
    if args.quick:
        args.workers, args.repeats = [n for n in args.workers if n <= 64] or [32, 64], 3
    if (
        args.repeats < 1
        or args.large_repeats < 1
        or min(args.workers) < 2
        or min(args.groups) < 1
        or not 0 <= args.p < 1
    ):
        parser.error("need --repeats >= 1, --workers >= 2, --groups >= 1 and 0 <= --p < 1")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    load_before = os.getloadavg()
    rows = []
    for num_workers in args.workers:
        for groups in args.groups:
            for kind in ("fixed", "bernoulli"):
                row = measure_row(args, num_workers, groups, kind, device)
                rows.append(row)
                ratios = ", ".join(f"{name} {value:.2f}x" for name, value in row["over_bmm"].items())
                ops = row["per_call"]
                print(
                    f"N={num_workers:5d} B={groups:4d} {kind:9s} d={row['outputs']:4d} bmm "
                    f"{1e3 * row['median_seconds']['bmm']:8.2f} ms | {ratios} | ops {ops['default']['ops']} "
                    f"(reads {ops['default']['reads']}, unchecked {ops['default_check_false']['reads']})",
                    flush=True,
                )
    acceptance = [row for row in rows if row["N"] == 64 and row["B"] == 512]
    report = {
        "settings": {key: value for key, value in vars(args).items() if key != "out"},
        "environment": {
            "torch": torch.__version__,
            "numba": importlib.metadata.version("numba") if torchgcc.codes.maps.numba_available() else None,
            "python": platform.python_version(),
            "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
            "threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
        "rows": rows,
        "targets": TARGETS,
        "acceptance": {
            row["masks"]: {
                "default_over_bmm": row["over_bmm"]["default"],
                "spacing_over_bmm": row["over_bmm"]["spacing"],
                "default_passes": row["over_bmm"]["default"] <= TARGETS["default_over_bmm"],
                "spacing_passes": row["over_bmm"]["spacing"] <= TARGETS["spacing_over_bmm"],
                "ops_pass": all(count["ops"] <= TARGETS["ops"] for count in row["per_call"].values()),
            }
            for row in acceptance
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
