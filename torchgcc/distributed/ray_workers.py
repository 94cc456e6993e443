"""An engine of Ray actors: each holds the model and runs one task at a time, in submission order.

Needs the ``ray`` extra (``pip install 'torchgcc[ray]'``). :func:`local_ray` starts a local Ray instance in a
temporary folder (no dashboard, worker logs kept out of the driver's output) and removes it again;
:class:`RayWorkers` starts the N actors and is an engine (:class:`~torchgcc.workers.Workers`): use it with
``CodedModule(model, code, workers=RayWorkers(model, N), wait=WaitPolicy(num_stragglers=S))`` or the serving
loop. A task runs the model on its rows, then waits its injected delay; the wait ends early when the task is
cancelled (``ray.cancel``), so a straggler whose result is no longer needed does not stay busy. Actors restart
after a crash only when ``max_restarts > 0`` (Ray rebuilds the model from the same weights; the task that was
running fails).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Hashable, Iterator, Sequence

import torch
from torch import nn

from torchgcc.checks import check_integer
from torchgcc.optional import require
from torchgcc.workers import Completion, Task

__all__ = ["RayWorkers", "local_ray"]

logger = logging.getLogger("torchgcc.distributed")

#: the longest single ``ray.wait`` of :meth:`RayWorkers.wait`: a signal handler runs inside it, but its exception
#: (Ctrl-C, a job's termination) comes out only when the call returns.
_WAIT_SLICE_S = 0.1


@contextlib.contextmanager
def local_ray(num_cpus: int | None = None) -> Iterator[object]:
    """Start a local Ray instance for this process and shut it down on exit (Ctrl-C included), removing its
    temporary folder; yields the ``ray`` module. If Ray is already initialised here, that instance is used and left
    running.

    Args:
        num_cpus: CPUs Ray may schedule on (default: this machine's).
    """
    ray = require("ray")
    if ray.is_initialized():  # the caller's instance: use it and leave it running
        yield ray
        return
    folder = tempfile.mkdtemp(prefix="torchgcc-ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
    try:
        ray.init(
            num_cpus=num_cpus or os.cpu_count(),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            _temp_dir=folder,  # short (unix socket paths are limited to 107 bytes) and ours to remove
        )
        yield ray
    finally:
        # also after a ray.init that did not finish (a SIGTERM meets Ray's own handler while it starts): the processes
        # it had started are stopped here, and waited for, so that none writes into the folder after it is removed
        # (Ray's atexit hook would stop them later, logging into a folder already gone: it came back)
        ray.shutdown(wait_for_processes=True)
        # a ray.init cut short inside its node's start leaves that node's first processes unknown to ray.shutdown:
        # one of them (the GCS server) wrote its port file into the folder after it was removed, and so brought it back
        _stop_processes_naming(folder)
        shutil.rmtree(folder, ignore_errors=True)


def _stop_processes_naming(folder: str, timeout_s: float = 5.0) -> None:
    """SIGTERM every other process whose command line names ``folder`` (Linux's ``/proc``; none elsewhere), SIGKILL
    those still running after ``timeout_s``, and wait up to ``timeout_s`` more for them (reaping this process's own
    children); a warning names any left."""
    pids = _processes_naming(folder)
    for sent in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sent)
        deadline = time.monotonic() + timeout_s
        while (pids := [pid for pid in pids if _running(pid)]) and time.monotonic() < deadline:
            time.sleep(0.01)
        if not pids:
            return
    logger.warning("processes %s of the Ray folder %s still run after SIGKILL", pids, folder)


def _processes_naming(folder: str) -> list[int]:
    """The process ids, other than this process's, whose command line contains ``folder``."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):  # a process that ends while it is read
            if int(entry.name) != os.getpid() and folder.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
    return pids


def _running(pid: int) -> bool:
    """Whether ``pid`` runs: it exists and is not a zombie (this process's own child is reaped once done)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@contextlib.contextmanager
def _handler_errors_pass_through() -> Iterator[None]:
    """Ray's blocking calls run Python's signal handlers from Cython; an exception a handler raises there (Ctrl-C's
    ``KeyboardInterrupt``, a job's own termination) comes out as ``SystemError: ... returned a result with an
    exception set``, the handler's exception its cause. Re-raise that exception itself, so its handlers see it."""
    try:
        yield
    except SystemError as error:
        if error.__cause__ is None:
            raise
        raise error.__cause__ from None


class _ModelWorker:
    """The actor: holds the model, runs ``(b, *in) -> (b, *out)`` and waits the injected delay."""

    def __init__(self, model: nn.Module, threads: int) -> None:
        torch.set_num_threads(threads)
        self.model = model.eval()

    def pid(self) -> int:
        return os.getpid()

    def run(self, inputs: torch.Tensor, delay_s: float) -> tuple[torch.Tensor, float]:
        """The model's output and the seconds it took; returns ``delay_s`` after the model finished (or at once
        once this task is cancelled)."""
        import ray

        start = time.monotonic()
        with torch.inference_mode():
            output = self.model(inputs)
        computed = time.monotonic()
        context = ray.get_runtime_context()
        while (left := computed + delay_s - time.monotonic()) > 0 and not context.is_canceled():
            time.sleep(min(left, 0.005))
        return output, computed - start


class RayWorkers:
    """N Ray actors running ``model``, as an engine (:class:`~torchgcc.workers.Workers`; call inside
    :func:`local_ray` or after ``ray.init``).

    Each actor runs its tasks one at a time in submission order (Ray's default for actors). :meth:`wait` is
    ``ray.wait`` on every outstanding task; :meth:`cancel` is ``ray.cancel`` (a queued task never runs, a running one
    cuts its injected delay short). A task whose actor died reports its worker lost (a :class:`Completion` with
    ``error``, and a warning on the ``torchgcc.distributed`` logger); with ``max_restarts > 0`` Ray restarts the
    actor, which is re-admitted once it answers a ping (checked at every :meth:`submit`). A task whose model raised
    (Ray's ``RayTaskError``) is a failed task, not a lost worker: a :class:`Completion` with ``error`` (the
    model's exception in one line) and a warning; the actor runs its next tasks.

    Args:
        model: the network (sent once to the object store; every actor gets the same weights).
        num_workers: N (at least 1).
        max_restarts: how often Ray restarts a crashed actor (0: a dead actor stays dead).
        threads: torch threads per actor.
        start_timeout_s: the longest to wait for every actor to start.

    Attributes:
        pids: the actors' process ids, by worker.
        events: every loss and re-admission, ``{"event": "lost" | "readmitted", "workers", "reason"}``.
    """

    workers_per_process = 1

    def __init__(
        self,
        model: nn.Module,
        num_workers: int,
        *,
        max_restarts: int = 0,
        threads: int = 1,
        start_timeout_s: float = 120.0,
    ) -> None:
        num_workers = check_integer("num_workers", num_workers, minimum=1)
        self.ray = ray = require("ray")
        if not ray.is_initialized():
            raise RuntimeError("RayWorkers needs a running Ray instance: use torchgcc.distributed.local_ray()")
        self.num_workers = num_workers
        self.max_restarts = max_restarts
        self.events: list[dict] = []
        self._tasks: dict[object, tuple[Hashable, int]] = {}  # ref -> (key, worker)
        self._refs: dict[Hashable, object] = {}  # key -> ref
        self._lost: set[int] = set()
        self._probes: dict[int, object] = {}  # lost worker -> ping ref (restartable actors only)
        actor = ray.remote(num_cpus=0, max_restarts=max_restarts, max_task_retries=0)(_ModelWorker)
        self._weights = ray.put(model)  # kept referenced: a restarting actor reads it again
        self.actors = [actor.remote(self._weights, threads) for _ in range(num_workers)]
        try:
            with _handler_errors_pass_through():
                self.pids = ray.get([a.pid.remote() for a in self.actors], timeout=start_timeout_s)
        except BaseException:
            self.close()
            raise

    def now(self) -> float:
        return time.monotonic()

    def submit(self, tasks: Sequence[Task]) -> None:
        if not self.actors:
            raise RuntimeError("RayWorkers is closed (its actors are killed): start a new one")
        self._readmit()
        for task in tasks:
            if task.worker in self._lost:
                continue
            # contiguous: a view would be serialized with its whole storage (every worker's inputs)
            ref = self.actors[task.worker].run.remote(task.inputs.contiguous(), float(task.delay_s))
            self._tasks[ref] = (task.key, task.worker)
            self._refs[task.key] = ref

    def cancel(self, keys: Sequence[Hashable]) -> None:
        for key in keys:
            ref = self._refs.pop(key, None)
            if ref is not None:
                del self._tasks[ref]
                self.ray.cancel(ref)

    @_handler_errors_pass_through()  # the calls that a signal interrupts
    def wait(self, until_s: float) -> list[Completion]:
        remaining = max(until_s - time.monotonic(), 0.0)
        if not self._tasks:
            if remaining != float("inf"):
                time.sleep(remaining)
            return []
        refs = list(self._tasks)
        while True:  # in slices: Ray lets a signal handler's exception out only when ray.wait returns
            ready, rest = self.ray.wait(refs, num_returns=1, timeout=min(remaining, _WAIT_SLICE_S))
            remaining = until_s - time.monotonic()
            if ready or remaining <= 0:
                break
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
                reason = f"{type(error).__name__}: {str(error).splitlines()[0]}"
                self._lose(worker, reason)
                completions.append(Completion(key, worker, None, time.monotonic(), error=reason))
                continue
            except self.ray.exceptions.RayError as error:  # the task failed (its model raised): the actor stays
                cause = getattr(error, "cause", None) or error
                reason = f"{type(cause).__name__}: {(str(cause).strip().splitlines() or [''])[-1]}"
                logger.warning("worker %d's task failed (%s); a straggler for its round", worker, reason)
                completions.append(Completion(key, worker, None, time.monotonic(), error=reason))
                continue
            completions.append(Completion(key, worker, output, time.monotonic(), compute_s))
        return completions

    def lost_workers(self) -> set[int]:
        return set(self._lost)

    def ping(self, worker: int):
        """An ObjectRef of the actor's process id (it resolves once the actor is up)."""
        return self.actors[worker].pid.remote()

    def kill(self, worker: int, *, restart: bool = False) -> None:
        """Kill ``worker``'s actor at once (``restart``: let Ray restart it, if ``max_restarts`` allows)."""
        self.ray.kill(self.actors[worker], no_restart=not restart)

    def _lose(self, worker: int, reason: str) -> None:
        if worker in self._lost:
            return
        self._lost.add(worker)
        self.events.append({"event": "lost", "workers": [worker], "reason": reason})
        logger.warning("lost worker [%d] (%s); a straggler from now on", worker, reason)
        if self.max_restarts > 0:
            self._probes[worker] = self.ping(worker)

    def _readmit(self) -> None:
        """Re-admit restarted actors that answer their ping; ping again those that are still restarting."""
        if not self._probes:
            return
        ready, _ = self.ray.wait(list(self._probes.values()), num_returns=len(self._probes), timeout=0)
        back = []
        for worker, probe in list(self._probes.items()):
            if probe not in ready:
                continue
            try:
                self.ray.get(probe)
            except self.ray.exceptions.RayActorError:
                self._probes[worker] = self.ping(worker)  # still restarting, or gone for good
                continue
            del self._probes[worker]
            self._lost.discard(worker)
            back.append(worker)
        if back:
            self.events.append({"event": "readmitted", "workers": back, "reason": "actor restarted"})
            logger.warning("re-admitted workers %s (actor restarted)", back)

    def close(self) -> None:
        """Cancel what is outstanding and kill every actor (no restart); idempotent."""
        self.cancel(list(self._refs))
        for actor in self.actors:
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)
        self.actors = []

    def __enter__(self) -> "RayWorkers":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
