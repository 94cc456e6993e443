"""Step latency of the distributed job on local processes: what the execution engine adds to the workers' time.

Runs the job of ``torchgcc bench-latency`` for one setting through the local launcher (5 processes, N = 8, K = 4,
the tiny MLP, M = 64 samples per step), twice:

- ``injected``: bench-latency's own job (bimodal delays: 0.02 s, or 0.3 s with probability 0.05, jitter 0.5; every
  scheme on the same delays; uncoded, replication, and GCC / natural / BACC at S = 2 and 4). Per scheme: median and
  p99 step latency, and the median *overhead*: a step's latency minus the latency its injected delays alone imply
  (uncoded: the slowest worker; replication: the slowest input's fastest copy; a code at S: the (N - S)-th fastest
  worker). The overhead is what encoding, transport, the model, the wait loop and decoding cost.
- ``measured``: no injected delay (``--mode measured``, S = 2): the step latency is all engine and model.

Writes ``step_latency.json`` (settings, load average before and after, thread count, per-scheme numbers, every
step's latency, each rank's exit status) and prints one line per scheme.

    python benchmarks/step_latency.py --out DIR      # default output: ./torchgcc-results/step-latency/<time>/
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import datetime
from pathlib import Path

import torch

try:
    from torchgcc.distributed.launch import launch
except ImportError:  # a checkout from before the engine rework (benchmarks/engines_before_after.py runs it there)
    from torchgcc.distributed.launcher import launch

N, K, NPROC, BATCH = 8, 4, 5, 64
SCHEMES = ["uncoded", "replication"] + [f"{c}:S={s}" for c in ("gcc", "natural", "bacc") for s in (2, 4)]
DELAYS = ["fast=0.02", "slow=0.3", "p_slow=0.05", "jitter=0.5"]


def implied_latency(delays: torch.Tensor, scheme: str) -> float:
    """The step latency the injected delays ``(N,)`` alone imply for ``scheme``."""
    if scheme == "uncoded":
        return float(delays.max())
    if scheme == "replication":
        owner = torch.arange(N) * K // N  # worker n holds a copy of input n K / N
        return max(float(delays[owner == k].min()) for k in range(K))
    stragglers = int(scheme.rpartition("=")[2])
    return float(delays.sort().values[N - stragglers - 1])


def run_job(args: list[str], steps: int, timeout_s: float) -> tuple[dict, list[dict]]:
    """One launch with ``--save``: its exit codes and stderr tail, and the saved steps."""
    with tempfile.TemporaryDirectory(prefix="torchgcc-step-latency-") as folder:
        path = Path(folder) / "steps.pt"
        job = launch([*args, "--steps", str(steps), "--save", str(path)], nproc=NPROC, timeout_s=timeout_s)
        saved = torch.load(path, weights_only=False)["steps"] if path.exists() else []
    records = [r for r in job.records if "step" in r]
    return {"returncodes": job.returncodes, "stderr_tail": job.stderr[-2000:]}, [
        dict(record, delays=None if s["delays"] is None else s["delays"].tolist()) for record, s in zip(records, saved)
    ]


def summarize(records: list[dict], injected: bool) -> dict:
    out = {}
    for name in dict.fromkeys(r["scheme"] for r in records):
        rows = [r for r in records if r["scheme"] == name]
        latency = torch.tensor([r["latency_s"] for r in rows], dtype=torch.float64)
        row = {
            "steps": len(rows),
            "median_latency_s": float(latency.quantile(0.5)),
            "p99_latency_s": float(latency.quantile(0.99)),
            "latency_s": latency.tolist(),
        }
        if injected:
            implied = torch.tensor([implied_latency(torch.tensor(r["delays"]), name) for r in rows])
            row["median_overhead_s"] = float((latency - implied.double()).quantile(0.5))
        out[name] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="steps of each job")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before a job is killed")
    parser.add_argument("--label", default="", help="free text stored with the results (e.g. the commit)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    common = ["-N", str(N), "-K", str(K), "--batch-size", str(BATCH), "--seed", str(args.seed), "--deadline", "0"]
    injected_args = [*common, "--mode", "injected", "-S", "0", "--code", ",".join(SCHEMES), "--latency", "bimodal"]
    for param in DELAYS:
        injected_args += ["--latency-param", param]
    measured_args = [*common, "--mode", "measured", "-S", "2", "--code", "uncoded,replication,gcc"]
    load_before = os.getloadavg()
    started = time.monotonic()
    injected_job, injected = run_job(injected_args, args.steps, args.timeout)
    measured_job, measured = run_job(measured_args, args.steps, args.timeout)
    result = {
        "settings": {
            "N": N,
            "K": K,
            "nproc": NPROC,
            "batch_size": BATCH,
            "steps": args.steps,
            "seed": args.seed,
            "injected_args": injected_args,
            "measured_args": measured_args,
            "label": args.label,
            "torch": torch.__version__,
            "cpu_count": os.cpu_count(),
            "torch_threads_per_rank": 1,
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
            "command": "python benchmarks/step_latency.py",
        },
        "injected": {**injected_job, "schemes": summarize(injected, injected=True)},
        "measured": {**measured_job, "schemes": summarize(measured, injected=False)},
        "wall_s": time.monotonic() - started,
    }
    out = args.out or Path("torchgcc-results") / "step-latency" / datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "step_latency.json"
    path.write_text(json.dumps(result, indent=2))
    for mode in ("injected", "measured"):
        print(f"{mode}: exit codes {result[mode]['returncodes']}")
        for name, row in result[mode]["schemes"].items():
            overhead = f", overhead {1e3 * row['median_overhead_s']:.1f} ms" if "median_overhead_s" in row else ""
            print(
                f"  {name:14s} median {1e3 * row['median_latency_s']:.1f} ms, p99 {1e3 * row['p99_latency_s']:.1f} ms"
                f"{overhead}"
            )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
