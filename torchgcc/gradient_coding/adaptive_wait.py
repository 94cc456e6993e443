"""Gradient-coding training with an adaptive wait count: wait for ``n - S`` workers, S chosen per step.

Before every step a :class:`~torchgcc.control.wait_count.WaitCountController` chooses S; the coordinator of the
:class:`~torchgcc.gradient_coding.simulator.Simulation` uses the fastest ``n - S`` workers on the virtual clock
(worker ``i`` finishes after ``load * t_c + delay_i``); afterwards the controller sees every worker's finish time
up to ``deadline`` (later ones as ``inf``, ``watched_until=deadline``: the coordinator keeps recording late
arrivals until the deadline, as the distributed executor does).

What S may be depends on the code: an exact code (FR, CR, PGC) needs at least ``n - s`` results, so its candidates
are ``S <= s`` (waiting for more buys no accuracy, so give the controller a utility such as ``min_accuracy`` or a
measured step benefit, or it prefers the largest S); an ignore-stragglers scheme (IS-SGD, IS-GC) decodes from any
set, so larger S trade gradient fidelity for time (pass that fidelity per S as the controller's ``accuracy``).
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from torchgcc.gradient_coding.clock import first_arrivals, worker_times
from torchgcc.gradient_coding.simulator import Simulation, StepRecord

__all__ = ["train_with_adaptive_wait"]


def train_with_adaptive_wait(
    simulation: Simulation,
    policy,
    steps: int,
    *,
    deadline: float,
    evaluate: Optional[Callable[[torch.nn.Module], dict]] = None,
    eval_every: int = 1,
) -> tuple[list[StepRecord], list[int]]:
    """Train ``steps`` steps of ``simulation`` (which needs delays), S from ``policy`` at every step.

    Returns the step records (the clock advances by each step's ``(n - S)``-th finish time) and the S of every
    step. ``policy`` is a ``WaitCountController`` for ``n = simulation.code.num_workers`` workers; it is updated in
    place (save ``policy.state_dict()`` with the results).
    """
    code = simulation.code
    if simulation.delays is None:
        raise ValueError("train_with_adaptive_wait needs a Simulation with delays= (the clock decides who arrives)")
    if policy.num_workers != code.num_workers:
        raise ValueError(f"the policy is for {policy.num_workers} workers, the code has {code.num_workers}")
    records, chosen = [], []
    for step in range(steps):
        s = policy.choose()
        times = worker_times(
            [code.compute_load(step)] * code.num_workers, simulation.delays.delays(step), simulation.compute_time
        )
        arrived, step_time = first_arrivals(times, code.num_workers - s)
        record = simulation.step(step, arrived, step_time=step_time)
        policy.observe(times.masked_fill(times > deadline, math.inf), num_stragglers=s, watched_until=deadline)
        if evaluate is not None and ((step + 1) % eval_every == 0 or step == steps - 1):
            record.metrics = evaluate(simulation.model)
        records.append(record)
        chosen.append(s)
    return records, chosen
