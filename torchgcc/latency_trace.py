"""Recorded per-worker latencies, replayed as a latency model.

A trace is a JSON file::

    {"format": "torchgcc.latency_trace/1",
     "num_workers": 8,
     "delays_s": [[0.021, 0.019, ...], ...],      # one row per step, one column per worker, seconds
     "censored": [[false, true, ...], ...],       # optional: true where the value is a lower bound
     "source": "free text: where the numbers came from"}

Record one from a run of the distributed executor saved with ``--save run.pt`` (best in ``--mode measured``, so
the numbers are the real completion times of every worker, from the start of the step to its result on the
coordinator; add ``--wait-deadline D`` with a ``CODE:adaptive`` scheme, or any deadline, to see late workers)::

    python -c "from torchgcc.latency_trace import LatencyTrace; \\
        LatencyTrace.from_saved_run('run.pt').save('trace.json')"

A worker not heard from by the end of its step (``arrival_s`` is ``inf``) is recorded as the step's watched time
with ``censored`` true: its real latency was at least that. Replay it with
``LatencyStragglers.from_trace('trace.json')`` (:class:`TraceReplay`: the rows in order, from the first again
after the last; the latency model ``trace`` with ``path=...`` does the same from the command line).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from torchgcc.stragglers import LatencyModel

__all__ = ["FORMAT", "LatencyTrace", "TraceReplay"]

#: the ``format`` field of a trace file.
FORMAT = "torchgcc.latency_trace/1"


@dataclass
class LatencyTrace:
    """Per-step, per-worker latencies.

    Attributes:
        delays_s: ``(T, N)`` float64 seconds, finite and non-negative.
        censored: ``(T, N)`` bool, True where the value is a lower bound (the worker was not seen by then).
        source: where the numbers came from.
    """

    delays_s: torch.Tensor
    censored: torch.Tensor
    source: str = ""

    def __post_init__(self) -> None:
        self.delays_s = torch.as_tensor(self.delays_s, dtype=torch.float64)
        self.censored = torch.as_tensor(self.censored, dtype=torch.bool)
        if self.delays_s.ndim != 2 or self.delays_s.numel() == 0:
            raise ValueError(f"a trace needs delays of shape (steps, workers), got {tuple(self.delays_s.shape)}")
        if self.censored.shape != self.delays_s.shape:
            raise ValueError(f"censored {tuple(self.censored.shape)} must match delays {tuple(self.delays_s.shape)}")
        if not (torch.isfinite(self.delays_s).all() and (self.delays_s >= 0).all()):
            raise ValueError("trace delays must be finite and non-negative seconds")

    @property
    def num_workers(self) -> int:
        return self.delays_s.shape[1]

    def save(self, path: str | Path) -> Path:
        """Write the JSON file; returns its path."""
        record = {
            "format": FORMAT,
            "num_workers": self.num_workers,
            "delays_s": self.delays_s.tolist(),
            "censored": self.censored.tolist(),
            "source": self.source,
        }
        path = Path(path)
        path.write_text(json.dumps(record))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "LatencyTrace":
        """Read a trace file (see the module docstring for the format)."""
        record = json.loads(Path(path).read_text())
        if record.get("format") != FORMAT:
            raise ValueError(f"{path} is not a latency trace (format {record.get('format')!r}, expected {FORMAT!r})")
        delays = torch.tensor(record["delays_s"], dtype=torch.float64)
        censored = record.get("censored")
        trace = cls(
            delays,
            torch.zeros_like(delays, dtype=torch.bool) if censored is None else censored,
            record.get("source", ""),
        )
        if trace.num_workers != record["num_workers"]:
            raise ValueError(f"{path}: num_workers {record['num_workers']} but rows of {trace.num_workers} delays")
        return trace

    @classmethod
    def from_saved_run(cls, path: str | Path, *, scheme: str | None = None) -> "LatencyTrace":
        """The worker arrival times of a run saved by the distributed executor (``--save``), one row per step of
        ``scheme`` (default: the run's first scheme); unseen workers are censored at the step's watched time."""
        saved = torch.load(path, weights_only=False)
        steps = saved["steps"]
        if not steps or "arrival_s" not in steps[0]:
            raise ValueError(f"{path} has no per-worker arrival times (save a run of torchgcc.distributed with --save)")
        scheme = steps[0]["scheme"] if scheme is None else scheme
        rows = [s for s in steps if s["scheme"] == scheme]
        if not rows:
            raise ValueError(f"{path} has no steps of scheme {scheme!r}")
        arrival = torch.stack([s["arrival_s"].double() for s in rows])
        watched = torch.tensor([s["watched_s"] for s in rows], dtype=torch.float64).unsqueeze(1)
        censored = ~torch.isfinite(arrival)
        delays = torch.where(censored, watched.expand_as(arrival), arrival)
        mode = saved.get("args", {}).get("mode", "?")
        return cls(delays, censored, f"{path}: scheme {scheme}, mode {mode}, {len(rows)} steps")


class TraceReplay(LatencyModel):
    """A latency model that replays a :class:`LatencyTrace` row by row (deterministic: the generator is unused).

    ``sample((B, N))`` returns the next B rows, from the first again after the last; N must be the trace's.
    """

    def __init__(self, trace: LatencyTrace, *, start: int = 0) -> None:
        self.trace = trace
        self.position = start % len(trace.delays_s)

    @classmethod
    def from_file(cls, path: str | Path, *, start: int = 0) -> "TraceReplay":
        return cls(LatencyTrace.load(path), start=start)

    def sample(self, shape, generator):
        *batch, workers = shape
        if workers != self.trace.num_workers:
            raise ValueError(f"the trace has {self.trace.num_workers} workers, asked for {workers}")
        count = math.prod(batch)
        rows = (self.position + torch.arange(count)) % len(self.trace.delays_s)
        self.position = int(rows[-1] + 1) % len(self.trace.delays_s) if count else self.position
        return self.trace.delays_s[rows].reshape(*batch, workers).to(generator.device)

    def __repr__(self) -> str:
        steps, workers = self.trace.delays_s.shape
        return f"TraceReplay({steps} steps x {workers} workers, position={self.position})"
