"""Liveness: worker ranks beat a counter in the store; the coordinator declares a rank lost when it stops.

A hung rank (main thread blocked) keeps beating from its heartbeat thread: it is a straggler, not lost. A killed
rank stops beating: after ``timeout_s`` the coordinator reports it and treats its workers as permanent stragglers.
The heartbeat thread is also the rank's watchdog: when the coordinator asks for shutdown (or the store vanishes)
and the main thread does not return within ``grace_s`` (it may be hung), it ends the process with ``os._exit``,
so no launcher is ever left waiting for an orphan.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import torch.distributed as dist

from torchgcc.distributed.transport import Channel

__all__ = ["EXIT_COORDINATOR_LOST", "Heartbeat", "LivenessMonitor", "peak_rss_mb"]

#: exit status of a worker rank whose coordinator vanished (it never asked the rank to shut down).
EXIT_COORDINATOR_LOST = 1


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (``getrusage``; Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Heartbeat(threading.Thread):
    """Worker-side daemon thread: beat every ``interval_s``; exit the process ``grace_s`` after shutdown (status
    0), or after the store vanished (status :data:`EXIT_COORDINATOR_LOST`)."""

    def __init__(self, channel: Channel, *, interval_s: float = 0.1, grace_s: float = 1.0) -> None:
        super().__init__(name=f"torchgcc-heartbeat-{channel.rank}", daemon=True)
        self.channel = channel.clone()
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.stopped = threading.Event()

    def run(self) -> None:
        status = 0
        try:
            while not self.channel.shutdown_requested():
                self.channel.beat()
                time.sleep(self.interval_s)
            self.channel.store.set(f"rss/{self.channel.rank}", f"{peak_rss_mb():.1f}")
            self.channel.count("exited", 1)
        except dist.DistError:  # the store is gone: the coordinator ended without a shutdown
            status = EXIT_COORDINATOR_LOST
        self.stopped.set()
        time.sleep(self.grace_s)  # a main thread that is not hung returns meanwhile and the process ends
        if status:
            print(f"[torchgcc] rank {self.channel.rank}: the coordinator is gone (store unreachable)", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


class LivenessMonitor:
    """Coordinator-side view of which worker ranks are alive.

    Args:
        channel: the coordinator's channel.
        ranks: the worker ranks to watch.
        timeout_s: a rank whose counter has not moved for this long is lost; a lost rank whose counter moves again
            (it was paused, e.g. SIGSTOP, and resumed) is re-admitted.
        period_s: the counters are read at most this often (each read is one store round trip per rank).
    """

    def __init__(self, channel: Channel, ranks: list[int], *, timeout_s: float = 2.0, period_s: float = 0.1) -> None:
        self.channel = channel
        self.timeout_s = timeout_s
        self.period_s = period_s
        now = time.monotonic()
        self._last_count = {rank: -1 for rank in ranks}
        self._last_change = {rank: now for rank in ranks}
        self._last_poll = -float("inf")
        self.lost: set[int] = set()
        self.dead: set[int] = set()

    def poll(self) -> tuple[set[int], set[int]]:
        """``(ranks declared lost, ranks re-admitted)`` by this call (both empty most of the time)."""
        now = time.monotonic()
        if now - self._last_poll < self.period_s:
            return set(), set()
        self._last_poll = now
        newly_lost, readmitted = set(), set()
        for rank in self._last_count:
            if rank in self.dead:
                continue
            count = self.channel.heartbeat(rank)
            if count != self._last_count[rank]:
                self._last_count[rank], self._last_change[rank] = count, now
                if rank in self.lost:
                    readmitted.add(rank)
            elif rank not in self.lost and now - self._last_change[rank] > self.timeout_s:
                newly_lost.add(rank)
        self.lost = (self.lost | newly_lost) - readmitted
        return newly_lost, readmitted

    def declare_dead(self, rank: int) -> bool:
        """Mark ``rank`` lost for good (its data-plane pair broke: the process is gone). True if it was live."""
        was_live = rank not in self.lost
        self.lost.add(rank)
        self.dead.add(rank)
        return was_live
