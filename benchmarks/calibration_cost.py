"""The one-time cost of the default decoder's calibration: validated (a ``CodedModule``'s first forward) against GCV
alone, beside one decode of the calibrated decoder.

For each (K, N, S) of :data:`SETTINGS` and d in ``--outputs``, on ``--groups`` groups (16: the pool) of float64
results ``(B, N, d)`` with S stragglers at random places and the groups' uncoded outputs ``(B, K, d)`` (random
Gaussian data: the cost does not depend on the values), it times, interleaved sample by sample so that load hits all
three alike:

- ``validated``: ``GCC(K, N).decoder.calibrate(y, mask, reference=outputs)``: GCV's scores, then every candidate
  decoding each group under its own straggler set and the drawn ones
  (:data:`torchgcc.functional.decoder_smoothing.VALIDATION_DRAWS`), the one-standard-error choice;
- ``gcv_alone``: ``GCC(K, N).decoder.calibrate(y, mask)`` (a decoder without its model);
- ``decode``: one call of the calibrated decoder on the same batch (the steady state every later call pays).

A fresh decoder per sample (a calibration runs once per decoder). Times are medians over ``--repeats`` samples after
one warm-up call of each (numba compiles its kernels on first use); ``validated_over_gcv`` is the median of each
sample's own ratio. The model's own share of a first forward (its run on the pooled groups' K samples and N coded
inputs) is not here: it is the model's cost. Writes JSON (settings, seeds, load average before and after, threads,
one row per setting) and prints a row per setting::

    python benchmarks/calibration_cost.py --out benchmarks/results/calibration_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import torch

import torchgcc
from torchgcc.functional.decoder_smoothing import VALIDATION_DRAWS
from torchgcc.stragglers import FixedStragglers

#: (K, N, S): the suite's settings, S about N / 4 and at N - K.
SETTINGS = [(4, 8, 2), (4, 8, 4), (8, 16, 4), (8, 16, 8), (8, 32, 8), (8, 32, 16), (10, 40, 10), (16, 64, 16)]


def seconds(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure(k: int, n: int, s: int, d: int, args: argparse.Namespace) -> dict:
    """One setting's medians and paired ratio (module docstring)."""
    generator = torch.Generator().manual_seed(args.seed)
    y = torch.randn(args.groups, n, d, generator=generator, dtype=torch.float64)
    outputs = torch.randn(args.groups, k, d, generator=generator, dtype=torch.float64)
    mask = FixedStragglers(s, seed=args.seed).sample(args.groups, n)
    calibrated = torchgcc.GCC(k, n).decoder
    calibrated.calibrate(y, mask, reference=outputs)  # warm-up: numba compiles on first use
    torchgcc.GCC(k, n).decoder.calibrate(y, mask)
    calibrated(y, mask)
    validated, gcv, decode = [], [], []
    for _ in range(args.repeats):
        validated.append(seconds(lambda: torchgcc.GCC(k, n).decoder.calibrate(y, mask, reference=outputs)))
        gcv.append(seconds(lambda: torchgcc.GCC(k, n).decoder.calibrate(y, mask)))
        decode.append(seconds(lambda: calibrated(y, mask)))
    return {"K": k, "N": n, "S": s, "d": d, "groups": args.groups} | {
        "validated_s": statistics.median(validated),
        "gcv_alone_s": statistics.median(gcv),
        "decode_s": statistics.median(decode),
        "validated_over_gcv": statistics.median(v / g for v, g in zip(validated, gcv)),
    }


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outputs", type=lambda text: [int(x) for x in text.split(",")], default=[10, 1000])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/calibration_cost.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    rows = []
    for k, n, s in SETTINGS:
        for d in args.outputs:
            row = measure(k, n, s, d, args)
            rows.append(row)
            print(
                f"K={k:2d} N={n:2d} S={s:2d} d={d:4d}  validated {1e3 * row['validated_s']:7.1f} ms  GCV alone "
                f"{1e3 * row['gcv_alone_s']:6.1f} ms  ({row['validated_over_gcv']:.1f}x)  decode "
                f"{1e3 * row['decode_s']:6.2f} ms",
                file=sys.stderr,
                flush=True,
            )
    config = {key: value for key, value in vars(args).items() if key != "out"} | {"settings": SETTINGS}
    config |= {"validation_draws": VALIDATION_DRAWS}
    run = {"load_average_before": list(load_before), "load_average_after": list(os.getloadavg())}
    run |= {"threads": torch.get_num_threads(), "torch": torch.__version__}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"config": config, "run": run, "records": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
