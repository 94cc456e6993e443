"""Batching: queries in arrival order are grouped into batches of a fixed size, or fewer at a timeout.

A batch leaves as soon as it holds ``batch_size`` queries, or when its oldest query has waited ``timeout_s``
(with the queries that arrived by then). Batches depend on the arrival times only, not on how busy the workers
are, so every scheme of a benchmark serves the same batches (their queues then differ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["Batch", "form_batches"]


@dataclass(frozen=True)
class Batch:
    """One batch of queries.

    Attributes:
        index: position in the batch sequence.
        queries: indices of its queries (consecutive, in arrival order).
        formed_s: the time it is complete (its last query's arrival, or its first's plus the timeout).
    """

    index: int
    queries: list[int]
    formed_s: float


def form_batches(arrival_s: torch.Tensor, *, batch_size: int, timeout_s: float) -> list[Batch]:
    """Batches of at most ``batch_size`` consecutive queries for the increasing arrival times ``(Q,)`` seconds.

    A batch starts at the first query not yet batched and takes every later query that arrives no more than
    ``timeout_s`` after it, up to ``batch_size``; it is formed at the arrival of its ``batch_size``-th query, or at
    the timeout when fewer came (``timeout_s = inf``: always full, except the last).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if not timeout_s >= 0:
        raise ValueError(f"timeout_s must be >= 0 seconds, got {timeout_s!r}")
    times = arrival_s.double().tolist()
    if any(later < earlier for earlier, later in zip(times, times[1:])):
        raise ValueError("arrival_s must be increasing")
    batches: list[Batch] = []
    first = 0
    while first < len(times):
        closes = times[first] + timeout_s
        last = first
        while last + 1 < len(times) and last + 1 - first < batch_size and times[last + 1] <= closes:
            last += 1
        if last + 1 - first == batch_size or not math.isfinite(closes):
            formed = times[last]  # full (or, without a timeout, the end of the stream)
        else:
            formed = closes
        batches.append(Batch(len(batches), list(range(first, last + 1)), formed))
        first = last + 1
    return batches
