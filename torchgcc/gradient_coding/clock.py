"""The virtual clock: per-worker step times from compute load and seeded injected delays, and who arrives first.

Worker ``i`` finishes step ``t`` after ``load_t * t_c + delay_{i,t}`` seconds (``load_t`` partitions computed,
``t_c`` the measured per-partition compute time); the coordinator waits for the ``wait_for`` fastest, so the step
takes their largest time (the ``wait_for``-th order statistic). With ``delay ~ Exp(mean m)`` i.i.d. and
``wait_for = n - s``, ``E[T] = load * t_c + m (H_n - H_s)`` (:func:`expected_step_time`).
"""

from __future__ import annotations

from typing import Protocol, Sequence

import torch

from torchgcc.stragglers import LatencyModel

__all__ = ["DelaySchedule", "expected_step_time", "first_arrivals", "step_arrivals", "timeline", "worker_times"]


class DelaySchedule:
    """Injected delays ``(n,)`` float64 seconds per step, a deterministic function of ``(seed, step, worker)``.

    Each step draws one row from ``latency`` with a generator seeded by ``(seed, step)``; worker ``i`` gets entry
    ``i``, so every scheme, runtime and process sees the same delay for the same worker and step.
    """

    def __init__(self, latency: LatencyModel, num_workers: int, *, seed: int = 0) -> None:
        self.latency, self.num_workers, self.seed = latency, num_workers, seed

    def delays(self, step: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        return self.latency.sample((self.num_workers,), generator)

    def __repr__(self) -> str:
        return f"DelaySchedule({self.latency!r}, num_workers={self.num_workers}, seed={self.seed})"


def first_arrivals(times: torch.Tensor, wait_for: int) -> tuple[list[int], float]:
    """The ``wait_for`` fastest workers in arrival order (ties: lower index first) and the step time (the slowest
    of them), from per-worker finish times ``(n,)``."""
    if not 1 <= wait_for <= len(times):
        raise ValueError(f"wait_for must be in [1, {len(times)}], got {wait_for}")
    order = torch.sort(times, stable=True).indices[:wait_for].tolist()
    return order, float(times[order[-1]])


class _Scheduled(Protocol):
    num_workers: int
    wait_for: int

    def compute_load(self, step: int) -> int: ...


def step_arrivals(
    code: _Scheduled, delays: DelaySchedule, compute_time: float, step: int, wait_for: int | None = None
) -> tuple[list[int], float]:
    """The arrived workers (in order) and the virtual duration of ``step`` for ``code`` (every worker carries
    ``code.compute_load(step)`` partitions), waiting for ``wait_for`` workers (default ``code.wait_for``)."""
    times = worker_times([code.compute_load(step)] * code.num_workers, delays.delays(step), compute_time)
    return first_arrivals(times, code.wait_for if wait_for is None else wait_for)


def timeline(
    code: _Scheduled, delays: DelaySchedule, compute_time: float, steps: int, stragglers: Sequence[int] | None = None
) -> tuple[list[list[int]], list[float]]:
    """:func:`step_arrivals` for steps ``0..steps-1``: the arrived sets and the step times, without a model;
    ``stragglers``: the S of every step (an adaptive wait count waits for ``n - S[t]``; default the code's).

    Every worker of a step carries the same load, so the arrived sets depend on the delays only, not on
    ``compute_time``; for delays that scale with one parameter (``Exponential(mean)``) not on it either.
    """
    pairs = [
        step_arrivals(
            code, delays, compute_time, step, None if stragglers is None else code.num_workers - stragglers[step]
        )
        for step in range(steps)
    ]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _harmonic(n: int) -> float:
    return sum(1.0 / j for j in range(1, n + 1))


def expected_step_time(
    *, load: int, compute_time: float, mean_delay: float, num_workers: int, num_stragglers: int
) -> float:
    """``load * t_c + m (H_n - H_s)``: the mean ``(n - s)``-th order statistic of ``load * t_c + Exp(m)``."""
    return load * compute_time + mean_delay * (_harmonic(num_workers) - _harmonic(num_stragglers))


def worker_times(loads: Sequence[int] | torch.Tensor, delays: torch.Tensor, compute_time: float) -> torch.Tensor:
    """``(n,)`` float64 ``load_i * t_c + delay_i``."""
    return torch.as_tensor(loads, dtype=torch.float64) * compute_time + delays
