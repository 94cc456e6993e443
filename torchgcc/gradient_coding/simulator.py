"""The virtual-clock simulator: real gradients of a real model, simulated time.

All ``n`` workers live in one process. At step ``t`` the simulator

1. times every worker on the virtual clock, ``load_t * t_c + delay_{i,t}`` (:mod:`torchgcc.gradient_coding.clock`),
   and takes the ``code.wait_for`` fastest as the arrived set ``F`` (or replays a given ``F``);
2. decodes ``a`` from ``F`` (:meth:`GradientCode.decode`);
3. computes the messages ``f_i`` with the same :class:`GradientWorker` code the distributed runtime runs (every
   worker for a pipelined code, whose caches must advance; only the workers with ``a_i != 0`` otherwise);
4. applies ``w <- w - lr * sum_i a_i f_i / k`` (:func:`apply_update`) and advances the clock by the step time.

A straggler's late work is abandoned at the end of its step (times do not carry over between steps), as in the
closed form ``E[T] = load * t_c + m (H_n - H_s)``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from torch import nn

from torchgcc.gradient_coding.clock import DelaySchedule, step_arrivals
from torchgcc.gradient_coding.codes import GradientCode
from torchgcc.gradient_coding.gradients import GradientWorker, LossFn, apply_update, combine, weighted_gradient
from torchgcc.gradient_coding.partitions import PartitionedData

__all__ = ["Simulation", "StepRecord", "measure_compute_time"]


@dataclass
class StepRecord:
    """One simulated step.

    Attributes:
        step: the step index.
        time: the virtual clock after the step, seconds.
        step_time: this step's virtual duration, seconds (NaN when arrivals were replayed without delays).
        load: partitions each worker computed.
        arrived: the workers waited for, in arrival order.
        used: the workers with ``a_i != 0``, ascending.
        staleness: counts of the partition gradients in the decoded sum by staleness ``0..s``.
        metrics: what ``evaluate`` returned after this step (empty when not evaluated).
    """

    step: int
    time: float
    step_time: float
    load: int
    arrived: list[int]
    used: list[int]
    staleness: list[int]
    metrics: dict = field(default_factory=dict)


def measure_compute_time(
    model: nn.Module, data: PartitionedData, *, repeats: int = 20, loss_fn: Optional[LossFn] = None
) -> float:
    """Median wall time in seconds of one partition's forward and backward pass (:func:`weighted_gradient`)."""
    kwargs = {} if loss_fn is None else {"loss_fn": loss_fn}
    batch = data.batch(0, 0)
    weighted_gradient(model, [batch], [1.0], **kwargs)  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        weighted_gradient(model, [batch], [1.0], **kwargs)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


class Simulation:
    """Train ``model`` in place with ``code`` on ``data`` under a virtual clock.

    Args:
        code: a gradient code (:mod:`~torchgcc.gradient_coding.codes`) or a pipelined one.
        model: the model; its parameters are updated in place.
        data: the ``k`` partitions (``k = code.num_partitions``).
        lr: SGD learning rate on the mean partition gradient.
        delays: the injected delays (None: no delays; then arrivals must be given).
        compute_time: ``t_c``, seconds per partition on the virtual clock.
        loss_fn: per-sample loss (default cross-entropy).
    """

    def __init__(
        self,
        code: GradientCode,
        model: nn.Module,
        data: PartitionedData,
        *,
        lr: float,
        delays: Optional[DelaySchedule],
        compute_time: float = 0.0,
        loss_fn: Optional[LossFn] = None,
    ) -> None:
        if delays is not None and delays.num_workers != code.num_workers:
            raise ValueError(f"delays are for {delays.num_workers} workers, the code has {code.num_workers}")
        kwargs = {} if loss_fn is None else {"loss_fn": loss_fn}
        self.code, self.model, self.lr, self.delays, self.compute_time = code, model, lr, delays, compute_time
        self.workers = [GradientWorker(i, code, data, **kwargs) for i in range(code.num_workers)]
        self.clock = 0.0

    def arrivals(self, step: int) -> tuple[list[int], float]:
        """The arrived workers in order and the step time of ``step`` on the virtual clock."""
        if self.delays is None:
            raise ValueError("this simulation has no delays; pass the arrived workers to step()")
        return step_arrivals(self.code, self.delays, self.compute_time, step)

    def step(self, step: int, arrived: Optional[Sequence[int]] = None, *, step_time: float = math.nan) -> StepRecord:
        """Run ``step``; ``arrived`` replays a given arrived set instead of the clock's (``step_time``: its
        duration, which advances the clock; NaN: unknown)."""
        if arrived is None:
            arrived, step_time = self.arrivals(step)
        else:
            arrived = list(arrived)
        a = self.code.decode(arrived)
        used = a.nonzero().flatten().tolist()
        self.model.train()
        if self.code.pipelined:
            messages = {w.index: w.message(self.model, step) for w in self.workers}
        else:
            messages = {i: self.workers[i].message(self.model, step) for i in used}
        apply_update(self.model, combine(messages, a), lr=self.lr, num_partitions=self.code.num_partitions)
        self.clock += 0.0 if math.isnan(step_time) else step_time
        return StepRecord(
            step=step,
            time=self.clock,
            step_time=step_time,
            load=self.code.compute_load(step),
            arrived=list(arrived),
            used=used,
            staleness=self._staleness(step, len(used)),
        )

    def _staleness(self, step: int, num_used: int) -> list[int]:
        slots = len(self.workers[0].partitions)
        counts = [0] * (self.code.num_stragglers + 1)
        taus = self.code.staleness(step).tolist() if self.code.pipelined else [0] * slots
        for tau in taus:
            counts[tau] += num_used
        return counts

    def run(
        self,
        steps: int,
        *,
        evaluate: Optional[Callable[[nn.Module], dict]] = None,
        eval_every: int = 1,
        arrivals: Optional[Sequence[Sequence[int]]] = None,
        stop: Optional[Callable[[dict], bool]] = None,
    ) -> list[StepRecord]:
        """Run steps ``0..steps-1`` (replaying ``arrivals[t]`` when given); evaluate every ``eval_every`` steps and
        after the last; stop early once ``stop(metrics)`` is true."""
        records = []
        for step in range(steps):
            record = self.step(step, None if arrivals is None else arrivals[step])
            if evaluate is not None and ((step + 1) % eval_every == 0 or step == steps - 1):
                record.metrics = evaluate(self.model)
            records.append(record)
            if stop is not None and record.metrics and stop(record.metrics):
                break
        return records
