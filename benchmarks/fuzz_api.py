"""The API fuzzer of ``tests/api_fuzzer.py`` (what it draws and the oracles it checks are in its docstring), from the
command line; with ``--probes``, the probes of ``tests/api_probes.py`` instead (the classes of silent wrong answers
and unclear errors an independent fuzzer found, with their own oracles).

Writes JSON (settings, seed, counts by category and by entry point, up to 20 examples per category with the snippet
that reproduces each) to ``--out``; progress on stderr. It needs the test extra (``pip install -e ".[test]"``: the
probes use hypothesis's strategies). The committed results come from::

    python benchmarks/fuzz_api.py --calls 20000 --seed 1203 --out benchmarks/results/fuzz_api.json
    python benchmarks/fuzz_api.py --probes --calls 3000 --seed 1202 --out benchmarks/results/fuzz_probes.json
    python benchmarks/fuzz_api.py --only 1234          # re-run one call of the seeded sequence, print its snippet
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fuzzer lives with the tests
import api_fuzzer  # noqa: E402
import api_probes  # noqa: E402


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="torchgcc-results/fuzz_api/results.json")
    parser.add_argument("--only", type=int, default=None, help="re-run one call of the sequence and print it")
    parser.add_argument("--probes", action="store_true", help="run tests/api_probes.py's probes instead")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    source = api_probes if args.probes else api_fuzzer
    if args.only is not None:
        case = source.draw(args.seed, args.only)
        print(case.snippet)
        print(json.dumps(api_fuzzer.run_case(case), indent=1))
        return 0
    load_before = os.getloadavg()
    start = time.perf_counter()
    result = api_fuzzer.fuzz(args.calls, args.seed, draw=source.draw, entry_points=source.ENTRY_POINTS)
    record = {
        "settings": {
            "draws": "tests/api_probes.py" if args.probes else "tests/api_fuzzer.py",
            "calls": args.calls,
            "seed": args.seed,
            "threads": torch.get_num_threads(),
            "weights": source.WEIGHTS,
            "max_examples": api_fuzzer.MAX_EXAMPLES,
        },
        "environment": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "seconds": round(time.perf_counter() - start, 1),
        },
        **result,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(result["counts"]), json.dumps(result["flags"]), f"-> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
