"""Wall-clock timing of a callable on CPU or CUDA, with warm-up and an untimed setup before each run.

>>> timer = make_timer("cpu")
>>> times = timer.measure(lambda: sum(range(1000)), warmup=1, repeats=3)  # seconds, one per repeat
>>> len(times)
3

CPU timing uses ``time.perf_counter``; CUDA timing records CUDA events around the call on the current stream and
waits for the end event, so asynchronous kernels are counted in full. New device types register a timer class in
:data:`TIMERS`.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from torchgcc.checks import check_integer

__all__ = ["CPUTimer", "CUDATimer", "TIMERS", "Timer", "make_timer", "summarize"]


class Timer:
    """Times ``fn`` ``repeats`` times after ``warmup`` untimed calls; ``setup`` runs untimed before every call."""

    def time_once(self, fn: Callable[[], Any]) -> float:
        """Seconds taken by one call of ``fn``."""
        raise NotImplementedError

    def measure(
        self,
        fn: Callable[[], Any],
        *,
        warmup: int = 1,
        repeats: int = 5,
        setup: Callable[[], Any] | None = None,
    ) -> list[float]:
        """Seconds of each of ``repeats`` timed calls of ``fn`` (``setup`` and the warm-up are not timed)."""
        warmup = check_integer("warmup", warmup, minimum=0)
        repeats = check_integer("repeats", repeats, minimum=1)
        times = []
        for index in range(warmup + repeats):
            if setup is not None:
                setup()
            elapsed = self.time_once(fn)
            if index >= warmup:
                times.append(elapsed)
        return times


class CPUTimer(Timer):
    """``time.perf_counter`` around the call."""

    def time_once(self, fn: Callable[[], Any]) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start


class CUDATimer(Timer):
    """CUDA events recorded around the call on the current stream (all prior work is synchronised first)."""

    def time_once(self, fn: Callable[[], Any]) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0


#: Timer class per ``torch.device`` type.
TIMERS: dict[str, type[Timer]] = {"cpu": CPUTimer, "cuda": CUDATimer}


def make_timer(device: str | torch.device) -> Timer:
    """The timer for ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``...)."""
    kind = torch.device(device).type
    if kind not in TIMERS:
        raise ValueError(f"no timer for device type {kind!r}; known: {sorted(TIMERS)}")
    return TIMERS[kind]()


def summarize(times: list[float]) -> dict[str, float | list[float]]:
    """``median``, ``mean``, ``std`` (0 for one value), ``min`` in milliseconds, and the raw ``times_ms`` (at least
    one time)."""
    if len(times) == 0:
        raise ValueError("summarize needs at least one time in times, got none")
    ms = [1000.0 * value for value in times]
    return {
        "median_ms": statistics.median(ms),
        "mean_ms": statistics.fmean(ms),
        "std_ms": statistics.stdev(ms) if len(ms) > 1 else 0.0,
        "min_ms": min(ms),
        "times_ms": ms,
    }
