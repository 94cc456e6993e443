"""Decode throughput: torchgcc's decoder (matrices included) against a bare torch.bmm and a scipy loop.

Measures, in one run, on ``--device`` (the decoder's default backend there: banded on the CPU, the fused Triton
kernel on CUDA):
1. decoding B groups with distinct random straggler masks, cold cache (matrix construction + application), against
   the bare ``torch.bmm`` of the same shapes (the floor for applying any linear decoder), with a warm cache, and
   with ``check=False`` (no host synchronisation);
2. the cold matrix construction alone for B distinct masks at N = ``--sizes`` (K = 16, S = N / 4);
3. the library default (``lambda_dec="adaptive"``: lambda chosen per group from its results, so no per-mask matrix
   and no cache) decoding the same results, against the same bmm;
4. on the CPU: the same decode done the usual way, a loop over groups fitting scipy's spline to each group's results
   (also the accuracy check, on every device), and how matrix construction scales with N at fixed K and S / N.

Prints the ratios and writes JSON (settings, seeds, times in seconds, ratios) to ``--out`` (default: a fresh
``./torchgcc-results/decode/<date>-<time>/decode.json``). Usage:

    python benchmarks/decode.py --threads 2          # the CPU acceptance settings
    python benchmarks/decode.py --device cuda        # also N = 10^4 in the construction sizes
    python benchmarks/decode.py --groups 64 --repeats 3 --out /tmp/decode.json
    python benchmarks/decode.py --threads 2 --out benchmarks/results/decode.json   # the committed copy
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch
from scipy.interpolate import CubicSpline, make_smoothing_spline

import torchgcc
from torchgcc.app.options import fresh_output_dir
from torchgcc.stragglers import FixedStragglers
from torchgcc.timing import Timer, make_timer

#: Construction sizes N by device type (N = 10^4 is too large for the CPU default run).
DEFAULT_SIZES = {"cpu": [64, 1024], "cuda": [64, 1024, 10_000]}


def timed(timer: Timer, fn: Callable[[], object], repeats: int, setup: Optional[Callable[[], object]] = None) -> float:
    """Best time of ``fn`` over ``repeats`` runs after one warm-up (the least disturbed by other load).

    ``setup`` runs, untimed, before every run (e.g. emptying the decoder's cache).
    """
    return min(timer.measure(fn, warmup=1, repeats=repeats, setup=setup))


def scipy_decode(
    beta: np.ndarray, alpha: np.ndarray, y: np.ndarray, mask: np.ndarray, lam: Callable[[int], float]
) -> np.ndarray:
    """The per-group loop a user would write with scipy: fit each group's survivors, evaluate at alpha.

    ``lam(n)`` is the smoothing parameter for ``n`` results. Beyond the outermost survivor the natural spline continues
    linearly (scipy would extend the end cubic).
    """
    out = np.empty((y.shape[0], len(alpha), y.shape[2]), dtype=y.dtype)
    for b in range(y.shape[0]):
        knots, data = beta[mask[b]], y[b, mask[b]]
        n = len(knots)
        if lam(n) == 0:
            spline = CubicSpline(knots, data, bc_type="natural")
        else:
            spline = make_smoothing_spline(knots, data, lam=n * lam(n))
        inside = np.clip(alpha, knots[0], knots[-1])
        out[b] = spline(inside) + spline.derivative()(inside) * (alpha - inside)[:, None]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=512)
    parser.add_argument("--num-workers", type=int, default=64)
    parser.add_argument("--num-inputs", type=int, default=16)
    parser.add_argument("--num-stragglers", type=int, default=16)
    parser.add_argument("--outputs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--scaling-workers", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--scaling-groups", type=int, default=16)
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=None,
        help="N of the construction-alone timings (default: 64 1024 on cpu, 64 1024 10000 on cuda)",
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON path (default: a fresh ./torchgcc-results/decode/<date>-<time>/decode.json)",
    )
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda was asked for but torch.cuda.is_available() is False")
    timer, on_cpu = make_timer(device), device.type == "cpu"
    sizes = args.sizes or DEFAULT_SIZES.get(device.type, DEFAULT_SIZES["cpu"])

    torch.manual_seed(args.seed)
    B, N, K, S, d = args.groups, args.num_workers, args.num_inputs, args.num_stragglers, args.outputs
    code = torchgcc.GCC(num_inputs=K, num_workers=N, lambda_dec="spacing").to(device)  # the cached, mask-only decoder
    unchecked = torchgcc.GCC(num_inputs=K, num_workers=N, lambda_dec="spacing", check=False).to(device)
    mask = FixedStragglers(S, seed=args.seed).sample(B, N, device=device)
    y = torch.randn(B, N, d, device=device)  # float32 results
    matrices = code.decoder.decode_matrix(mask).float()

    clear = code.decoder.clear_cache
    t_bmm = timed(timer, lambda: torch.bmm(matrices, y), args.repeats)
    t_cold = timed(timer, lambda: code.decoder(y, mask), args.repeats, setup=clear)
    t_unchecked = timed(timer, lambda: unchecked.decoder(y, mask), args.repeats, setup=unchecked.decoder.clear_cache)
    t_construct = timed(timer, lambda: code.decoder.decode_matrix(mask), args.repeats, setup=clear)
    t_warm = timed(timer, lambda: code.decoder(y, mask), args.repeats)
    adaptive = torchgcc.GCC(num_inputs=K, num_workers=N).to(device)  # the library default, lambda from the results
    t_adaptive = timed(timer, lambda: adaptive.decoder(y, mask), max(1, args.repeats // 2))
    lam = code.decoder.lam_for
    y_np, mask_np = y.cpu().numpy(), mask.cpu().numpy()
    beta, alpha = code.beta.cpu().numpy(), code.alpha.cpu().numpy()
    seconds = {
        "bmm": t_bmm,
        "decode_cold": t_cold,
        "decode_cold_check_false": t_unchecked,
        "construct": t_construct,
        "decode_warm": t_warm,
        "decode_adaptive_default": t_adaptive,
    }
    if on_cpu:  # the scipy loop is a CPU baseline
        seconds["scipy_loop"] = timed(
            timer, lambda: scipy_decode(beta, alpha, y_np, mask_np, lam), max(1, args.repeats // 3)
        )
    clear()
    agree = np.abs(scipy_decode(beta, alpha, y_np, mask_np, lam) - code.decoder(y, mask).cpu().numpy()).max()

    construction = []  # cold construction of B distinct masks
    for n in sizes:
        sized = torchgcc.GCC(num_inputs=K, num_workers=n, lambda_dec="spacing").to(device)
        sized_mask = FixedStragglers(n // 4, seed=args.seed).sample(B, n, device=device)
        repeats = args.repeats if n <= 1024 else max(1, args.repeats // 3)
        t = timed(
            timer,
            lambda sized=sized, sized_mask=sized_mask: sized.decoder.decode_matrix(sized_mask),
            repeats,
            setup=sized.decoder.clear_cache,
        )
        construction.append({"N": n, "groups": B, "stragglers": n // 4, "seconds": t})
        del sized, sized_mask

    scaling = []
    if on_cpu:
        for n in args.scaling_workers:
            big = torchgcc.GCC(num_inputs=K, num_workers=n, lambda_dec="spacing")
            big_mask = FixedStragglers(n // 4, seed=args.seed).sample(args.scaling_groups, n)
            t = timed(
                timer,
                lambda big=big, big_mask=big_mask: big.decoder.decode_matrix(big_mask),
                max(1, args.repeats // 2),
                setup=big.decoder.clear_cache,
            )
            scaling.append({"N": n, "seconds": t})
    slope = (
        float(np.polyfit(np.log([s["N"] for s in scaling]), np.log([s["seconds"] for s in scaling]), 1)[0])
        if scaling
        else None
    )

    ratios = {
        "decode_cold_over_bmm": t_cold / t_bmm,
        "decode_cold_check_false_over_bmm": t_unchecked / t_bmm,
        "decode_warm_over_bmm": t_warm / t_bmm,
        "decode_adaptive_default_over_bmm": t_adaptive / t_bmm,
    }
    if "scipy_loop" in seconds:
        ratios["scipy_loop_over_decode_cold"] = seconds["scipy_loop"] / t_cold
    if scaling:
        ratios["construction_last_over_first_N"] = scaling[-1]["seconds"] / scaling[0]["seconds"]
    result = {
        "settings": {
            "groups": B,
            "num_workers": N,
            "num_inputs": K,
            "num_stragglers": S,
            "outputs": d,
            "dtype": "float32",
            "code": repr(code),
            "repeats": args.repeats,
            "seed": args.seed,
            "threads": torch.get_num_threads(),
            "device": str(device),
            "backend": "triton" if code.decoder.uses_fused_kernel(device) else "banded",
            "torch": torch.__version__,
            "machine": torch.cuda.get_device_name(device)
            if device.type == "cuda"
            else platform.processor() or platform.machine(),
            "construction_groups": B,
            "scaling_groups": args.scaling_groups,
            "stragglers_in_sizes": "N / 4",
        },
        "seconds": seconds,
        "ratios": ratios,
        "max_abs_difference_vs_scipy": float(agree),
        "construction_sizes": construction,
        "construction_scaling": scaling,
        "construction_loglog_slope": slope,
    }
    if args.out is None:
        args.out = fresh_output_dir("decode") / "decode.json"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    settings = result["settings"]
    print(
        f"decode B={B} N={N} K={K} S={S} outputs={d} float32 on {device} ({settings['backend']}), "
        f"{torch.get_num_threads()} threads"
    )
    for name, t in seconds.items():
        print(f"  {name:<24} {t * 1e3:9.3f} ms")
    for name, ratio in ratios.items():
        print(f"  {name:<34} {ratio:8.2f}x")
    print(f"  max |torchgcc - scipy| = {agree:.2e}")
    for row in construction:
        print(f"  cold construction of {B} masks, N={row['N']:<6} {row['seconds'] * 1e3:10.3f} ms")
    for row in scaling:
        print(f"  construction of {args.scaling_groups} masks N={row['N']:<5} {row['seconds'] * 1e3:9.2f} ms")
    if slope is not None:
        print(f"  construction log-log slope in N: {slope:.2f} (1 = linear)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
