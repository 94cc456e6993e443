"""CodedModule's encode against a bare ``(N, K)`` matmul, on image inputs, over groups and threads.

For each B in ``--groups`` and thread count in ``--threads``, with K = ``--inputs``, N = ``--workers`` and ``B K``
random float32 images of ``3 x --image-size x --image-size``, it times in one run, interleaved sample by sample:

- ``matmul``: the bare product of the float32 ``(N, K)`` encoding matrix (converted once, outside the timing) with
  the ``(B, K, 3 s s)`` grouped images, the floor of any linear encode;
- ``encode``: what ``CodedModule.forward`` runs before the model, ``code.encoder(group_samples(x, K))`` for the
  ``(B K, 3, s, s)`` batch (the encoder's overflow guard included).

Each sample is as many calls as make the matmul's last ``--min-sample-seconds`` (with
:func:`decode.interleaved_samples`, the order rotating each repeat); medians over ``--repeats`` samples; the ratio is
the median of each sample's ratio to the matmul's of the same repeat (paired). Writes JSON (settings, environment with
the commit and the CPU, the load average before and after each row, every row) after every row. Issue 29's
bound: encode <= 1.5x the matmul at K = 8, N = 32::

    python benchmarks/encode.py --out benchmarks/results/encode.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import torch
from decode import environment, interleaved_samples, paired_ratio, warm_up  # benchmarks/decode.py, beside it

import torchgcc
from torchgcc.coded_module import group_samples
from torchgcc.timing import make_timer

#: Issue 29's bound on encode / matmul.
TARGET = 1.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=8, help="K")
    parser.add_argument("--workers", type=int, default=32, help="N")
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 4, 16], help="B values")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--min-sample-seconds", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/encode/encode.json"))
    args = parser.parse_args()
    code = torchgcc.GCC(args.inputs, args.workers)
    matrix = code.encoder.matrix.float()
    report = {
        "settings": {key: value for key, value in vars(args).items() if key != "out"},
        "environment": environment(),
        "target": TARGET,
        "rows": [],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    timer = make_timer("cpu")
    for groups in args.groups:
        generator = torch.Generator().manual_seed(args.seed)
        x = torch.randn(groups * args.inputs, 3, args.image_size, args.image_size, generator=generator)
        grouped = group_samples(x, args.inputs).reshape(groups, args.inputs, -1)
        calls = {
            "matmul": lambda i, grouped=grouped: matrix @ grouped,
            "encode": lambda i, x=x: code.encoder(group_samples(x, args.inputs)),
        }
        for threads in args.threads:
            torch.set_num_threads(threads)
            load_before = os.getloadavg()
            _, inner = warm_up(calls, timer, "matmul", args.min_sample_seconds)
            times = interleaved_samples(calls, timer, inner, args.repeats)
            ratio = paired_ratio(times["encode"], times["matmul"])
            row = {
                "B": groups,
                "threads": threads,
                "calls_per_sample": inner,
                "median_seconds": {name: statistics.median(values) for name, values in times.items()},
                "encode_over_matmul": ratio,
                "passes": ratio <= TARGET,
                "load_average_before": load_before,
                "load_average_after": os.getloadavg(),
            }
            report["rows"].append(row)
            args.out.write_text(json.dumps(report, indent=2))
            print(
                f"B={groups:3d} threads={threads} matmul {1e3 * row['median_seconds']['matmul']:.2f} ms, "
                f"encode {ratio:.2f}x | load {row['load_average_after'][0]:.1f}",
                flush=True,
            )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
