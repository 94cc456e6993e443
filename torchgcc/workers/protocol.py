"""The engine interface: N workers, each running its tasks one at a time in submission order.

An engine (a :class:`Workers`) only moves tensors and reports which results arrived: it takes :class:`Task` s (one
worker's input rows, and an injected delay), runs each on its worker, and hands back :class:`Completion` s. Which
results to wait for and how to decode them is the caller's (:func:`~torchgcc.workers.rounds.run_round` with a
:class:`~torchgcc.workers.wait.WaitPolicy` and a code; the serving loop). Engines:

- :class:`~torchgcc.workers.processes.ProcessWorkers`: one local process per worker;
- :class:`~torchgcc.workers.virtual.VirtualWorkers`: a virtual clock (a discrete-event simulation that still runs
  the model), for sweeps too large to run in real time; label its numbers as such;
- :class:`~torchgcc.distributed.ray_workers.RayWorkers`: one Ray actor per worker (the ``ray`` extra);
- :class:`~torchgcc.distributed.process_group.ProcessGroupWorkers`: the workers hosted by the ranks of a torchrun
  job, seen from rank 0.

Times are seconds on the engine's clock (:meth:`Workers.now`): ``time.monotonic()`` for the real engines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Optional, Protocol, Sequence

import torch

from torchgcc.model_output import ModelOutput

__all__ = ["Completion", "Task", "Workers"]


@dataclass(frozen=True)
class Task:
    """One worker's share of a batch.

    Attributes:
        key: identifies the task (unique among the tasks in flight).
        worker: the worker that runs it, in ``0 .. N-1``.
        inputs: ``(b, *in)`` rows the model runs on.
        delay_s: seconds the worker stays busy after the model ran (an injected slowdown; the wait ends early if the
            task is cancelled meanwhile).
    """

    key: Hashable
    worker: int
    inputs: torch.Tensor
    delay_s: float = 0.0


@dataclass(frozen=True)
class Completion:
    """A finished task, or a lost worker.

    Attributes:
        key: the task's key (None for a worker lost while idle).
        worker: the worker that ran it.
        output: the model's output on the task's rows (``(b, *out)``, or a tuple, list or dict of such tensors), or
            None when the task failed or the worker was lost (``error`` says why).
        finished_s: when the caller received it (engine clock).
        compute_s: seconds the worker spent in the model (its own measurement; 0 when lost).
        error: None, or why the task failed (an engine whose worker survives its model's exception, such as Ray's)
            or why the worker is gone (it is then in :meth:`Workers.lost_workers`).
    """

    key: Hashable
    worker: int
    output: Optional[ModelOutput]
    finished_s: float
    compute_s: float = 0.0
    error: Optional[str] = None


class Workers(Protocol):
    """N workers, each a FIFO queue of tasks.

    Attributes:
        num_workers: N.
        workers_per_process: the most workers one process hosts (their inputs travel in one message).
    """

    num_workers: int
    workers_per_process: int

    def now(self) -> float:
        """The engine's clock in seconds."""

    def submit(self, tasks: Sequence[Task]) -> None:
        """Queue every task on its worker (returns at once; a task for a lost worker is dropped)."""

    def cancel(self, keys: Sequence[Hashable]) -> None:
        """Drop these tasks if they have not started; a running one stops its injected delay early. No completion is
        delivered for a task dropped before it ran; one already finished may still be."""

    def wait(self, until_s: float) -> list[Completion]:
        """Completions received so far, blocking until there is at least one or the clock reaches ``until_s``
        (``until_s`` in the past: do not block)."""

    def lost_workers(self) -> set[int]:
        """Workers that are gone (their queued tasks will never complete); a worker that came back is not."""

    def close(self) -> None:
        """Stop every worker; idempotent."""
