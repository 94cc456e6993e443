"""The virtual-clock simulator: real gradients of a real model, simulated time.

All ``n`` workers live in one process. At step ``t`` the simulator

1. times the step on its :class:`~torchgcc.gradient_coding.clock.WorkerClock` (a task takes
   ``load_t * t_c + delay_{i,t}``; with ``carry_over=True``, the default, a straggler's unfinished task carries into
   the next steps and it starts a new one only when done) and takes the ``wait_for`` first results of step ``t`` as
   the arrived set ``F``, or replays a given ``F``;
2. decodes ``a`` from ``F`` (:meth:`GradientCode.decode`);
3. computes the messages ``f_i`` at the step's model with the same :class:`GradientWorker` code the distributed
   runtime runs: for a pipelined code, every worker that started this step's task (its cache advances; a worker
   still busy with an older task does not refresh that slot); otherwise the workers with ``a_i != 0``;
4. applies ``w <- w - lr * sum_i a_i f_i / k`` (:func:`apply_update`) and advances the time by the step time.

Replayed arrivals (``step(t, arrived)``, ``run(arrivals=...)``) follow the torchrun runtime, in which every worker
computes its message at every step and then waits out its delay: every pipelined worker's cache advances, and the
step time is unknown (NaN).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch
from torch import nn

from torchgcc.gradient_coding.clock import DelaySchedule, StepTiming, WorkerClock
from torchgcc.gradient_coding.codes import GradientCode
from torchgcc.gradient_coding.gradients import GradientWorker, LossFn, apply_update, combine, weighted_gradient
from torchgcc.gradient_coding.partitions import PartitionedData
from torchgcc.gradient_coding.pipelined import PipelinedGradientCode

__all__ = ["Simulation", "StepRecord", "measure_compute_time"]


@dataclass
class StepRecord:
    """One simulated step.

    Attributes:
        step: the step index.
        time: the virtual clock after the step, seconds.
        step_time: this step's virtual duration, seconds (NaN when arrivals were replayed).
        load: partitions each worker's task of this step computes.
        arrived: the workers waited for, in arrival order.
        used: the workers with ``a_i != 0``, ascending.
        staleness: counts of the partition gradients in the decoded sum by staleness ``0 .. s`` (steps since the
            model they were computed at), longer when carry-over kept a pipelined worker from refreshing a slot.
        finish: seconds from the step's start to every worker's result of this step (``inf``: it never started this
            step's task); empty when replayed.
        metrics: what ``evaluate`` returned after this step (empty when not evaluated).
    """

    step: int
    time: float
    step_time: float
    load: int
    arrived: list[int]
    used: list[int]
    staleness: list[int]
    finish: list[float] = field(default_factory=list)
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
        carry_over: whether a straggler's unfinished task carries into the next steps (default, as on real
            workers) or is abandoned at the end of its step (the torchrun runtime's clock); see
            :mod:`torchgcc.gradient_coding.clock`.
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
        carry_over: bool = True,
    ) -> None:
        if delays is not None and delays.num_workers != code.num_workers:
            raise ValueError(f"delays are for {delays.num_workers} workers, the code has {code.num_workers}")
        kwargs = {} if loss_fn is None else {"loss_fn": loss_fn}
        self.code, self.model, self.lr, self.delays, self.compute_time = code, model, lr, delays, compute_time
        self.workers = [GradientWorker(i, code, data, **kwargs) for i in range(code.num_workers)]
        self.clock = WorkerClock(code.num_workers, carry_over=carry_over)
        #: The virtual time after the last step, seconds (replayed steps add nothing).
        self.time = 0.0
        # The step at whose model each worker last computed each slot (pipelined codes: staleness).
        self._computed_at = [[0] * len(w.partitions) for w in self.workers]

    def timing(self, step: int, wait_for: Optional[int] = None) -> StepTiming:
        """Advance the clock by ``step`` (waiting for ``wait_for`` results, default ``code.wait_for``)."""
        if self.delays is None:
            raise ValueError("this simulation has no delays; pass the arrived workers to step()")
        loads = [self.code.compute_load(step)] * self.code.num_workers
        wait_for = self.code.wait_for if wait_for is None else wait_for
        return self.clock.step(loads, self.delays.delays(step), self.compute_time, wait_for)

    def step(self, step: int, arrived: Optional[Sequence[int]] = None, *, wait_for: Optional[int] = None) -> StepRecord:
        """Run ``step`` on the clock, waiting for ``wait_for`` results (default ``code.wait_for``); or replay the
        given ``arrived`` workers (every worker then computes this step's task, as in the runtime)."""
        if arrived is None:
            timing = self.timing(step, wait_for)
            arrived, step_time, computing, finish = timing.arrived, timing.step_time, timing.started, timing.finish
        else:
            arrived, step_time, finish = list(arrived), math.nan, torch.empty(0)
            computing = list(range(self.code.num_workers))
        a = self.code.decode(arrived)
        used = a.nonzero().flatten().tolist()
        self.model.train()
        if isinstance(self.code, PipelinedGradientCode):  # every worker that computes this step refreshes its cache
            messages = {i: self.workers[i].message(self.model, step) for i in computing}
            for i in computing:
                for slot in self.code.slots_computed(step):
                    self._computed_at[i][slot] = step
        else:
            messages = {i: self.workers[i].message(self.model, step) for i in used}
        apply_update(self.model, combine(messages, a), lr=self.lr, num_partitions=self.code.num_partitions)
        self.time += 0.0 if math.isnan(step_time) else step_time
        return StepRecord(
            step=step,
            time=self.time,
            step_time=step_time,
            load=self.code.compute_load(step),
            arrived=list(arrived),
            used=used,
            staleness=self._staleness(step, used),
            finish=[float(t) for t in finish],
        )

    def _staleness(self, step: int, used: list[int]) -> list[int]:
        """Counts of the partition gradients in this step's decoded sum by staleness ``0 .. max(s, largest)``."""
        if not isinstance(self.code, PipelinedGradientCode):
            return [len(used) * len(self.workers[0].partitions)] + [0] * self.code.num_stragglers
        taus = [step - computed for i in used for computed in self._computed_at[i]]
        counts = [0] * (max(self.code.num_stragglers, *taus) + 1)
        for tau in taus:
            counts[tau] += 1
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
