"""Gradient-coding training with an adaptive wait count (``n - S`` workers, S from a WaitCountController)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from torchgcc.control.wait_count import WaitCountController
from torchgcc.gradient_coding import (
    DelaySchedule,
    PartitionedData,
    Simulation,
    make_gradient_code,
    train_with_adaptive_wait,
)
from torchgcc.gradient_coding.clock import WorkerClock
from torchgcc.stragglers import ShiftedExponential, TailChange

N = 6


def _setup(scheme: str, s: int, latency):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    data = PartitionedData(torch.randn(60, 4), torch.randint(0, 3, (60,)), num_partitions=N, batch_size=5)
    code = make_gradient_code(scheme, num_workers=N, num_stragglers=s)
    return Simulation(code, model, data, lr=0.1, delays=DelaySchedule(latency, N, seed=1), compute_time=0.01)


def test_is_sgd_waits_for_n_minus_the_chosen_s_and_equals_replaying_those_arrivals():
    """The arrivals are those of a separate carried-over WorkerClock fed the chosen wait counts; a twin controller
    fed its finish times (from each step's start, inf for workers still busy with an older task) chooses the same S;
    replaying the arrivals gives the same model."""
    deadline = 1.3
    simulation = _setup("is-sgd", 3, ShiftedExponential(1.0, 0.1))
    replay = copy.deepcopy(simulation)
    policy = WaitCountController(N, deadline=deadline, budget=0.05, candidates=range(4), warmup=2, seed=0)
    twin = WaitCountController(N, deadline=deadline, budget=0.05, candidates=range(4), warmup=2, seed=0)
    records, chosen = train_with_adaptive_wait(simulation, policy, 8, deadline=deadline)
    assert chosen[:2] == [3, 3]  # warm-up at the fallback
    clock, elapsed = WorkerClock(N), 0.0
    for step, (record, s) in enumerate(zip(records, chosen)):
        assert twin.choose() == s
        timing = clock.step([1] * N, simulation.delays.delays(step), 0.01, N - s)
        assert record.arrived == timing.arrived and record.used == sorted(timing.arrived)  # IS-SGD uses what arrived
        elapsed += timing.step_time
        assert math.isclose(record.time, elapsed)
        assert record.finish == timing.finish.tolist()
        twin.observe(
            timing.finish.masked_fill(timing.finish > deadline, math.inf), num_stragglers=s, watched_until=deadline
        )
        replay.step(step, timing.arrived)
    for mine, theirs in zip(simulation.model.parameters(), replay.model.parameters()):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
    assert policy.state_dict()["controller"]["steps"] == 8


def test_exact_code_with_candidates_up_to_its_s_and_a_tail_that_changes():
    simulation = _setup("gc-fr", 2, TailChange(shift=1.0, scale=0.05, scale_after=0.5, change_at=20))
    policy = WaitCountController(N, deadline=1.4, budget=0.05, candidates=range(3), warmup=2, seed=0)
    records, chosen = train_with_adaptive_wait(simulation, policy, 40, deadline=1.4)
    assert all(len(r.arrived) == N - s for r, s in zip(records, chosen))
    assert sum(chosen[:20]) < sum(chosen[20:])  # the heavier tail makes it wait for fewer workers
    with pytest.raises(ValueError, match="workers"):
        train_with_adaptive_wait(simulation, WaitCountController(8, deadline=1.0), 1, deadline=1.0)
