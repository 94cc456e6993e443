"""Decode cost against a bare ``torch.bmm``, eager and compiled side by side, over workers, batch, outputs and threads.

For each N in ``--workers``, B in ``--groups``, d in ``--outputs`` and thread count in ``--threads``, with K =
``--inputs`` and S = N / 4 stragglers at random places (a fresh mask every call), it times in one run, interleaved
sample by sample (the order rotating, so that no call always runs first) so that load and cache effects hit all
alike:

- ``bmm``: the bare ``torch.bmm`` of ``(B, K, N)`` float32 matrices with the ``(B, N, d)`` float32 results, the floor of
  any linear decode;
- ``compiled_bmm``: that bmm as a ``torch.compile(fullgraph=True)`` graph (the backend of ``compiled``): the floor of
  a compiled decode, which pays the compiled graph's entry (guards, wrappers: tens of microseconds) as well;
- ``eager``: ``GCC(K, N)``'s decoder (the default, ``lambda_dec="adaptive"``, calibrated beforehand on one batch: the
  steady state), ``check=True`` (the default: one read back), its matrices built from each fresh mask in the call;
- ``eager_unchecked``: the same with ``check=False`` (no read back);
- ``kernel_direct`` (CPU, numba backend): what the checked eager call computes, without the decoder's Python layers:
  the kernel's rows from the mask (:func:`torchgcc.functional.numba_decode.spline_rows`, the same operator), their
  bmm with the results and the check's sum read back. ``eager`` minus this is the per-call cost of the decoder's
  checks and dispatch;
- ``compiled``: ``torch.compile(decoder, fullgraph=True)`` of the ``check=False`` decoder (``--compile-backend``,
  default inductor): the compiled graph calls the same kernel operator as the eager call;
- ``graph`` (CUDA only): the ``check=False`` decode captured in a CUDA graph, replayed after copying the mask in.

A sample is ``inner`` calls back to back, ``inner`` chosen so that the bmm's sample lasts at least
``--min-sample-seconds``; times are medians over ``--repeats`` samples (``--large-repeats`` where one bmm takes over
:data:`LONG_CALL` seconds), per call; ratios are medians of each sample's
own ratio to its bmm (paired: a slow spell of the shared machine hits the bmm and the decodes of one sample alike).
``compiled_over_compiled_bmm`` is the compiled decode's paired ratio to the compiled bmm: eager against eager and
compiled against compiled, each decode against the floor it can reach. Each row also counts, with one
``torch.profiler`` pass, the aten ops and host reads of an eager call. The JSON
(settings, seeds, environment, the load average before and after each row, every row) is rewritten after every row
to ``--out``. The acceptance rows of issue 29 are N = 64, d = 1000, B = 8 and 512 (:data:`TARGETS`), for every
thread count: the eager decode against the bmm and the compiled decode against the compiled bmm (its ratio to the
eager bmm is reported beside it). ``--acceptance`` times those rows alone (about a minute; the whole table takes
several). The commands, to rerun on a quiet machine::

    python benchmarks/decode.py --out benchmarks/results/decode.json
    python benchmarks/decode.py --acceptance --out benchmarks/results/decode_acceptance.json
    python benchmarks/decode.py --device cuda --threads 1 --out decode-cuda.json
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import profile

import torchgcc
from torchgcc.codes.maps import numba_available
from torchgcc.stragglers import FixedStragglers
from torchgcc.timing import Timer, make_timer

#: The checkout the benchmark runs in (its commit goes into the JSON).
ROOT = Path(__file__).resolve().parents[1]
#: Profiler events that read device memory back to the host.
READS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::unique", "aten::_unique2", "aten::unique_consecutive"}
#: Seconds of one bmm above which a row takes ``--large-repeats`` samples (N = 1024, B = 512, d = 1000: 2 GB results).
LONG_CALL = 0.1
#: Issue 29's bounds on decode / bmm at N = 64, K = 16, d = 1000, by B (every thread count, eager and compiled).
TARGETS = {8: 1.5, 512: 1.2}


def ops_and_reads(fn) -> dict[str, int]:
    """Aten ops and host reads of one call of ``fn`` (after a warm-up call)."""
    fn()
    with profile() as recorded:
        fn()
    names = [event.name for event in recorded.events() if event.name.startswith("aten::")]
    return {"ops": len(names), "reads": sum(name in READS for name in names)}


def call_repeatedly(call, count: int) -> None:
    """``call(i)`` for ``i < count``, each output dropped as it comes (a list of them would hold every output of a
    sample alive: each call would then allocate, and fault in, fresh memory)."""
    for i in range(count):
        call(i)


def warm_up(
    calls: dict[str, Callable[[int], Any]], timer: Timer, baseline: str, min_sample_seconds: float
) -> tuple[float, int]:
    """Call each of ``calls`` once, untimed (under the current thread count), then time ``calls[baseline]`` once:
    its seconds, and the calls per sample that make a sample of it last ``min_sample_seconds``."""
    for call in calls.values():
        call(0)
    single = timer.time_once(lambda: calls[baseline](0))
    return single, max(1, math.ceil(min_sample_seconds / max(single, 1e-7)))


def interleaved_samples(
    calls: dict[str, Callable[[int], Any]], timer: Timer, inner: int, repeats: int
) -> dict[str, list[float]]:
    """``repeats`` samples of each of ``calls``, in seconds per call, each sample ``inner`` calls
    (:func:`call_repeatedly`). The samples of one repeat run back to back, the order of the calls rotating by one
    each repeat (no call always follows the same one): a ratio of two calls' samples of one repeat is paired
    (:func:`paired_ratio`)."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls)
    for repeat in range(repeats):
        for name in order[repeat % len(order) :] + order[: repeat % len(order)]:
            times[name].append(timer.time_once(functools.partial(call_repeatedly, calls[name], inner)) / inner)
    return times


