"""The executor interface the serving loop runs on: N workers, each running its tasks one at a time in order.

A :class:`WorkerPool` takes :class:`Task` s (one worker's input rows and an injected delay), runs each on its
worker in submission order, and hands back :class:`Completion` s. Implementations:

- :class:`~torchgcc.serving.process_pool.ProcessPool`: one local process per worker (real execution);
- :class:`~torchgcc.serving.ray_pool.RayPool`: one Ray actor per worker (real execution, optional extra ``ray``);
- :class:`~torchgcc.serving.virtual_pool.VirtualPool`: a virtual clock (a discrete-event simulation that still
  runs the model for the outputs), for sweeps too large to run in real time; label its numbers as such.

Times are seconds on the pool's clock (:meth:`WorkerPool.now`): ``time.monotonic()`` for the real pools.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Protocol

import torch

__all__ = ["Completion", "Task", "WorkerPool"]


@dataclass(frozen=True)
class Task:
    """One worker's share of a batch.

    Attributes:
        key: identifies the task (the serving loop uses ``(batch, slot, copy)``).
        worker: the worker that runs it, in ``0 .. N-1``.
        inputs: ``(b, *in)`` rows the model runs on.
        delay_s: seconds the worker stays busy after the model ran (an injected slowdown; the wait ends early
            if the task is cancelled meanwhile).
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
        output: ``(b, *out)`` the model's output, or None when the worker was lost (``error`` says why).
        finished_s: when the coordinator received it (pool clock).
        compute_s: seconds the worker spent in the model (its own measurement; 0 when lost).
        error: None, or why the worker is gone (it is then in :meth:`WorkerPool.lost_workers`).
    """

    key: Hashable
    worker: int
    output: torch.Tensor | None
    finished_s: float
    compute_s: float = 0.0
    error: str | None = None


class WorkerPool(Protocol):
    """N workers, each a FIFO queue of tasks."""

    num_workers: int

    def now(self) -> float:
        """The pool's clock in seconds."""

    def submit(self, task: Task) -> None:
        """Queue ``task`` on its worker (returns at once)."""

    def cancel(self, keys: list) -> None:
        """Drop these tasks if they have not started; a running one stops its injected delay early. No
        completion is delivered for a task dropped before it ran; one already finished may still be."""

    def wait(self, until_s: float) -> list[Completion]:
        """Completions received so far, blocking until there is at least one or the clock reaches ``until_s``
        (``until_s`` in the past: do not block)."""

    def lost_workers(self) -> set[int]:
        """Workers that are gone (their queued tasks will never complete)."""

    def close(self) -> None:
        """Stop every worker; idempotent."""
