"""The fused Triton decode kernels (``backend="triton"``) against the batched torch path, on the acceptance grid.

For every N, one seeded random mask per straggler count 0..N-2 (GCC, lambda = 0, 1e-6 and the spacing rule) and
0..N-1 (BACC), compares ``decoder.decode_matrix(masks)`` of the two backends (float64; the torch reference on the
CPU) and reports the largest absolute difference against the tolerance. On the CPU the kernels run in Triton's
interpreter (``TRITON_INTERPRET=1`` is set before torchgcc loads them; about a minute at N = 64). Writes JSON.

    python benchmarks/fused_kernel_check.py                                   # CPU interpreter, N = 8, 33, 64
    python benchmarks/fused_kernel_check.py --device cuda --workers 8 33 64 1024
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

DECODERS = {  # name -> (code, keyword arguments, tolerance, most stragglers as N - this)
    "gcc_lambda_0": ("gcc", {"lambda_dec": 0.0}, 1e-12, 2),
    "gcc_lambda_1e-6": ("gcc", {"lambda_dec": 1e-6}, 1e-12, 2),
    "gcc_spacing": ("gcc", {"lambda_dec": "spacing"}, 1e-12, 2),
    "bacc": ("bacc", {}, 1e-13, 1),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu (Triton interpreter) or cuda")
    parser.add_argument("--workers", type=int, nargs="+", default=[8, 33, 64], help="values of N")
    parser.add_argument("--num-inputs", type=int, default=None, help="K (default N // 4, at least 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/fused-kernel/results.json"))
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are defined

    import torch
    import triton

    import torchgcc

    device = torch.device(args.device)
    rows = []
    for num_workers in args.workers:
        num_inputs = args.num_inputs or max(num_workers // 4, 2)
        generator = torch.Generator().manual_seed(args.seed + num_workers)
        for name, (code_name, options, tolerance, keep) in DECODERS.items():
            counts = range(num_workers - keep + 1)  # straggler counts 0 .. N - keep
            masks = torch.stack([torch.randperm(num_workers, generator=generator) >= s for s in counts])
            reference = torchgcc.make_code(
                code_name, num_inputs=num_inputs, num_workers=num_workers, backend="torch", **options
            )
            fused = torchgcc.make_code(
                code_name, num_inputs=num_inputs, num_workers=num_workers, backend="triton", **options
            )
            fused = fused.to(device)
            start = time.perf_counter()
            got = fused.decoder.decode_matrix(masks.to(device)).cpu()
            seconds = time.perf_counter() - start
            difference = float((got - reference.decoder.decode_matrix(masks)).abs().max())
            rows.append(
                {
                    "N": num_workers,
                    "K": num_inputs,
                    "decoder": name,
                    "masks": len(masks),
                    "stragglers": f"0..{num_workers - keep}",
                    "max_abs_difference": difference,
                    "tolerance": tolerance,
                    "ok": difference <= tolerance,
                    "seconds": seconds,
                }
            )
            print(
                f"N={num_workers:<5} K={num_inputs:<3} {name:<16} max |triton - torch| = {difference:.2e} "
                f"(tolerance {tolerance:.0e}) {'ok' if difference <= tolerance else 'FAILED'}  {seconds:.2f} s"
            )
    result = {
        "settings": {
            "device": str(device),
            "interpreted": args.device == "cpu",
            "workers": args.workers,
            "num_inputs": args.num_inputs or "N // 4 (at least 2)",
            "seed": args.seed,
            "masks": "one random mask per straggler count, torch.randperm with a seeded generator",
        },
        "environment": {
            "torch": torch.__version__,
            "triton": triton.__version__,
            "python": platform.python_version(),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine(),
        },
        "rows": rows,
        "all_ok": all(row["ok"] for row in rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"all within tolerance: {result['all_ok']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
