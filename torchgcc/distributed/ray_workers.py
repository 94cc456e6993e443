"""Coded workers as Ray actors: each holds the model and runs one task at a time, in submission order.

Needs the ``ray`` extra (``pip install 'torchgcc[ray]'``). :func:`local_ray` starts a local Ray instance in a
temporary folder (no dashboard, worker logs kept out of the driver's output) and removes it again;
:class:`RayWorkers` starts the N actors and submits their tasks. A task runs the model on its rows, then waits its
injected delay; the wait ends early when the task is cancelled (``ray.cancel``), so a straggler whose result is no
longer needed does not stay busy. Actors restart after a crash only when ``max_restarts > 0`` (Ray rebuilds the
model from the same weights; the task that was running fails).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from typing import Iterator

import torch
from torch import nn

from torchgcc.optional import require

__all__ = ["RayWorkers", "local_ray"]


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
        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


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
    """N Ray actors running ``model`` (call inside :func:`local_ray` or after ``ray.init``).

    Args:
        model: the network (sent once to the object store; every actor gets the same weights).
        num_workers: N.
        max_restarts: how often Ray restarts a crashed actor (0: a dead actor stays dead).
        threads: torch threads per actor.
        start_timeout_s: the longest to wait for every actor to start.
    """

    def __init__(
        self,
        model: nn.Module,
        num_workers: int,
        *,
        max_restarts: int = 0,
        threads: int = 1,
        start_timeout_s: float = 120.0,
    ) -> None:
        self.ray = ray = require("ray")
        if not ray.is_initialized():
            raise RuntimeError("RayWorkers needs a running Ray instance: use torchgcc.distributed.local_ray()")
        self.num_workers = num_workers
        self.max_restarts = max_restarts
        actor = ray.remote(num_cpus=0, max_restarts=max_restarts, max_task_retries=0)(_ModelWorker)
        self._weights = ray.put(model)  # kept referenced: a restarting actor reads it again
        self.actors = [actor.remote(self._weights, threads) for _ in range(num_workers)]
        try:
            self.pids = ray.get([a.pid.remote() for a in self.actors], timeout=start_timeout_s)
        except BaseException:
            self.close()
            raise

    def run(self, worker: int, inputs: torch.Tensor, delay_s: float = 0.0):
        """Submit a task to ``worker``; returns its ObjectRef of ``(output (b, *out), compute seconds)``."""
        return self.actors[worker].run.remote(inputs, float(delay_s))

    def ping(self, worker: int):
        """An ObjectRef of the actor's process id (it resolves once the actor is up)."""
        return self.actors[worker].pid.remote()

    def kill(self, worker: int, *, restart: bool = False) -> None:
        """Kill ``worker``'s actor at once (``restart``: let Ray restart it, if ``max_restarts`` allows)."""
        self.ray.kill(self.actors[worker], no_restart=not restart)

    def close(self) -> None:
        """Kill every actor (no restart)."""
        for actor in self.actors:
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)
        self.actors = []

    def __enter__(self) -> "RayWorkers":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
