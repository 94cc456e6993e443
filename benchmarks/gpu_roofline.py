"""The expected H200 time of a CUDA decode (Triton rows kernel, then the product kernel) against a bare ``torch.bmm``,
from a roofline: written down before any GPU run, so that the first one (``benchmarks/gpu_check.sh``) can be judged.

- The bmm and the product kernel are bound by memory: the bytes they move (results read, estimates written,
  matrices read; the product kernel reads the float64 rows, the bmm float32 matrices) over the bandwidth: the
  H200's specification (:data:`HBM_SPEC`) and what a device-to-device copy reached on this workplace's H200
  (:data:`HBM_COPY`, its device notes); the product kernel at :data:`PRODUCT_EFFICIENCY` of the copy's rate.
- The rows kernel is bound by latency: every group's recurrences run one step after another, all groups at once
  (B / 2 one-warp programs fit on the 132 multiprocessors in one wave for the B here): the forward sweep's
  ``n - 2`` steps each wait for one float64 division on the dependent chain (:data:`FORWARD_CYCLES`), the backward
  sweep's ``n`` steps for a load from L2 unless the compiler pipelines it (:data:`BACKWARD_CYCLES`), at the boost
  clock (:data:`CLOCK`); plus the launches (:data:`LAUNCH`).

Every constant is an assumption stated here (a range: low, high), not a measurement of ours. Writes JSON::

    python benchmarks/gpu_roofline.py --out benchmarks/results/gpu_roofline.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

#: Bytes per second: the H200's HBM3e specification, and a device-to-device copy on this workplace's H200.
HBM_SPEC = 4.8e12
HBM_COPY = 4.3e12
#: The product kernel's share of the copy's rate (untuned tiles).
PRODUCT_EFFICIENCY = (0.80, 0.95)
#: Cycles per forward step (a float64 division and a few FMAs on the dependent chain) and per backward step (an L2
#: load, from pipelined to not), and the boost clock in Hz.
FORWARD_CYCLES = (100, 150)
BACKWARD_CYCLES = (60, 300)
CLOCK = 1.98e9
#: Seconds per kernel launch (two launches per decode).
LAUNCH = (3e-6, 5e-6)


def roofline(groups: int, workers: int, points: int, outputs: int, stragglers: int) -> dict:
    """Expected seconds (low, high) of the bmm, the product kernel, the rows kernel and the decode."""
    results = groups * workers * outputs * 4
    estimates = groups * points * outputs * 4
    bmm_bytes = results + estimates + groups * points * workers * 4
    product_bytes = results + estimates + groups * points * workers * 8
    survivors = workers - stragglers
    bmm = (bmm_bytes / HBM_SPEC, bmm_bytes / HBM_COPY)
    product = tuple(product_bytes / (HBM_COPY * share) for share in reversed(PRODUCT_EFFICIENCY))
    rows = tuple(
        ((survivors - 2) * forward + survivors * backward) / CLOCK + launch
        for forward, backward, launch in zip(FORWARD_CYCLES, BACKWARD_CYCLES, LAUNCH)
    )
    decode = tuple(p + r + launch for p, r, launch in zip(product, rows, LAUNCH))
    return {
        "bmm_bytes": bmm_bytes,
        "product_bytes": product_bytes,
        "bmm_seconds": bmm,
        "product_seconds": product,
        "rows_seconds": rows,
        "decode_seconds": decode,
        "decode_over_bmm": (decode[0] / bmm[1], decode[1] / bmm[0]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=512, help="B")
    parser.add_argument("--workers", type=int, default=64, help="N")
    parser.add_argument("--inputs", type=int, default=16, help="K")
    parser.add_argument("--outputs", type=int, default=1000, help="d")
    parser.add_argument("--stragglers", type=int, default=16, help="S")
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/gpu-roofline.json"))
    args = parser.parse_args()
    report = {
        "settings": {key: value for key, value in vars(args).items() if key != "out"},
        "assumptions": {
            "hbm_spec_bytes_per_second": HBM_SPEC,
            "hbm_copy_bytes_per_second": HBM_COPY,
            "product_efficiency": PRODUCT_EFFICIENCY,
            "forward_cycles_per_step": FORWARD_CYCLES,
            "backward_cycles_per_step": BACKWARD_CYCLES,
            "clock_hz": CLOCK,
            "launch_seconds": LAUNCH,
        },
        **roofline(args.groups, args.workers, args.inputs, args.outputs, args.stragglers),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    (low, high), (fewest, most) = report["decode_seconds"], report["decode_over_bmm"]
    print(f"decode {1e6 * low:.0f}-{1e6 * high:.0f} us, {fewest:.2f}-{most:.2f}x the bmm")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
