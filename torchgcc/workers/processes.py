"""An engine of local processes (:class:`~torchgcc.workers.protocol.Workers`): one per worker, each holding the model.

Workers are forked from a forkserver that has imported torch once (fast starts, no torch state inherited from
the coordinator). Each worker reads tasks and cancellations from its pipe on a reader thread and runs its queue in
order on the main thread: model, then the injected delay (cut short if the task is cancelled meanwhile; a
cancelled task delivers nothing). A worker runs in its own session, so a Ctrl-C at the terminal reaches only the
coordinator (which then closes the workers), and it exits with status 1 as soon as its coordinator is gone (its pipe
closes), so it never outlives it.
"""

from __future__ import annotations

import collections
import functools
import multiprocessing
import multiprocessing.connection
import os
import tempfile
import threading
import time
from typing import Hashable, Sequence

import torch
from torch import nn

from torchgcc.checks import check_integer
from torchgcc.workers.protocol import Completion, Task

__all__ = ["ProcessWorkers"]

_TASK, _CANCEL, _STOP = "task", "cancel", "stop"
#: exit status of a worker whose coordinator vanished.
EXIT_ORPHANED = 1


def _start(process: multiprocessing.process.BaseProcess) -> None:
    """``process.start()``, with the fix named where the forkserver cannot bind its socket: its path lies under the
    temporary folder, and a Unix socket's path is short (107 bytes on Linux)."""
    try:
        process.start()
    except OSError as error:
        if "AF_UNIX path too long" not in str(error):
            raise
        raise OSError(
            f"ProcessWorkers: the worker processes' forkserver cannot create its socket under the temporary folder "
            f"{tempfile.gettempdir()!r} (a Unix socket's path holds at most 107 bytes on Linux, 103 on macOS); set "
            "TMPDIR to a shorter folder, such as /tmp"
        ) from error


