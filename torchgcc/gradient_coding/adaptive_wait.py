"""Gradient-coding training with an adaptive wait count: wait for ``n - S`` workers, S chosen per step.

Before every step a :class:`~torchgcc.control.wait_count.WaitCountController` chooses S; the coordinator of the
:class:`~torchgcc.gradient_coding.simulator.Simulation` uses the first ``n - S`` results on its virtual clock (with
carry-over, a worker still busy with an older task starts late); afterwards the controller sees every worker's
finish time, from the step's start, up to ``deadline`` (later ones, and workers that never started the step's task,
as ``inf``, ``watched_until=deadline``: the coordinator keeps recording late arrivals until the deadline, as the
distributed executor does).

What S may be depends on the code: an exact code (FR, CR, PGC) needs at least ``n - s`` results, so its candidates
are ``S <= s`` (waiting for more buys no accuracy, so give the controller a utility such as ``min_accuracy`` or a
measured step benefit, or it prefers the largest S); an ignore-stragglers scheme (IS-SGD, IS-GC) decodes from any
set, so larger S trade gradient fidelity for time (pass that fidelity per S as the controller's ``accuracy``).
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch

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

    Returns the step records (the clock advances by each step's ``(n - S)``-th result) and the S of every step.
    ``policy`` is a ``WaitCountController`` for ``n = simulation.code.num_workers`` workers; it is updated in place
    (save ``policy.state_dict()`` with the results).
    """
    code = simulation.code
    if simulation.delays is None:
        raise ValueError("train_with_adaptive_wait needs a Simulation with delays= (the clock decides who arrives)")
    if policy.num_workers != code.num_workers:
        raise ValueError(f"the policy is for {policy.num_workers} workers, the code has {code.num_workers}")
    records, chosen = [], []
    for step in range(steps):
        s = policy.choose()
        record = simulation.step(step, wait_for=code.num_workers - s)
        times = torch.tensor(record.finish, dtype=torch.float64)
        policy.observe(times.masked_fill(times > deadline, math.inf), num_stragglers=s, watched_until=deadline)
        if evaluate is not None and ((step + 1) % eval_every == 0 or step == steps - 1):
            record.metrics = evaluate(simulation.model)
        records.append(record)
        chosen.append(s)
    return records, chosen
