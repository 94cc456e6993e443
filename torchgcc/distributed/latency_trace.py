"""Latency traces: per-worker latencies recorded from a run of the executor, written to a file, replayed later.

A trace is a JSON file::

    {"format": "torchgcc.latency_trace/1",
     "num_workers": 8,
     "delays_s": [[0.021, 0.019, ...], ...],      # one row per step, one column per worker, seconds
     "censored": [[false, true, ...], ...],       # optional: true where the value is a lower bound
     "source": "free text: where the numbers came from"}

Record one from a run saved with ``--save run.pt`` (best in ``--mode measured``: then the numbers are the real
time from the start of each step to each worker's result on the coordinator; with ``--mode injected`` they
include the injected delays)::

    python -c "from torchgcc.distributed.latency_trace import save_trace, trace_from_saved_run; \\
        save_trace(trace_from_saved_run('run.pt'), 'trace.json')"

A worker not heard from by the end of its step (lost, or slower than the step: its ``arrival_s`` is ``inf``) is
recorded as the step's watched time with ``censored`` true: its real latency was at least that (a
``CODE:adaptive`` scheme with ``--wait-deadline D`` watches every step for D seconds). Replay it with
``LatencyStragglers.from_trace('trace.json')`` or the latency model ``trace`` (``--latency trace
--latency-param path=trace.json``): :class:`~torchgcc.stragglers.TraceReplay`, the rows in order.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from torchgcc.stragglers import TRACE_FORMAT, TraceReplay

__all__ = ["save_trace", "trace_from_saved_run"]


def trace_from_saved_run(path: str | Path, *, scheme: str | None = None) -> TraceReplay:
    """The worker arrival times of a run saved with ``--save``, one row per step of ``scheme`` (default: the
    run's first scheme); workers not seen are censored at the step's watched time."""
    saved = torch.load(path, weights_only=False)
    steps = saved.get("steps", [])
    if not steps or "arrival_s" not in steps[0]:
        raise ValueError(f"{path} has no per-worker arrival times (steps with 'arrival_s': a saved distributed job)")
    scheme = steps[0]["scheme"] if scheme is None else scheme
    rows = [s for s in steps if s["scheme"] == scheme]
    if not rows:
        raise ValueError(f"{path} has no steps of scheme {scheme!r}")
    arrival = torch.stack([s["arrival_s"].double() for s in rows])
    watched = torch.tensor([s["watched_s"] for s in rows], dtype=torch.float64).unsqueeze(1)
    censored = ~torch.isfinite(arrival)
    delays = torch.where(censored, watched.expand_as(arrival), arrival)
    mode = saved.get("args", {}).get("mode", "?")
    return TraceReplay(delays, censored, source=f"{path}: scheme {scheme}, mode {mode}, {len(rows)} steps")


def save_trace(trace: TraceReplay, path: str | Path) -> Path:
    """Write ``trace`` as a trace file (the format above); returns the path."""
    record = {
        "format": TRACE_FORMAT,
        "num_workers": trace.num_workers,
        "delays_s": trace.delays_s.tolist(),
        "censored": trace.censored.tolist(),
        "source": trace.source,
    }
    path = Path(path)
    path.write_text(json.dumps(record))
    return path
