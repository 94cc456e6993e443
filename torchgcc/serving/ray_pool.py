"""A :class:`~torchgcc.serving.pool.WorkerPool` on Ray actors (:class:`~torchgcc.distributed.ray_workers.RayWorkers`).

Each actor runs its tasks one at a time in submission order (Ray's default for actors), which is the FIFO worker
the serving loop expects. :meth:`RayPool.wait` is ``ray.wait`` on every outstanding task; cancellation is
``ray.cancel`` (a queued task never runs, a running one cuts its injected delay short). A task whose actor died
reports the worker lost.
"""

from __future__ import annotations

import time

from torchgcc.distributed.ray_workers import RayWorkers
from torchgcc.serving.pool import Completion, Task

__all__ = ["RayPool"]


class RayPool:
    """N Ray actors as a worker pool.

    Args:
        workers: the actors (their number is N).
    """

    def __init__(self, workers: RayWorkers) -> None:
        self.workers = workers
        self.ray = workers.ray
        self.num_workers = workers.num_workers
        self._tasks: dict[object, tuple[object, int]] = {}  # ref -> (key, worker)
        self._refs: dict[object, object] = {}  # key -> ref
        self._lost: set[int] = set()

    def now(self) -> float:
        return time.monotonic()

    def submit(self, task: Task) -> None:
        if task.worker in self._lost:
            return
        ref = self.workers.run(task.worker, task.inputs, task.delay_s)
        self._tasks[ref] = (task.key, task.worker)
        self._refs[task.key] = ref

    def cancel(self, keys: list) -> None:
        for key in keys:
            ref = self._refs.pop(key, None)
            if ref is not None:
                del self._tasks[ref]
                self.ray.cancel(ref)

    def wait(self, until_s: float) -> list[Completion]:
        remaining = max(until_s - time.monotonic(), 0.0)
        if not self._tasks:
            if remaining != float("inf"):
                time.sleep(remaining)
            return []
        refs = list(self._tasks)
        ready, rest = self.ray.wait(refs, num_returns=1, timeout=None if remaining == float("inf") else remaining)
        if ready and rest:  # whatever else is already done comes along
            more, _ = self.ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        completions = []
        for ref in ready:
            key, worker = self._tasks.pop(ref)
            del self._refs[key]
            try:
                output, compute_s = self.ray.get(ref)
            except self.ray.exceptions.TaskCancelledError:
                continue
            except self.ray.exceptions.RayActorError as error:
                self._lost.add(worker)
                reason = f"worker {worker}: {type(error).__name__}: {str(error).splitlines()[0]}"
                completions.append(Completion(key, worker, None, time.monotonic(), error=reason))
                continue
            completions.append(Completion(key, worker, output, time.monotonic(), compute_s))
        return completions

    def lost_workers(self) -> set[int]:
        return set(self._lost)

    def close(self) -> None:
        """Cancel what is outstanding (the actors belong to ``workers``: close them there)."""
        self.cancel(list(self._refs))

    def __enter__(self) -> "RayPool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
