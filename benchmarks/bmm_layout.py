"""What the layout of the decode matrices costs a CPU bmm: the kernels' rows, read transposed, against contiguous
matrices.

The CPU kernels (:mod:`torchgcc.functional.numba_decode`) write each group's weights worker by worker, ``(B, N, K)``
rows, and the decoder multiplies their transposed view (``(B, K, N)``, strides ``(N K, 1, K)``) with the ``(B, N, d)``
results. Writing the matrices contiguous instead would cost the kernel a transpose per group; this measures what the
bmm would gain. For each (N, B, d) and thread count it times, interleaved sample by sample (the order rotating):

- ``contiguous``: ``torch.bmm`` of contiguous ``(B, K, N)`` float32 matrices with the results;
- ``rows_transposed``: the same product with the matrices in the kernels' layout;
- ``copy_then_bmm``: ``rows.transpose(1, 2).contiguous()`` and then the product (torch's own transposing copy).

Medians of ``--repeats`` samples, each the mean of enough calls to last ``--min-sample-seconds``; ratios are
paired (the median of each sample's ratio to the ``contiguous`` sample of the same repeat). Shapes whose results
exceed ``--max-elements`` are skipped. Writes JSON (settings, environment with the CPU's name and vector extensions,
the load average before and after each row, every row) after every row::

    python benchmarks/bmm_layout.py --out benchmarks/results/bmm_layout.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from decode import environment, interleaved_samples, paired_ratio, warm_up  # benchmarks/decode.py, beside it

from torchgcc.timing import make_timer


def measure(num_workers: int, groups: int, outputs: int, args: argparse.Namespace) -> list[dict]:
    """The rows of one (N, B, d), one per thread count."""
    generator = torch.Generator().manual_seed(args.seed)
    results = torch.randn(groups, num_workers, outputs, generator=generator)
    rows = torch.randn(groups, num_workers, args.inputs, generator=generator)
    transposed = rows.transpose(1, 2)
    contiguous = transposed.contiguous()
    calls = {
        "contiguous": lambda i: torch.bmm(contiguous, results),
        "rows_transposed": lambda i: torch.bmm(transposed, results),
        "copy_then_bmm": lambda i: torch.bmm(transposed.contiguous(), results),
    }
    timer = make_timer("cpu")
    out = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        load_before = os.getloadavg()
        _, inner = warm_up(calls, timer, "contiguous", args.min_sample_seconds)
        times = interleaved_samples(calls, timer, inner, args.repeats)
        out.append(
            {
                "N": num_workers,
                "B": groups,
                "d": outputs,
                "threads": threads,
                "inner": inner,
                "median_seconds": {name: statistics.median(values) for name, values in times.items()},
                "over_contiguous": {name: paired_ratio(values, times["contiguous"]) for name, values in times.items()},
                "load_average_before": load_before,
                "load_average_after": os.getloadavg(),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=16, help="K")
    parser.add_argument("--workers", type=int, nargs="+", default=[64, 1024], help="N values")
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 8, 64, 512], help="B values")
    parser.add_argument("--outputs", type=int, nargs="+", default=[10, 1000], help="d values")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--min-sample-seconds", type=float, default=0.01)
    parser.add_argument("--max-elements", type=int, default=70_000_000, help="skip results larger than this")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/bmm_layout/bmm_layout.json"))
    args = parser.parse_args()
    report = {
        "settings": {key: value for key, value in vars(args).items() if key != "out"},
        "environment": environment() | {"mkldnn": torch.backends.mkldnn.is_available()},
        "rows": [],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for num_workers in args.workers:
        for groups in args.groups:
            for outputs in args.outputs:
                if groups * num_workers * outputs > args.max_elements:
                    continue
                for row in measure(num_workers, groups, outputs, args):
                    report["rows"].append(row)
                    ratios = ", ".join(f"{name} {value:.2f}x" for name, value in row["over_contiguous"].items())
                    print(
                        f"N={num_workers:5d} B={groups:4d} d={outputs:5d} threads={row['threads']} contiguous "
                        f"{1e3 * row['median_seconds']['contiguous']:8.3f} ms | {ratios}",
                        flush=True,
                    )
                    report["environment"]["seconds"] = time.perf_counter() - started
                    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
