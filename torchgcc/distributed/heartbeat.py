"""Liveness: worker ranks beat a counter in the store; the coordinator declares a rank lost when it stops.

A hung rank (main thread blocked) keeps beating from its heartbeat thread: it is a straggler, not lost. A killed
rank stops beating: after ``timeout_s`` the coordinator reports it and treats its workers as permanent stragglers.

Shutdown: the coordinator asks for it in the store and waits until every live rank acknowledged it
(:func:`acknowledge_shutdown`) before it exits (under the local launcher its process hosts the store). A worker rank
acknowledges from its main thread once it stopped serving and its heartbeat thread stopped touching the store
(:meth:`Heartbeat.finish`), so that no store call of a rank is in flight when the store goes away. The heartbeat
thread is also the rank's watchdog: a main thread that does not finish within ``grace_s`` of the request (it is
hung) is ended by it (it acknowledges for it, then ``os._exit(0)``), and when the store vanishes without a shutdown
(the coordinator died) it ends the process with :data:`EXIT_COORDINATOR_LOST` unless the main thread noticed first.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import torch.distributed as dist

from torchgcc.distributed.transport import Channel

__all__ = ["EXIT_COORDINATOR_LOST", "Heartbeat", "LivenessMonitor", "acknowledge_shutdown", "peak_rss_mb"]

logger = logging.getLogger("torchgcc.distributed")

#: exit status of a worker rank whose coordinator vanished (it never asked the rank to shut down).
EXIT_COORDINATOR_LOST = 1


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (``getrusage``; Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def acknowledge_shutdown(channel: Channel) -> None:
    """Tell the coordinator that this rank is done with the store: its peak memory, then the ``exited`` counter."""
    channel.store.set(f"rss/{channel.rank}", f"{peak_rss_mb():.1f}")
    channel.count("exited", 1)


class Heartbeat(threading.Thread):
    """Worker-side daemon thread: beat every ``interval_s`` until the main thread finishes or shutdown is asked.

    Attributes:
        shutdown_seen: set once the coordinator's shutdown request was read (the main thread stops serving).
    """

    def __init__(self, channel: Channel, *, interval_s: float = 0.1, grace_s: float = 1.0) -> None:
        super().__init__(name=f"torchgcc-heartbeat-{channel.rank}", daemon=True)
        self.channel = channel.clone()
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.shutdown_seen = threading.Event()
        self._finishing = threading.Event()

    def run(self) -> None:
        try:
            while not self._finishing.is_set():
                if self.channel.shutdown_requested():
                    self.shutdown_seen.set()
                    break
                self.channel.beat()
                self._finishing.wait(self.interval_s)
        except dist.DistError:  # the store is gone: the coordinator ended without a shutdown
            if not self._finishing.wait(self.grace_s):  # the main thread did not notice (it is hung): end here
                logger.error("rank %d: the coordinator is gone (store unreachable)", self.channel.rank)
                os._exit(EXIT_COORDINATOR_LOST)
            return
        if self._finishing.is_set() or self._finishing.wait(self.grace_s):
            return  # the main thread finished: it acknowledges
        acknowledge_shutdown(self.channel)  # the main thread is hung: acknowledge for it and end the process
        os._exit(0)

    def finish(self) -> None:
        """Called by the main thread once it stopped serving: returns when this thread no longer uses the store."""
        self._finishing.set()
        self.join()


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