def bare_bmm(matrices: torch.Tensor, results: torch.Tensor) -> torch.Tensor:
    """The floor of a linear decode (compiled for ``compiled_bmm``)."""
    return torch.bmm(matrices, results)


def kernel_direct(kernels, decoder, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The checked eager decode's work alone: the rows of the kernel module ``kernels`` (``decoder.kernels(device)``,
    looked up once), their bmm with ``y``, the sum read back."""
    rows = kernels.spline_rows(mask, decoder.beta, decoder.alpha, decoder.mu_table, decoder.min_arrived, y.dtype)
    out = torch.bmm(rows.transpose(1, 2), y)
    if not math.isfinite(torch.sum(out).item()):
        raise ValueError("kernel_direct: a non-finite estimate")
    return out


def captured(decoder, y: torch.Tensor, mask: torch.Tensor):
    """A function that copies a mask into a static one and replays the decode captured in a CUDA graph."""
    static_mask = mask.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            decoder(y, static_mask)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        decoder(y, static_mask)

    def replay(new_mask: torch.Tensor) -> None:
        static_mask.copy_(new_mask)
        graph.replay()

    return replay


def measure_shape(args, num_workers: int, groups: int, outputs: int, device: torch.device) -> list[dict]:
    """The rows of one (N, B, d): one per thread count, the compiled decoder shared by all of them."""
    k = args.inputs
    generator = torch.Generator().manual_seed(args.seed)
    y = torch.randn(groups, num_workers, outputs, generator=generator).to(device)
    matrices = torch.randn(groups, k, num_workers, generator=generator).to(device)
    sampler = FixedStragglers(num_workers // 4, seed=args.seed)
    masks = [sampler.sample(groups, num_workers).to(device) for _ in range(16)]
    eager = torchgcc.GCC(k, num_workers).to(device).decoder
    unchecked = torchgcc.GCC(k, num_workers, check=False).to(device).decoder
    eager(y, masks[0])  # calibrate on one batch: later calls are the steady state
    unchecked(y, masks[0])
    torch._dynamo.reset()  # a fresh cache for each shape (no recompilation limit across rows)
    compiled = torch.compile(unchecked, fullgraph=True, dynamic=False, backend=args.compile_backend)
    start = time.perf_counter()
    compiled(y, masks[0])
    compile_seconds = time.perf_counter() - start
    compiled_bmm = torch.compile(bare_bmm, fullgraph=True, dynamic=False, backend=args.compile_backend)
    compiled_bmm(matrices, y)
    calls = {
        "bmm": lambda i: torch.bmm(matrices, y),
        "compiled_bmm": lambda i: compiled_bmm(matrices, y),
        "eager": lambda i: eager(y, masks[i % len(masks)]),
        "eager_unchecked": lambda i: unchecked(y, masks[i % len(masks)]),
        "compiled": lambda i: compiled(y, masks[i % len(masks)]),
    }
    if eager.kernel_backend(device) == "numba":
        kernels = eager.kernels(device)
        calls["kernel_direct"] = lambda i: kernel_direct(kernels, eager, y, masks[i % len(masks)])
    if device.type == "cuda":
        replay = captured(unchecked, y, masks[0])
        calls["graph"] = lambda i: replay(masks[i % len(masks)])
    timer = make_timer(device)
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        load_before = os.getloadavg()
        single, inner = warm_up(calls, timer, "bmm", args.min_sample_seconds)
        repeats = args.repeats if single < LONG_CALL else min(args.repeats, args.large_repeats)
        times = interleaved_samples(calls, timer, inner, repeats)
        counts = {
            "eager": ops_and_reads(lambda: eager(y, masks[1])),
            "eager_unchecked": ops_and_reads(lambda: unchecked(y, masks[1])),
        }
        rows.append(
            {
                "N": num_workers,
                "K": k,
                "B": groups,
                "d": outputs,
                "threads": threads,
                "backend": eager.kernel_backend(device),
                "inner": inner,
                "repeats": repeats,
                "median_seconds": {name: statistics.median(values) for name, values in times.items()},
                "over_bmm": {  # paired: the samples of one repeat run back to back
                    name: paired_ratio(values, times["bmm"]) for name, values in times.items() if name != "bmm"
                },
                "compiled_over_compiled_bmm": paired_ratio(times["compiled"], times["compiled_bmm"]),
                "per_call": counts,
                "compile_seconds": compile_seconds,
                "calibrated_ratio": float(eager.ratio),
                "load_average_before": load_before,
                "load_average_after": os.getloadavg(),
            }
        )
    return rows


def source_commit() -> str | None:
    """The checkout's commit, with ``+changes`` where the working tree differs from it; None outside git."""

    def git(*command: str) -> str:
        return subprocess.run(["git", *command], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        return git("rev-parse", "--short", "HEAD") + (
            "+changes" if git("status", "--porcelain", "--untracked-files=no") else ""
        )
    except (OSError, subprocess.CalledProcessError):
        return None


#: The CPU flags that decide which BLAS kernels run.
VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile")


def cpu_description() -> dict:
    """The CPU's model name and which of :data:`VECTOR_FLAGS` it has (Linux's /proc/cpuinfo; empty elsewhere)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {"model": platform.processor(), "flags": []}
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    flags = set(fields.get("flags", "").split())
    return {"model": fields.get("model name", ""), "flags": [flag for flag in VECTOR_FLAGS if flag in flags]}


def environment() -> dict:
    """What a CPU timing depends on, for a benchmark's JSON: torch and Python versions, :func:`cpu_description`, the
    core count and :func:`source_commit`."""
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu_description(),
        "cpu_count": os.cpu_count(),
        "commit": source_commit(),
    }


def paired_ratio(values: list[float], baseline: list[float]) -> float:
    """The median of each sample's ratio to the baseline's sample of the same repeat."""
    return statistics.median(value / base for value, base in zip(values, baseline))


def acceptance(rows: list[dict]) -> list[dict]:
    """Issue 29's acceptance rows against :data:`TARGETS`: the eager decode over the bmm and the compiled decode over
    the compiled bmm (``compiled_over_bmm``, over the eager bmm, beside it)."""
    return [
        {
            "B": row["B"],
            "threads": row["threads"],
            "target": TARGETS[row["B"]],
            "eager_over_bmm": row["over_bmm"]["eager"],
            "compiled_over_compiled_bmm": row["compiled_over_compiled_bmm"],
            "compiled_over_bmm": row["over_bmm"]["compiled"],
            "passes": max(row["over_bmm"]["eager"], row["compiled_over_compiled_bmm"]) <= TARGETS[row["B"]],
        }
        for row in rows
        if row["N"] == 64 and row["K"] == 16 and row["d"] == 1000 and row["B"] in TARGETS
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts")
    parser.add_argument("--inputs", type=int, default=16, help="K")
    parser.add_argument("--workers", type=int, nargs="+", default=[64, 1024], help="N values")
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 8, 512], help="B values")
    parser.add_argument("--outputs", type=int, nargs="+", default=[10, 1000], help="d values")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--large-repeats", type=int, default=7, help=f"repeats where a bmm takes over {LONG_CALL} s")
    parser.add_argument(
        "--min-sample-seconds", type=float, default=0.01, help="several scheduler time slices (shared machines)"
    )
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile backend")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--acceptance", action="store_true", help="issue 29's rows only: N = 64, B = 8 and 512, d = 1000, K = 16"
    )
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/decode/decode.json"))
    args = parser.parse_args()
    if args.acceptance:
        args.workers, args.groups, args.outputs, args.inputs = [64], sorted(TARGETS), [1000], 16
    if min([args.repeats, args.large_repeats, *args.groups, *args.threads]) < 1 or min(args.workers) < 4:
        parser.error("need --repeats and --large-repeats >= 1, --workers >= 4, --groups >= 1 and --threads >= 1")
    if args.inputs > min(args.workers):
        parser.error(f"--inputs (K = {args.inputs}) must be at most the smallest --workers (N)")
    device = torch.device(args.device)
    report = {
        "settings": {key: value for key, value in vars(args).items() if key != "out"},
        "stragglers": "FixedStragglers(N // 4), a fresh mask each call (16 masks cycled)",
        "environment": environment()
        | {
            "numba": importlib.metadata.version("numba") if numba_available() else None,
            "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
            "load_average_before": os.getloadavg(),
        },
        "targets": {f"B={groups}": bound for groups, bound in TARGETS.items()},
        "rows": [],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for num_workers in args.workers:
        for groups in args.groups:
            for outputs in args.outputs:
                for row in measure_shape(args, num_workers, groups, outputs, device):
                    report["rows"].append(row)
                    report["acceptance"] = acceptance(report["rows"])
                    report["environment"]["load_average_after"] = os.getloadavg()
                    args.out.write_text(json.dumps(report, indent=2))
                    ratios = ", ".join(f"{name} {value:.2f}x" for name, value in row["over_bmm"].items())
                    ratios += f", compiled / compiled_bmm {row['compiled_over_compiled_bmm']:.2f}x"
                    print(
                        f"N={num_workers:5d} B={groups:4d} d={outputs:5d} threads={row['threads']} bmm "
                        f"{1e3 * row['median_seconds']['bmm']:8.3f} ms | {ratios} | load "
                        f"{row['load_average_after'][0]:.1f}",
                        flush=True,
                    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
