"""Batching: queries in arrival order are grouped into batches of a fixed size, or fewer at a timeout.

A batch leaves as soon as it holds ``batch_size`` queries, or when its oldest query has waited ``timeout_s``
(with the queries that arrived by then). Batches depend on the arrival times only, not on how busy the workers
are, so every scheme of a benchmark serves the same batches (their queues then differ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from torchgcc.checks import check_integer, check_real

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

    Raises:
        TypeError / ValueError: one line naming the argument, when ``arrival_s`` is not a 1-D tensor of finite,
            increasing times, ``batch_size`` is not an integer >= 1 (``2.5`` is not rounded) or ``timeout_s`` is
            not a number >= 0 (or ``inf``).
    """
    batch_size = check_integer("batch_size", batch_size, minimum=1)
    if not (isinstance(timeout_s, float) and timeout_s == math.inf):
        timeout_s = check_real("timeout_s (seconds; math.inf: no timeout)", timeout_s, low=0)
    if not isinstance(arrival_s, torch.Tensor):
        raise TypeError(
            f"arrival_s must be a 1-D torch.Tensor of arrival times, got {type(arrival_s).__name__}; "
            "convert it with torch.as_tensor(...)"
        )
    if arrival_s.ndim != 1 or arrival_s.is_complex() or not torch.isfinite(arrival_s).all():
        raise ValueError(
            f"arrival_s must be a 1-D tensor (Q,) of finite real seconds, got shape {tuple(arrival_s.shape)}, "
            f"{arrival_s.dtype}, finite: {bool(torch.isfinite(arrival_s).all())}"
        )
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
