"""The virtual clock: per-worker task times from compute load and seeded injected delays, and who arrives first.

Worker ``i``'s task of step ``t`` takes ``load_t * t_c + delay_{i,t}`` seconds (``load_t`` partitions computed,
``t_c`` the measured per-partition compute time, the delay part of the worker's work); the coordinator waits for the
``wait_for`` first results of step ``t`` and then starts step ``t + 1`` (broadcasting the new model). What happens to
the others is the clock's ``carry_over``:

- ``carry_over=True`` (:class:`WorkerClock`'s default, as on real workers): a straggler keeps computing; its result
  arrives when it finishes (too late for its step, so it is dropped) and only then does it start the newest step's
  task, at the model of that step. A straggler is therefore late into the next steps, and a worker that is still
  busy when a step closes never starts that step's task at all (a pipelined worker's cache then misses that slot).
- ``carry_over=False`` (the torchrun runtime's model, and this simulator's before): the coordinator abandons the late
  work at the end of the step and every worker starts every step at its start, so steps are independent and the step
  time is the ``wait_for``-th order statistic of ``load * t_c + delay``; with ``delay ~ Exp(mean m)`` i.i.d. and
  ``wait_for = n - s``, ``E[T] = load * t_c + m (H_n - H_s)`` (:func:`expected_step_time`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from torchgcc.stragglers import LatencyModel

__all__ = [
    "DelaySchedule",
    "StepTiming",
    "WorkerClock",
    "expected_step_time",
    "first_arrivals",
    "timeline",
    "worker_times",
]


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


@dataclass
class StepTiming:
    """One step on the virtual clock.

    Attributes:
        arrived: the ``wait_for`` workers whose results of this step came first, in arrival order.
        step_time: seconds from the step's start (the model's broadcast) to its last awaited result.
        started: the workers that started this step's task before the step closed, ascending: they compute its
            gradients at this step's model (with ``carry_over=False``: every worker).
        finish: ``(n,)`` float64 seconds from the step's start to each worker's result of this step; ``inf`` for a
            worker that did not start this step's task (still busy with an older one when the step closed).
    """

    arrived: list[int]
    step_time: float
    started: list[int]
    finish: torch.Tensor


class WorkerClock:
    """The virtual clock of ``num_workers`` workers across steps (see the module docstring for ``carry_over``).

    :meth:`step` advances it by one step: a worker starts the step's task at the step's start, or when it finishes
    the task it is busy with (``carry_over=True``), whichever is later.
    """

    def __init__(self, num_workers: int, *, carry_over: bool = True) -> None:
        if not isinstance(carry_over, bool):
            raise TypeError(f"carry_over must be True or False, got {carry_over!r}")
        self.num_workers, self.carry_over = num_workers, carry_over
        #: The virtual time at which the current step starts, seconds.
        self.now = 0.0
        #: ``(n,)`` when each worker finishes the task it is computing (at most ``now`` when it is idle).
        self.free_at = torch.zeros(num_workers, dtype=torch.float64)

    def step(self, loads: Sequence[int] | torch.Tensor, delays: torch.Tensor, compute_time: float, wait_for: int):
        """Time one step whose tasks take ``loads[i] * compute_time + delays[i]``; wait for ``wait_for`` results.

        Returns a :class:`StepTiming` and moves :attr:`now` to the step's end.
        """
        if len(delays) != self.num_workers:
            raise ValueError(f"delays are for {len(delays)} workers, the clock has {self.num_workers}")
        start = self.free_at.clamp(min=self.now) if self.carry_over else torch.full_like(self.free_at, self.now)
        finish = start + worker_times(loads, delays, compute_time)
        arrived, end = first_arrivals(finish, wait_for)
        started = start <= end
        if self.carry_over:  # without it, every worker is free at the next step's start
            self.free_at = torch.where(started, finish, self.free_at)
        timing = StepTiming(
            arrived=arrived,
            step_time=end - self.now,
            started=started.nonzero().flatten().tolist(),
            finish=torch.where(started, finish - self.now, torch.full_like(finish, float("inf"))),
        )
        self.now = end
        return timing


def timeline(
    code: _Scheduled,
    delays: DelaySchedule,
    compute_time: float,
    steps: int,
    stragglers: Sequence[int] | None = None,
    *,
    carry_over: bool = True,
) -> tuple[list[list[int]], list[float]]:
    """A :class:`WorkerClock` for steps ``0..steps-1`` (every worker of a step carries ``code.compute_load(step)``
    partitions): the arrived sets and the step times, without a model; ``stragglers``: the S of every step (an
    adaptive wait count waits for ``n - S[t]``; default the code's ``n - s``).

    With ``carry_over=False`` the arrived sets depend on the order of the delays only, not on ``compute_time``, and
    for delays that scale with one parameter (``Exponential(mean)``) not on it either; with carry-over they depend
    on the ratio of the two, since a straggler's compute time carries into the next step.
    """
    clock = WorkerClock(code.num_workers, carry_over=carry_over)
    arrived, times = [], []
    for step in range(steps):
        wait_for = code.wait_for if stragglers is None else code.num_workers - stragglers[step]
        timing = clock.step([code.compute_load(step)] * code.num_workers, delays.delays(step), compute_time, wait_for)
        arrived.append(timing.arrived)
        times.append(timing.step_time)
    return arrived, times


def _harmonic(n: int) -> float:
    return sum(1.0 / j for j in range(1, n + 1))


def expected_step_time(
    *, load: int, compute_time: float, mean_delay: float, num_workers: int, num_stragglers: int
) -> float:
    """``load * t_c + m (H_n - H_s)``: the mean ``(n - s)``-th order statistic of ``load * t_c + Exp(m)``, the mean
    step time of the clock without carry-over."""
    return load * compute_time + mean_delay * (_harmonic(num_workers) - _harmonic(num_stragglers))


def worker_times(loads: Sequence[int] | torch.Tensor, delays: torch.Tensor, compute_time: float) -> torch.Tensor:
    """``(n,)`` float64 ``load_i * t_c + delay_i``."""
    return torch.as_tensor(loads, dtype=torch.float64) * compute_time + delays
