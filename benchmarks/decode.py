"""Decode throughput: torchgcc's decoder (matrices included) against a bare torch.bmm and a scipy loop.

Measures, in one run and on this machine:
1. decoding B groups with distinct random straggler masks, cold cache (matrix construction + application), against
   the bare ``torch.bmm`` of the same shapes (the floor for applying any linear decoder), and with a warm cache;
2. the same decode done the usual way, a loop over groups fitting scipy's spline to each group's results;
3. how matrix construction scales with N at fixed K and S / N.

Prints the ratios and writes JSON (settings, seeds, times in seconds, ratios). Usage:

    python benchmarks/decode.py                      # the acceptance settings
    python benchmarks/decode.py --groups 64 --repeats 3 --out /tmp/decode.json
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
from torchgcc.stragglers import FixedStragglers
from torchgcc.timing import make_timer

CPU_TIMER = make_timer("cpu")


def timed(fn: Callable[[], object], repeats: int, setup: Optional[Callable[[], object]] = None) -> float:
    """Best wall time of ``fn`` over ``repeats`` runs after one warm-up (the least disturbed by other load).

    ``setup`` runs, untimed, before every run (e.g. emptying the decoder's cache).
    """
    return min(CPU_TIMER.measure(fn, warmup=1, repeats=repeats, setup=setup))


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
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/decode.json"))
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    B, N, K, S, d = args.groups, args.num_workers, args.num_inputs, args.num_stragglers, args.outputs
    code = torchgcc.GCC(num_inputs=K, num_workers=N, lambda_dec="spacing")  # the cached, mask-only decoder
    mask = FixedStragglers(S, seed=args.seed).sample(B, N)
    y = torch.randn(B, N, d)  # float32 results
    matrices = code.decoder.decode_matrix(mask).float()

    clear = code.decoder.clear_cache
    t_bmm = timed(lambda: torch.bmm(matrices, y), args.repeats)
    t_cold = timed(lambda: code.decoder(y, mask), args.repeats, setup=clear)
    t_construct = timed(lambda: code.decoder.decode_matrix(mask), args.repeats, setup=clear)
    t_warm = timed(lambda: code.decoder(y, mask), args.repeats)
    lam = code.decoder.lam_for
    y_np, mask_np = y.numpy(), mask.numpy()
    beta, alpha = code.beta.numpy(), code.alpha.numpy()
    t_scipy = timed(lambda: scipy_decode(beta, alpha, y_np, mask_np, lam), max(1, args.repeats // 3))
    clear()
    agree = np.abs(scipy_decode(beta, alpha, y_np, mask_np, lam) - code.decoder(y, mask).numpy()).max()

    scaling = []
    for n in args.scaling_workers:
        big = torchgcc.GCC(num_inputs=K, num_workers=n, lambda_dec="spacing")
        big_mask = FixedStragglers(n // 4, seed=args.seed).sample(args.scaling_groups, n)

        seconds = timed(lambda: big.decoder.decode_matrix(big_mask), max(1, args.repeats // 2), setup=big.decoder.clear_cache)
        scaling.append({"N": n, "seconds": seconds})
    slope = float(np.polyfit(np.log([s["N"] for s in scaling]), np.log([s["seconds"] for s in scaling]), 1)[0])

    result = {
        "settings": {
            "groups": B, "num_workers": N, "num_inputs": K, "num_stragglers": S, "outputs": d, "dtype": "float32",
            "code": repr(code), "repeats": args.repeats, "seed": args.seed, "threads": torch.get_num_threads(),
            "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
            "scaling_groups": args.scaling_groups, "scaling_stragglers": "N / 4",
        },
        "seconds": {"bmm": t_bmm, "decode_cold": t_cold, "construct": t_construct, "decode_warm": t_warm, "scipy_loop": t_scipy},
        "ratios": {
            "decode_cold_over_bmm": t_cold / t_bmm,
            "decode_warm_over_bmm": t_warm / t_bmm,
            "scipy_loop_over_decode_cold": t_scipy / t_cold,
        },
        "max_abs_difference_vs_scipy": float(agree),
        "construction_scaling": scaling,
        "construction_loglog_slope": slope,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"decode B={B} N={N} K={K} S={S} outputs={d} float32, {torch.get_num_threads()} threads")
    for name, seconds in result["seconds"].items():
        print(f"  {name:<12} {seconds * 1e3:9.2f} ms")
    for name, ratio in result["ratios"].items():
        print(f"  {name:<28} {ratio:8.2f}x")
    print(f"  max |torchgcc - scipy| = {agree:.2e}")
    for row in scaling:
        print(f"  construction N={row['N']:<5} {row['seconds'] * 1e3:9.2f} ms")
    print(f"  construction log-log slope in N: {slope:.2f} (1 = linear)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
