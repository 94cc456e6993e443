"""The Triton decode kernels (``backend="triton"``) against the numba kernels, group by group, N = 8 .. 4096.

For every N (K = min(16, N // 2)), seeded random masks (every straggler count 0..N-2 where N <= 64, else ``--spread``
counts spread over 0..N-2), each also with the first or last two workers straggling (points beyond the survivors),
for GCC at lambda = 0, 1e-6 and the spacing rule and for BACC, compares ``decoder.decode_matrix(masks)`` of the two
backends (float64) group by group against the tolerance of what is compared (``tests/references.py``: 64 cond(M) eps
for the spline's system M, the condition of Berrut's sums for BACC; FMA contraction on a GPU stays within them). On
the CPU the Triton kernels run in its interpreter (``TRITON_INTERPRET=1`` is set before torchgcc loads them; minutes
per decoder at N = 4096). Writes JSON (settings, environment, load average, every row) after every row.

    python benchmarks/fused_kernel_check.py --spread 2 --out benchmarks/results/fused_kernel_interpreted.json  # CPU
    python benchmarks/fused_kernel_check.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

#: name -> (code, keyword arguments)
DECODERS = {
    "gcc_lambda_0": ("gcc", {"lambda_dec": 0.0}),
    "gcc_lambda_1e-6": ("gcc", {"lambda_dec": 1e-6}),
    "gcc_spacing": ("gcc", {"lambda_dec": "spacing"}),
    "bacc": ("bacc", {}),
}


def masks_for(num_workers: int, spread: int, seed: int):
    """Seeded masks of the straggler counts above (``spread`` of them where N > 64), and copies with the first or last
    two workers straggling."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    most = num_workers - 2
    counts = range(most + 1) if num_workers <= 64 else torch.linspace(0, most, spread).round().long().tolist()
    masks = torch.stack([torch.randperm(num_workers, generator=generator) >= s for s in counts])
    ends = masks.clone()
    ends[::2, :2] = False
    ends[1::2, -2:] = False
    return torch.cat([masks, ends[ends.sum(-1) >= 2]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu (Triton interpreter) or cuda")
    parser.add_argument("--workers", type=int, nargs="+", default=[8, 33, 64, 257, 1024, 4096], help="values of N")
    parser.add_argument("--spread", type=int, default=8, help="straggler counts where N > 64")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/fused-kernel/results.json"))
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are defined
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

    import torch
    import triton
    from references import berrut_tolerance, solve_tolerance

    import torchgcc
    from torchgcc.codes.gcc import spacing_lambda

    device = torch.device(args.device)
    result = {
        "settings": {
            "device": str(device),
            "interpreted": args.device == "cpu",
            "workers": args.workers,
            "spread": args.spread,
            "num_inputs": "min(16, N // 2)",
            "seed": args.seed,
            "masks": f"every straggler count (N <= 64) or {args.spread} spread over 0..N-2, and the ends straggling; "
            "torch.randperm with a seeded generator",
            "reference": "backend='numba' (float64, CPU)",
        },
        "environment": {
            "torch": torch.__version__,
            "triton": triton.__version__,
            "python": platform.python_version(),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine(),
            "load_average_before": os.getloadavg(),
        },
        "rows": [],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for num_workers in args.workers:
        num_inputs = min(16, num_workers // 2)
        masks = masks_for(num_workers, args.spread, args.seed + num_workers)
        for name, (code_name, options) in DECODERS.items():
            reference, kernel = (
                torchgcc.make_code(
                    code_name, num_inputs=num_inputs, num_workers=num_workers, backend=backend, **options
                ).decoder
                for backend in ("numba", "triton")
            )
            kernel = kernel.to(device)
            start = time.perf_counter()
            got = kernel.decode_matrix(masks.to(device)).cpu()
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            expected = reference.decode_matrix(masks)
            worst, largest = 0.0, 0.0
            for group, mask in enumerate(masks):
                knots = reference.beta[mask].numpy()
                if code_name == "bacc":
                    tolerance = berrut_tolerance(knots, reference.alpha.numpy())
                else:
                    lam = options["lambda_dec"]
                    tolerance = solve_tolerance(knots, float(spacing_lambda(len(knots))) if lam == "spacing" else lam)
                difference = float((got[group] - expected[group]).abs().max())
                largest, worst = max(largest, difference), max(worst, difference / float(tolerance))
            row = {
                "N": num_workers,
                "K": num_inputs,
                "decoder": name,
                "masks": len(masks),
                "max_abs_difference": largest,
                "max_difference_over_tolerance": worst,
                "ok": worst <= 1.0,
                "seconds": seconds,
            }
            result["rows"].append(row)
            result["all_ok"] = all(row["ok"] for row in result["rows"])
            result["environment"]["load_average_after"] = os.getloadavg()
            args.out.write_text(json.dumps(result, indent=2))
            print(
                f"N={num_workers:<5} K={num_inputs:<3} {name:<16} max |triton - numba| = {largest:.2e}, "
                f"{worst:.2g} of its tolerance {'ok' if worst <= 1 else 'FAILED'}  {seconds:.1f} s",
                flush=True,
            )
    print(f"all within tolerance: {result['all_ok']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
