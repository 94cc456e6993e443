"""An engine on a virtual clock (:class:`~torchgcc.workers.protocol.Workers`): a discrete-event simulation of N FIFO
workers.

Each task occupies its worker for ``service_s + task.delay_s`` virtual seconds from the moment the worker is free;
the model really runs (in zero virtual time) so the outputs and accuracies are real, the latencies simulated.
Encoding, decoding and transport take no virtual time. Use it for sweeps too large for real time, validated
against a real pool on the same settings, and label its numbers as simulated.
"""

from __future__ import annotations

import collections
import heapq
import math
from typing import Hashable, Sequence

import torch
from torch import nn

from torchgcc.checks import check_integer, check_real
from torchgcc.workers.protocol import Completion, Task

__all__ = ["VirtualWorkers"]


class VirtualWorkers:
    """N simulated workers running ``model``.

    :meth:`wait` hands over every completion due at the first instant one is due (ties are common: a constant
    ``service_s`` and equal delays), as a real engine hands over every result that is ready.

    Args:
        model: the network every worker runs, ``(b, *in) -> (b, *out)``.
        num_workers: N (at least 1).
        service_s: virtual seconds every task takes before its injected delay (the model's compute time; finite,
            >= 0).
    """

    def __init__(self, model: nn.Module, num_workers: int, *, service_s: float = 0.0) -> None:
        num_workers = check_integer("num_workers", num_workers, minimum=1)
        service_s = check_real("service_s", service_s, low=0)
        self.model = model.eval()
        self.num_workers = num_workers
        self.workers_per_process = 1
        self.service_s = service_s
        self.clock = 0.0
        self._queues: list[collections.deque[Task]] = [collections.deque() for _ in range(num_workers)]
        self._running: list[tuple[Task, float, int] | None] = [None] * num_workers  # task, start, event sequence
        self._events: list[tuple[float, int, int]] = []  # (finish, sequence, worker) of running tasks
        self._sequence = 0
        self._stopped_early: set[Hashable] = set()

    def now(self) -> float:
        return self.clock

    def submit(self, tasks: Sequence[Task]) -> None:
        for task in tasks:
            self._queues[task.worker].append(task)
            if self._running[task.worker] is None:
                self._start_next(task.worker)

    def cancel(self, keys: Sequence[Hashable]) -> None:
        drop = set(keys)
        for worker, queue in enumerate(self._queues):
            self._queues[worker] = collections.deque(t for t in queue if t.key not in drop)
            running = self._running[worker]
            if running is not None and running[0].key in drop and running[0].key not in self._stopped_early:
                task, start, _ = running
                finish = max(self.clock, start + self.service_s)  # the model runs to the end, the delay stops
                self._stopped_early.add(task.key)
                self._running[worker] = (task, start, self._push(finish, worker))

    def wait(self, until_s: float) -> list[Completion]:
        completions: list[Completion] = []
        while self._events:
            finish, sequence, worker = self._events[0]
            running = self._running[worker]
            if running is None or running[2] != sequence:  # stale: the task was stopped early and re-scheduled
                heapq.heappop(self._events)
                continue
            if finish > until_s or (completions and finish > self.clock):  # only the first instant's completions
                break
            heapq.heappop(self._events)
            self.clock = max(self.clock, finish)
            task = running[0]
            self._running[worker] = None
            self._start_next(worker)
            if task.key in self._stopped_early:
                self._stopped_early.discard(task.key)
                continue  # a cancelled task delivers nothing
            with torch.inference_mode():
                output = self.model(task.inputs)
            completions.append(Completion(task.key, worker, output, self.clock, compute_s=self.service_s))
        if not completions and math.isfinite(until_s):
            self.clock = max(self.clock, until_s)
        return completions

    def lost_workers(self) -> set[int]:
        return set()

    def close(self) -> None:
        self._queues = [collections.deque() for _ in range(self.num_workers)]

    def _start_next(self, worker: int) -> None:
        if not self._queues[worker]:
            return
        task = self._queues[worker].popleft()
        finish = self.clock + self.service_s + task.delay_s
        self._running[worker] = (task, self.clock, self._push(finish, worker))

    def _push(self, finish: float, worker: int) -> int:
        """Schedule the end of ``worker``'s running task; returns the event's sequence number."""
        self._sequence += 1
        heapq.heappush(self._events, (finish, self._sequence, worker))
        return self._sequence

    def __enter__(self) -> "VirtualWorkers":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
