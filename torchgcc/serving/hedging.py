"""Hedged requests ("The Tail at Scale", Dean and Barroso, 2013): a backup copy of a request that is still
outstanding after a high percentile of the usual latency.

The policy only decides *when*: :meth:`HedgePolicy.threshold_s` is the ``percentile`` of the latencies of the
last ``window`` primary tasks that completed (no backup before ``warmup`` of them have been seen; ``fixed_s``
replaces the estimate by a constant). The dispatcher sends at most one backup per task, to another worker, and
uses whichever copy answers first.

The estimate only sees primaries that completed: one cancelled because its backup answered first is not observed,
which biases the percentile down (more hedging) when backups often win.
"""

from __future__ import annotations

import collections
import math

import torch

from torchgcc.checks import check_integer, check_real

__all__ = ["HedgePolicy"]


class HedgePolicy:
    """When to send a backup: after the ``percentile`` of recent primary latencies (or after ``fixed_s``).

    Args:
        percentile: in (0, 1), e.g. 0.95 (the p95 of "The Tail at Scale").
        window: how many recent primary latencies the percentile is taken over.
        warmup: no backups until this many primaries have completed (the percentile is meaningless before).
        fixed_s: a constant threshold in seconds instead of the running percentile (then ``warmup`` is unused).

    Raises:
        TypeError / ValueError: one line naming the argument, for a value that is not a number, not an integer
            (``window``, ``warmup``: ``2.5`` is not rounded) or out of range.
    """

    def __init__(
        self, percentile: float = 0.95, *, window: int = 1000, warmup: int = 20, fixed_s: float | None = None
    ) -> None:
        percentile = check_real("percentile", percentile, low=0, high=1, low_open=True, high_open=True)
        window = check_integer("window", window, minimum=1)
        warmup = check_integer("warmup", warmup, minimum=0)
        if fixed_s is not None:
            fixed_s = check_real("fixed_s (seconds)", fixed_s, low=0)
        self.percentile, self.window, self.warmup, self.fixed_s = percentile, window, warmup, fixed_s
        self._latencies: collections.deque[float] = collections.deque(maxlen=window)
        self.observed = 0

    def observe(self, latency_s: float) -> None:
        """Record a completed primary task's latency (dispatch to result, seconds: finite, ``>= 0``; a NaN would make
        every later threshold NaN, which no clock passes: hedging silently off)."""
        self._latencies.append(check_real("latency_s", latency_s, low=0))
        self.observed += 1

    def threshold_s(self) -> float:
        """Seconds after dispatch at which an unfinished task gets its backup (``inf``: none yet)."""
        if self.fixed_s is not None:
            return self.fixed_s
        if self.observed < max(self.warmup, 1):
            return math.inf
        return float(torch.tensor(list(self._latencies), dtype=torch.float64).quantile(self.percentile))

    def __repr__(self) -> str:
        if self.fixed_s is not None:
            return f"HedgePolicy(fixed_s={self.fixed_s})"
        return f"HedgePolicy(percentile={self.percentile}, window={self.window}, warmup={self.warmup})"
