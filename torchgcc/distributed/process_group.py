"""The N coded workers hosted by ranks 1..P-1 of a torchrun job, as an engine on rank 0.

Rank 0 holds the :class:`~torchgcc.CodedModule` (``CodedModule(model, code, workers=ProcessGroupWorkers(...))``);
every other rank runs :func:`~torchgcc.distributed.worker.serve` with the same model. A batch's tasks for the
workers of one rank travel in one :class:`~torchgcc.distributed.links.Work` message (the rank runs the model once
on all their rows), on the data plane (a gloo pair per rank) or through the store; the store is the control plane
(rounds, heartbeats, shutdown). A rank whose heartbeat stops, or whose pair breaks, is lost: its workers are
reported (a :class:`~torchgcc.workers.Completion` with ``error`` for each, and a warning on the
``torchgcc.distributed`` logger) and left out until it beats again.
"""

from __future__ import annotations

import logging
import time
from typing import Hashable, Sequence

import torch

from torchgcc.distributed.faults import FaultPlan
from torchgcc.distributed.heartbeat import LivenessMonitor
from torchgcc.distributed.layout import layout_workers
from torchgcc.distributed.links import Work, coordinator_link
from torchgcc.distributed.transport import STORE_CHUNK_BYTES, Channel
from torchgcc.workers import Completion, Task

__all__ = ["ProcessGroupWorkers"]

logger = logging.getLogger("torchgcc.distributed")


