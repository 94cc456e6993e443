"""How long the documented commands take: wall time of each, with the load and thread count it ran at.

Every command of :data:`COMMANDS` is one the README or docs/ tells a reader to run. Each runs in a fresh temporary
working folder (so nothing lands in the checkout), writing into a temporary ``--out``, with the user's model cache
(``warm``: the trained models already cached; run ``torchgcc demo`` and ``torchgcc reproduce stragglers --model vit``
once first) or an empty temporary one (``cold``: training included). Recorded per command: the command line as
documented, wall seconds, exit status, ``os.getloadavg()`` before and after, the CPU count, the torch threads it
used, the model cache, the date and versions; for commands whose rank 0 prints JSON lines (the torchrun jobs), those
lines too; for the test suite, pytest's last line and its FAILED and ERROR lines. Every command imports this
checkout's torchgcc (``PYTHONPATH``), whatever the environment's install points at. Results are merged into the
output file by name, so commands can be timed one at a time.

    python benchmarks/durations.py --list
    python benchmarks/durations.py --only demo,polynomial      # default output: ./torchgcc-results/durations.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Command:
    """A documented command: ``argv`` as a reader types it (``{out}`` is replaced by a temporary folder) and the
    model cache it runs with."""

    argv: str
    cache: str = "warm"  # "warm": the user's cache; "cold": an empty temporary one
    json_lines: bool = False  # keep the JSON lines it prints (one per step of a torchrun job)
    threads: str = "cli"  # "cli": torchgcc's --threads default; "torch": torch's default; an int: fixed
    cwd: str = "temp"  # "temp": a fresh folder; "checkout": the repository (for pytest)
    env: dict[str, str] = field(default_factory=dict)


TORCHRUN_GC = (
    "torchrun --standalone --nproc-per-node 5 -m torchgcc.gradient_coding.runtime --scheme gc-fr -s 1 --steps 10 "
    "--slow-worker 3 --slow-delay 3"
)

#: name -> the documented command.
COMMANDS: dict[str, Command] = {
    "demo": Command("torchgcc demo --out {out} --no-progress"),
    "demo-cold": Command("torchgcc demo --out {out} --no-progress", cache="cold"),
    "stragglers-vit": Command("torchgcc reproduce stragglers --model vit --out {out} --no-progress"),
    "stragglers-vit-cold": Command("torchgcc reproduce stragglers --model vit --out {out} --no-progress", cache="cold"),
    "beyond-vit": Command(
        "torchgcc reproduce stragglers --model vit --stragglers 16,18,20,22,24 --out {out} --no-progress"
    ),
    "beyond-lenet5": Command(
        "torchgcc reproduce stragglers --model lenet5 --stragglers 16,18,20,22,24 --out {out} --no-progress"
    ),
    "polynomial": Command("torchgcc reproduce polynomial --out {out} --no-progress"),
    "rates": Command("torchgcc reproduce rates --out {out} --no-progress"),
    "noisy": Command("torchgcc reproduce noisy --out {out} --no-progress"),
    "manifold": Command("torchgcc reproduce manifold --out {out} --no-progress"),
    "adversarial": Command("torchgcc reproduce adversarial --out {out} --no-progress"),
    "adaptive-wait": Command("torchgcc reproduce adaptive-wait --out {out} --no-progress"),
    "adaptive-wait-quick": Command("torchgcc reproduce adaptive-wait --quick --out {out} --no-progress"),
    "sagc-trl-quick": Command("torchgcc reproduce sagc-trl --quick --out {out} --no-progress"),
    "sagc-trl": Command("torchgcc reproduce sagc-trl --out {out} --no-progress"),
    "training-quick": Command("torchgcc reproduce training --quick --out {out} --no-progress"),
    "training-lenet5": Command("torchgcc reproduce training --models lenet5 --out {out} --no-progress"),
    "training": Command("torchgcc reproduce training --out {out} --no-progress"),
    "gc-runtime": Command(TORCHRUN_GC, json_lines=True, threads="1"),
    "bench-latency-quick": Command("torchgcc bench-latency --quick --out {out}"),
    "bench-latency": Command("torchgcc bench-latency --out {out}"),
    "bench-latency-adaptive": Command(
        "torchgcc bench-latency --nproc 3 --settings 24x8 --latency-model tail_change --latency-param shift=0.3 "
        "--latency-param scale=0.06 --latency-param scale_after=0.15 --latency-param change_at=150 --adaptive-wait "
        "--wait-deadline 0.6 --wait-budget 0.005 --wait-stragglers 6,7,8,9,10,12,16 --steps 300 --seed 0 --out {out}"
    ),
    "adaptive-wait-seeds": Command(
        "python {root}/benchmarks/adaptive_wait_seeds.py --out {out}/seeds.json", threads="1", cwd="checkout"
    ),
    "lambda-suite": Command("python {root}/benchmarks/lambda_suite.py --out {out}/lambda_suite.json", threads="torch"),
    "recipes-digits-fit": Command(
        "python {root}/recipes/digits.py fit --trainer.default_root_dir {out}", threads="recipes"
    ),
    "tests": Command("pytest -q -p no:cacheprovider", threads="torch", cwd="checkout"),
    "tests-one-thread": Command(
        "pytest -q -p no:cacheprovider", threads="1", cwd="checkout", env={"OMP_NUM_THREADS": "1"}
    ),
}


def _threads(command: Command) -> int:
    """The torch threads the command computes with."""
    if command.threads.isdigit():
        return int(command.threads)
    if command.threads == "cli":
        from torchgcc.app.options import default_threads

        return default_threads()
    if command.threads == "recipes":
        return min(4, max(1, (os.cpu_count() or 1) // 2))
    import torch

    return torch.get_num_threads()


def time_command(name: str, command: Command) -> dict:
    """Run ``command`` once and return its record."""
    with tempfile.TemporaryDirectory(prefix=f"torchgcc-durations-{name}-") as temp:
        out = Path(temp) / "out"
        argv = command.argv.format(out=out, root=ROOT)
        # this checkout's torchgcc in every process, even where the environment's install is another checkout's
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path, **command.env}
        if command.cache == "cold":
            env["TORCHGCC_CACHE"] = str(Path(temp) / "cache")
        cwd = ROOT if command.cwd == "checkout" else Path(temp)
        load_before = os.getloadavg()
        start = time.perf_counter()
        finished = subprocess.run(argv, shell=True, cwd=cwd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        load_after = os.getloadavg()
    record = {
        "name": name,
        "command": command.argv.replace(" --out {out}", "").replace(" --no-progress", "").replace("{root}/", ""),
        "wall_s": wall,
        "returncode": finished.returncode,
        "load_average_before": list(load_before),
        "load_average_after": list(load_after),
        "cpu_count": os.cpu_count(),
        "threads": _threads(command),
        "model_cache": command.cache,
        "env": command.env,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "python": platform.python_version(),
    }
    if command.json_lines:
        record["json_lines"] = [json.loads(line) for line in finished.stdout.splitlines() if line.startswith("{")]
    if finished.returncode != 0:
        record["stderr_tail"] = finished.stderr[-2000:]
    if name.startswith("tests"):
        record.update(pytest_summary(finished.stdout))
    return record


def pytest_summary(stdout: str) -> dict:
    """pytest's final line (``summary``) and its short summary's FAILED and ERROR lines (``failures``: node id and
    message), so that a failing run says which tests failed."""
    lines = stdout.strip().splitlines()
    failures = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    return {"summary": lines[-1] if lines else "", "failures": failures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None, help="comma-separated names (default: every command)")
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/durations.json"), help="merged JSON")
    parser.add_argument("--list", action="store_true", help="print the names and commands, run nothing")
    args = parser.parse_args(argv)
    if args.list:
        for name, command in COMMANDS.items():
            print(f"{name:<22} {command.argv}")
        return 0
    names = list(COMMANDS) if args.only is None else [name.strip() for name in args.only.split(",")]
    unknown = [name for name in names if name not in COMMANDS]
    if unknown:
        parser.error(f"unknown --only {unknown}; choose from {list(COMMANDS)}")
    import torch

    payload = json.loads(args.out.read_text()) if args.out.is_file() else {"records": []}
    for name in names:
        print(f"timing {name}: {COMMANDS[name].argv}", flush=True)
        record = time_command(name, COMMANDS[name])
        record["torch"] = torch.__version__
        payload["records"] = [r for r in payload["records"] if r["name"] != name] + [record]
        print(f"  {record['wall_s']:.1f} s, status {record['returncode']}, load {record['load_average_before']}")
        for line in [record["summary"], *record["failures"]] if "summary" in record else []:
            print(f"  {line}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
