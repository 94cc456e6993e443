"""The engine rework (issue 25) side by side: data-plane throughput and the job's step latency, before and after.

Checks out ``--before`` (default: ca2f9e5, main before the rework) into a temporary folder, then runs on the same
machine ``benchmarks/transport.py`` (a 16 MB tensor rank -> coordinator over the data plane and through the store)
on the old checkout and on this one, then ``benchmarks/step_latency.py`` (bench-latency's job: per-scheme step
latency and its overhead over the injected delays, and a measured-mode job) on the old and on this one. The step-latency
script is this checkout's in both (the old checkout has none; it only drives the job through the local launcher).

Writes ``engines_before_after.json``: for each side its commit, both scripts' JSON and the load average around them.

    python benchmarks/engines_before_after.py --out DIR     # default: ./torchgcc-results/engines-before-after/<time>/
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(checkout: Path, script: Path, out: Path, extra: list[str]) -> dict:
    """``python script --out out *extra`` with ``checkout`` first on the path; its JSON and the load around it."""
    env = dict(os.environ, PYTHONPATH=str(checkout), OMP_NUM_THREADS="1")
    load_before = os.getloadavg()
    subprocess.run([sys.executable, str(script), "--out", str(out), *extra], cwd=checkout, env=env, check=True)
    produced = next(out.glob("*.json"))
    return {
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        **json.loads(produced.read_text()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default="ca2f9e5", help="the commit measured as 'before'")
    parser.add_argument("--steps", type=int, default=40, help="steps of each step-latency job")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    out = args.out or Path("torchgcc-results") / "engines-before-after" / datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="torchgcc-before-") as folder:
        old = Path(folder) / "checkout"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(old)], check=True)
        subprocess.run(["git", "checkout", "-q", args.before], cwd=old, check=True)
        shutil.copy(ROOT / "benchmarks" / "step_latency.py", old / "benchmarks" / "step_latency.py")
        result: dict = {"settings": {"before": args.before, "after": head.strip(), "cpu_count": os.cpu_count()}}
        sides = (("before", old), ("after", ROOT))
        steps = ["--steps", str(args.steps)]
        benchmarks = (("transport", "transport.py", []), ("step_latency", "step_latency.py", steps))
        for name, script, extra in benchmarks:  # each benchmark old then new, so that both see about the same load
            for side, checkout in sides:
                run = _run(checkout, checkout / "benchmarks" / script, Path(folder) / side / name, extra)
                result.setdefault(side, {})[name] = run
    path = out / "engines_before_after.json"
    path.write_text(json.dumps(result, indent=2))
    for side in ("before", "after"):
        transport = result[side]["transport"]["median_s"]
        steps = result[side]["step_latency"]
        print(f"{side}: data plane {1e3 * transport['pg']:.1f} ms, store {1e3 * transport['store']:.1f} ms")
        for mode in ("injected", "measured"):
            rows = steps[mode]["schemes"]
            medians = ", ".join(f"{name} {1e3 * row['median_latency_s']:.1f}" for name, row in rows.items())
            print(f"  {mode} median step latency (ms): {medians}; exit codes {steps[mode]['returncodes']}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