class ProcessGroupWorkers:
    """The N coded workers of a torchrun job (or of the local launcher), seen from rank 0.

    Args:
        channel: rank 0's :class:`~torchgcc.distributed.transport.Channel` (:func:`~torchgcc.distributed.connect`).
        num_workers: N, spread over ranks ``1 .. P-1`` by ``layout`` (see :mod:`torchgcc.distributed.layout`).
        layout: ``"round_robin"`` or ``"contiguous"``.
        faults: the fault plan; its slow workers' extra delays are added to every task.
        transport: ``"pg"`` (the data plane: a gloo pair per rank) or ``"store"`` (chunked store values).
        chunk_bytes: chunk size of the store transport (at most the store's value limit).
        heartbeat_timeout_s: a rank silent for this long is lost (its workers are stragglers until it beats again).
        start_timeout_s: the longest to wait for every worker rank to report ready.
        poll_s: pause between polls while waiting for results.

    Attributes:
        assignment: ``{rank: [workers]}``.
        step: the caller's step number, sent with the work (fault injection on the ranks, and reports).
    """

    def __init__(
        self,
        channel: Channel,
        *,
        num_workers: int,
        layout: str = "round_robin",
        faults: FaultPlan = FaultPlan(),
        transport: str = "pg",
        chunk_bytes: int = STORE_CHUNK_BYTES,
        heartbeat_timeout_s: float = 2.0,
        start_timeout_s: float = 120.0,
        poll_s: float = 0.0005,
    ) -> None:
        if channel.rank != 0:
            raise ValueError(f"ProcessGroupWorkers runs on rank 0, not rank {channel.rank}: other ranks call serve()")
        self.channel = channel
        self.num_workers = num_workers
        self.assignment = layout_workers(num_workers=num_workers, world_size=channel.world_size, layout=layout)
        self.rank_of = {worker: rank for rank, workers in self.assignment.items() for worker in workers}
        self.workers_per_process = max(len(workers) for workers in self.assignment.values())
        self.extra_delays = faults.extra_delays(num_workers)
        self.poll_s = poll_s
        self.step = 0
        self._round = 0
        self._keys: dict[tuple[int, int], Hashable] = {}  # (round, worker) of every outstanding task -> its key
        self._rounds: dict[Hashable, tuple[int, int]] = {}  # key -> (round, worker)
        self._open: dict[int, set[int]] = {}  # round -> workers whose task is outstanding
        self._cancelled: dict[int, set[int]] = {}  # round -> workers whose task was cancelled
        self._watermark = 0  # rounds below this are over (published to the ranks as the latest round)
        self._wait_ready(start_timeout_s)
        self.link = coordinator_link(transport, channel, list(self.assignment), chunk_bytes=chunk_bytes)
        self.monitor = LivenessMonitor(channel, list(self.assignment), timeout_s=heartbeat_timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        start = time.monotonic()
        while self.channel.count("ready") < len(self.assignment):
            if time.monotonic() - start > timeout_s:
                raise RuntimeError(
                    f"only {self.channel.count('ready')} of {len(self.assignment)} worker ranks were ready "
                    f"after {timeout_s:.0f} s"
                )
            time.sleep(0.01)

    def now(self) -> float:
        return time.monotonic()

    def lost_workers(self) -> set[int]:
        return {w for rank in self.monitor.lost for w in self.assignment[rank]}

    def submit(self, tasks: Sequence[Task]) -> None:
        """Post the tasks as one round: one work message per live rank with the inputs of its workers."""
        round_ = self._round
        self._round += 1
        by_rank: dict[int, list[Task]] = {}
        for task in tasks:
            rank = self.rank_of[task.worker]
            if rank not in self.monitor.lost:
                by_rank.setdefault(rank, []).append(task)
                self._keys[(round_, task.worker)] = task.key
                self._rounds[task.key] = (round_, task.worker)
        for rank, mine in by_rank.items():
            workers = [task.worker for task in mine]
            delays = torch.tensor([task.delay_s for task in mine], dtype=torch.float64) + self.extra_delays[workers]
            work = Work(round_, self.step, workers, [task.inputs for task in mine], delays if delays.any() else None)
            self.link.post(rank, work)
        self._open[round_] = {task.worker for mine in by_rank.values() for task in mine}
        self._close_rounds()

    def wait(self, until_s: float) -> list[Completion]:
        while True:
            results, broken = self.link.receive(set(self._keys))
            completions = []
            for result in results:
                key = self._keys.pop((result.round, result.worker), None)
                if key is not None:
                    self._resolve(key)
                    completions.append(
                        Completion(key, result.worker, result.output, time.monotonic(), result.compute_s)
                    )
            completions += self._update_liveness(broken)
            if completions or time.monotonic() >= until_s:
                return completions
            time.sleep(self.poll_s)

    def cancel(self, keys: Sequence[Hashable]) -> None:
        """Forget these tasks; once every task of the oldest rounds is done or cancelled, tell the ranks that those
        rounds are over (they stop waiting out delays and sending their results)."""
        for key in keys:
            if key in self._rounds:
                round_, worker = self._rounds[key]
                self._cancelled.setdefault(round_, set()).add(worker)
                del self._keys[(round_, worker)]
                self._resolve(key)
        self._close_rounds()

    def _resolve(self, key: Hashable) -> None:
        round_, worker = self._rounds.pop(key)
        self._open[round_].discard(worker)

    def _close_rounds(self) -> None:
        """Advance the watermark over the rounds with nothing outstanding; publish it if a task was cancelled."""
        start = self._watermark
        while self._watermark < self._round and not self._open.get(self._watermark):
            self._open.pop(self._watermark, None)
            self.link.end_round(self._watermark, self._cancelled.get(self._watermark, set()))
            self._watermark += 1
        if any(self._cancelled.pop(r, None) for r in range(start, self._watermark)):
            self.channel.set_latest_round(self._watermark)

    def _update_liveness(self, broken: set[int]) -> list[Completion]:
        """Apply heartbeats and broken pairs (each change one warning); a :class:`Completion` with ``error`` per
        worker lost by this call (its outstanding task, or ``key=None``)."""
        newly_lost, readmitted = self.monitor.poll()
        newly_lost |= {rank for rank in broken if self.monitor.declare_dead(rank)}
        gone = sorted(w for rank in newly_lost for w in self.assignment[rank])
        if readmitted:
            back = sorted(w for rank in readmitted for w in self.assignment[rank])
            logger.warning(
                "step %d: rank(s) %s beat again: re-admitted workers %s", self.step, sorted(readmitted), back
            )
        if not gone:
            return []
        logger.warning(
            "step %d: lost rank(s) %s hosting workers %s; they are stragglers from now on",
            self.step,
            sorted(newly_lost),
            gone,
        )
        now, completions = time.monotonic(), []
        for worker in gone:
            error = f"rank {self.rank_of[worker]} lost (heartbeat silent or its pair broke)"
            keys = [key for (_, w), key in self._keys.items() if w == worker]
            for key in keys:
                del self._keys[self._rounds[key]]
                self._resolve(key)
            completions += [Completion(key, worker, None, now, error=error) for key in keys or [None]]
        self._close_rounds()
        return completions

    def close(self, *, grace_s: float = 3.0) -> None:
        """Ask every worker rank to exit and wait up to ``grace_s`` until each acknowledged (once it no longer uses
        the store) or was declared lost, then up to ``grace_s`` more for the data plane's threads to end as the
        ranks exit (so that this process can exit normally). Hung ranks are acknowledged and ended by their
        heartbeat thread."""
        self.channel.request_shutdown()
        self.link.close([rank for rank in self.assignment if rank not in self.monitor.lost])
        start = time.monotonic()
        while self.channel.count("exited") + len(self.monitor.lost) < len(self.assignment):
            if time.monotonic() - start > grace_s:
                break
            self.monitor.poll()  # a rank that died late is still declared lost here
            time.sleep(0.01)
        self.link.release(grace_s)

    def __enter__(self) -> "ProcessGroupWorkers":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