class ProcessWorkers:
    """N worker processes running ``model`` (one worker per process).

    Args:
        model: the network (pickled to every worker; its class must be importable there).
        num_workers: N (at least 1).
        cpus: per worker, the CPU cores it is pinned to (``os.sched_setaffinity``); None: not pinned.
        threads: torch threads per worker.
        start_timeout_s: the longest to wait for every worker to report ready.
    """

    def __init__(
        self,
        model: nn.Module,
        num_workers: int,
        *,
        cpus: list[list[int]] | None = None,
        threads: int = 1,
        start_timeout_s: float = 120.0,
    ) -> None:
        num_workers = check_integer("num_workers", num_workers, minimum=1)
        if cpus is not None and len(cpus) != num_workers:
            raise ValueError(f"cpus needs one list of cores per worker ({num_workers}), got {len(cpus)}")
        self.num_workers = num_workers
        self.workers_per_process = 1
        self._lost: set[int] = set()
        self._processes: list[multiprocessing.process.BaseProcess] = []
        self._tasks: list[multiprocessing.connection.Connection] = []
        self._results: dict[multiprocessing.connection.Connection, int] = {}
        self._closed = False
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["torchgcc.workers.processes"])
        try:
            for worker in range(num_workers):
                task_reader, task_writer = context.Pipe(duplex=False)
                result_reader, result_writer = context.Pipe(duplex=False)
                process = context.Process(
                    target=_worker_main,
                    args=(worker, model, task_reader, result_writer, None if cpus is None else cpus[worker], threads),
                    name=f"torchgcc-worker-{worker}",
                    daemon=True,
                )
                _start(process)
                task_reader.close()
                result_writer.close()
                self._processes.append(process)
                self._tasks.append(task_writer)
                self._results[result_reader] = worker
            self._wait_ready(start_timeout_s)
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids, by worker."""
        return [int(process.pid or 0) for process in self._processes]

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        waiting = dict(self._results)
        while waiting:
            ready = multiprocessing.connection.wait(list(waiting), max(deadline - time.monotonic(), 0))
            if not ready:
                raise TimeoutError(f"workers {sorted(waiting.values())} did not start in {timeout_s:.0f} s")
            for connection in ready:
                assert isinstance(connection, multiprocessing.connection.Connection)
                try:
                    connection.recv()
                except EOFError:
                    worker = waiting[connection]
                    raise RuntimeError(f"worker {worker} exited while starting") from None
                del waiting[connection]

    def now(self) -> float:
        return time.monotonic()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("ProcessWorkers is closed (its worker processes are stopped): start a new one")

    def submit(self, tasks: Sequence[Task]) -> None:
        self._check_open()
        for task in tasks:
            if task.worker not in self._lost:
                # contiguous: a view would travel with its whole storage (every worker's inputs)
                self._send(task.worker, (_TASK, task.key, task.inputs.contiguous(), float(task.delay_s)))

    def cancel(self, keys: Sequence[Hashable]) -> None:
        if not keys or self._closed:  # nothing runs on a closed pool
            return
        for worker in range(self.num_workers):
            if worker not in self._lost:
                self._send(worker, (_CANCEL, list(keys)))

    def _send(self, worker: int, message: tuple) -> None:
        try:
            self._tasks[worker].send(message)
        except (BrokenPipeError, OSError):
            pass  # the worker died; its result pipe reports that

    def wait(self, until_s: float) -> list[Completion]:
        self._check_open()
        live = [c for c, worker in self._results.items() if worker not in self._lost]
        if not live:
            return []
        remaining = until_s - time.monotonic()
        ready = multiprocessing.connection.wait(live, None if remaining == float("inf") else max(remaining, 0.0))
        completions = []
        for connection in ready:
            assert isinstance(connection, multiprocessing.connection.Connection)
            worker = self._results[connection]
            try:
                while connection.poll():
                    _, key, output, compute_s = connection.recv()
                    completions.append(Completion(key, worker, output, time.monotonic(), compute_s))
            except (EOFError, OSError):
                self._lost.add(worker)
                process = self._processes[worker]
                process.join(timeout=1.0)
                completions.append(
                    Completion(
                        None,
                        worker,
                        None,
                        time.monotonic(),
                        error=f"worker {worker} (pid {process.pid}) exited with status {process.exitcode}",
                    )
                )
        return completions

    def lost_workers(self) -> set[int]:
        return set(self._lost)

    def close(self, *, grace_s: float = 2.0) -> None:
        """Ask every worker to stop, wait up to ``grace_s``, then kill the rest; idempotent. A closed pool takes no
        more tasks (``RuntimeError``)."""
        self._closed = True
        for worker in range(len(self._tasks)):
            self._send(worker, (_STOP,))
        deadline = time.monotonic() + grace_s
        for process in self._processes:
            process.join(timeout=max(deadline - time.monotonic(), 0.0))
            if process.is_alive():
                process.kill()
                process.join()
        for connection in [*self._tasks, *self._results]:
            connection.close()
        self._tasks, self._results, self._processes = [], {}, []

    def __enter__(self) -> "ProcessWorkers":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _worker_main(worker: int, model: nn.Module, tasks, results, cores: list[int] | None, threads: int) -> None:
    """A worker process: a reader thread fills the queue, the main thread runs it."""
    os.setsid()  # out of the terminal's process group: Ctrl-C is the coordinator's to handle
    if cores is not None:
        os.sched_setaffinity(0, cores)
    torch.set_num_threads(threads)
    model = model.eval()
    queue: collections.deque[tuple] = collections.deque()
    cancelled: set = set()
    pending: set = set()  # keys queued or running (cancellations of others are ignored)
    state = {"stop": False}
    changed = threading.Condition()

    def read() -> None:
        try:
            while True:
                message = tasks.recv()
                with changed:
                    if message[0] == _TASK:
                        queue.append(message)
                        pending.add(message[1])
                    elif message[0] == _CANCEL:
                        cancelled.update(key for key in message[1] if key in pending)
                    else:
                        state["stop"] = True
                    changed.notify_all()
        except (EOFError, OSError):  # the coordinator is gone: never outlive it
            os._exit(EXIT_ORPHANED)

    threading.Thread(target=read, name="torchgcc-worker-reader", daemon=True).start()
    results.send(("ready", os.getpid()))
    while True:
        with changed:
            changed.wait_for(lambda: queue or state["stop"])
            if state["stop"]:
                return
            _, key, inputs, delay_s = queue.popleft()
            skip = key in cancelled
        if not skip:
            start = time.monotonic()
            with torch.inference_mode():
                output = model(inputs)
            compute_s = time.monotonic() - start
            with changed:
                changed.wait_for(functools.partial(_stop_or_cancelled, key, cancelled, state), timeout=delay_s)
                skip = key in cancelled
        with changed:
            cancelled.discard(key)
            pending.discard(key)
        if not skip:
            try:
                results.send(("done", key, output, compute_s))
            except (BrokenPipeError, OSError):
                os._exit(EXIT_ORPHANED)


def _stop_or_cancelled(key: Hashable, cancelled: set, state: dict) -> bool:
    """Whether a worker's injected delay after ``key`` ends early: the task was cancelled or the worker stops."""
    return key in cancelled or bool(state["stop"])
