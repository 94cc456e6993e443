"""Where a decode's time goes: the aten ops of decoder calls grouped by kind, against the bare bmm, in one run.

At N = ``--workers``, B = ``--groups``, K = ``--inputs``, d = ``--outputs`` (defaults: issue 17's acceptance row) with
S = N / 4 stragglers at random places (a fresh mask each call), for the ``--rule`` decoder on the ``--backend``
path (default ``torch``: the batched plan whose ops this groups; the CPU default, the numba kernel, is one call the
profiler does not see inside): the median wall time of
a bare ``torch.bmm`` of ``(B, K, N)`` matrices with the ``(B, N, d)`` float32 results and of a decoder call, paired
repeat by repeat as in ``benchmarks/decode.py``, then one ``torch.profiler`` pass over ``--calls`` decoder calls. Each
top-level aten op's time (its children included) is put in a group:

- ``apply``: the decode's own bmm of the matrices with the results (input ``(B, N, d)``): the bare bmm's work;
- ``lapack``: ``linalg_cholesky_ex`` and ``linalg_solve_triangular`` of the solve's blocks;
- ``block_products``: the solve's other batched products (``bmm``, ``baddbmm`` on small matrices);
- ``indexing``: the sort that compacts the survivors, gathers, scatters, ``index_select``, ``index_add_`` and
  ``searchsorted``;
- ``check``: ``check=True``'s finiteness flag (the sum of the estimates, ``aminmax`` for float16 ones, and its read);
- ``elementwise``: everything else (arithmetic, comparisons, fills, copies, views).

The profiler adds its own cost per op (and keeps tensors alive, so the apply's large output lands in fresh pages:
its profiled time is not the bmm's), so the groups are shares, not times. The unprofiled build is estimated as the
median over repeats of decode minus bmm (the apply is that bmm); the budget is what the build may cost for the
decode to stay within ``TARGET`` times the bmm. Writes JSON (settings, seeds, load average before and after, every
group and op) to ``--out``::

    python benchmarks/decode_profile.py --threads 2 --out benchmarks/results/decode_profile.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from pathlib import Path

import torch
from torch.profiler import profile

import torchgcc
from torchgcc.codes.gcc import LAMBDA_RULES
from torchgcc.stragglers import FixedStragglers
from torchgcc.timing import make_timer

#: Issue 17's bound on the spacing rule's decode, in bare bmms.
TARGET = 1.5
LAPACK = {"aten::linalg_cholesky_ex", "aten::linalg_solve_triangular"}
PRODUCTS = {"aten::bmm", "aten::baddbmm"}
INDEXING = {
    "aten::sort",
    "aten::gather",
    "aten::scatter_",
    "aten::index_select",
    "aten::index_add_",
    "aten::searchsorted",
}
CHECK = {"aten::aminmax", "aten::item", "aten::_local_scalar_dense"}


def group_of(name: str, shapes: list, outputs: int) -> str:
    """The group of a top-level op ``name`` with input ``shapes``."""
    if name == "aten::bmm" and len(shapes) > 1 and shapes[1] and shapes[1][-1] == outputs:
        return "apply"
    if name in LAPACK:
        return "lapack"
    if name in PRODUCTS:
        return "block_products"
    if name in INDEXING:
        return "indexing"
    if name in CHECK or (name == "aten::sum" and shapes and len(shapes[0]) == 3 and shapes[0][-1] == outputs):
        return "check"
    return "elementwise"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--rule", default="spacing", help="lambda_dec of the GCC decoder (a rule or a number)")
    parser.add_argument("--backend", default="torch", choices=torchgcc.codes.maps.BACKENDS, help="decoder backend")
    parser.add_argument("--workers", type=int, default=64, help="N")
    parser.add_argument("--groups", type=int, default=512, help="B")
    parser.add_argument("--inputs", type=int, default=16, help="K")
    parser.add_argument("--outputs", type=int, default=1000, help="results per worker d")
    parser.add_argument("--repeats", type=int, default=21, help="paired timed repeats")
    parser.add_argument("--calls", type=int, default=10, help="profiled decoder calls")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/decode/decode_profile.json"))
    args = parser.parse_args()
    if min(args.repeats, args.calls, args.inputs, args.outputs, args.groups) < 1 or args.workers < 4:
        parser.error("need --workers >= 4 and positive --repeats, --calls, --inputs, --outputs, --groups")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    rule = args.rule if args.rule in LAMBDA_RULES else float(args.rule)
    load_before = os.getloadavg()
    generator = torch.Generator().manual_seed(args.seed)
    shape = (args.groups, args.workers, args.outputs)
    y = torch.randn(shape, generator=generator)
    matrices = torch.randn(args.groups, args.inputs, args.workers, generator=generator)
    sampler = FixedStragglers(args.workers // 4, seed=args.seed)
    masks = [sampler.sample(args.groups, args.workers) for _ in range(args.repeats + args.calls + 1)]
    decoder = torchgcc.GCC(args.inputs, args.workers, lambda_dec=rule, backend=args.backend).decoder
    decoder(y, masks[0])  # the default calibrates on its first call: time the steady state
    timer = make_timer("cpu")
    bmm, decode = [], []
    for repeat, mask in enumerate(masks[1 : args.repeats + 1]):
        calls = [("bmm", lambda: torch.bmm(matrices, y)), ("decode", lambda mask=mask: decoder(y, mask))]
        for name, call in calls[repeat % 2 :] + calls[: repeat % 2]:
            (bmm if name == "bmm" else decode).append(timer.time_once(call))
    with profile(record_shapes=True) as recorded:
        for mask in masks[args.repeats + 1 :]:
            decoder(y, mask)
    ops: dict[str, dict] = {}
    for event in recorded.events():
        parent = event.cpu_parent
        if not event.name.startswith("aten::") or (parent is not None and parent.name.startswith("aten::")):
            continue  # children are counted in their top-level op's time
        key = (group_of(event.name, event.input_shapes, args.outputs), event.name)
        entry = ops.setdefault(key, {"group": key[0], "op": key[1], "calls": 0, "ms": 0.0})
        entry["calls"] += 1
        entry["ms"] += event.cpu_time_total / 1e3
    rows = sorted(ops.values(), key=lambda entry: -entry["ms"])
    for entry in rows:
        entry["calls"] /= args.calls
        entry["ms"] /= args.calls
    groups = {}
    for entry in rows:
        if entry["group"] != "apply":
            groups[entry["group"]] = groups.get(entry["group"], 0.0) + entry["ms"]
    bmm_ms = 1e3 * statistics.median(bmm)
    report = {
        "settings": {key: value for key, value in vars(args).items() if key != "out"},
        "environment": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
        "bmm_ms": bmm_ms,
        "decode_ms": 1e3 * statistics.median(decode),
        "decode_over_bmm": statistics.median(d / b for d, b in zip(decode, bmm)),
        "target": TARGET,
        "build_ms": 1e3 * statistics.median(d - b for d, b in zip(decode, bmm)),
        "build_budget_ms": (TARGET - 1) * bmm_ms,
        "profiled_build_ms": sum(groups.values()),
        "build_groups_ms": dict(sorted(groups.items(), key=lambda item: -item[1])),
        "ops": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(
        f"N={args.workers} B={args.groups} K={args.inputs} d={args.outputs} {args.rule}: bmm {bmm_ms:.2f} ms, decode "
        f"{report['decode_ms']:.2f} ms ({report['decode_over_bmm']:.2f}x); build {report['build_ms']:.2f} ms, its "
        f"budget at {TARGET}x {report['build_budget_ms']:.2f} ms; profiled build by group:"
    )
    for group, ms in report["build_groups_ms"].items():
        print(f"  {group:15s} {ms:7.2f} ms per call ({100 * ms / report['profiled_build_ms']:.0f}%)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
