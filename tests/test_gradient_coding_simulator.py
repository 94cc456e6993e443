"""The virtual clock against the closed form (without carry-over) and an event-driven reference (with it), the delay
models, and the simulator's bookkeeping."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from torchgcc.gradient_coding import (
    DelaySchedule,
    PartitionedData,
    Simulation,
    WorkerClock,
    expected_step_time,
    make_gradient_code,
)
from torchgcc.gradient_coding.clock import first_arrivals, timeline
from torchgcc.stragglers import Exponential, PersistentSlow, ShiftedExponential, make_latency_model


@pytest.mark.parametrize(
    "scheme,s", [("dgd", 0), ("is-sgd", 1), ("gc-fr", 1), ("gc-cr", 2), ("gc-fr", 3), ("pgc-fr", 2), ("is-gc", 3)]
)
@pytest.mark.parametrize("mean", [1.0, 2.0])
def test_mean_step_time_matches_the_order_statistic_closed_form(scheme, s, mean):
    """Without carry-over, E[T] = c t_c + m (H_n - H_s) within 5% over 2000 simulated steps (n = 12, t_c = 0.3 s)."""
    n, t_c, steps = 12, 0.3, 2000
    code = make_gradient_code(scheme, num_workers=n, num_stragglers=s)
    _, times = timeline(code, DelaySchedule(Exponential(mean), n, seed=7), t_c, steps, carry_over=False)
    loads = [code.compute_load(t) for t in range(steps)]
    expected = (
        sum(
            expected_step_time(
                load=c, compute_time=t_c, mean_delay=mean, num_workers=n, num_stragglers=n - code.wait_for
            )
            for c in loads
        )
        / steps
    )
    assert sum(times) / steps == pytest.approx(expected, rel=0.05)


def test_harmonic_numbers_of_the_notes():
    """H_12 - H_s = 3.103, 2.103, 1.603, 1.270 for s = 0..3 (gradient_coding.md, section 2.5)."""
    values = [
        expected_step_time(load=0, compute_time=0, mean_delay=1, num_workers=12, num_stragglers=s) for s in range(4)
    ]
    assert values == pytest.approx([3.103, 2.103, 1.603, 1.270], abs=1e-3)


def test_delays_are_a_function_of_seed_step_and_worker():
    schedule = DelaySchedule(Exponential(1.0), 5, seed=3)
    assert torch.equal(schedule.delays(4), DelaySchedule(Exponential(1.0), 5, seed=3).delays(4))
    assert not torch.equal(schedule.delays(4), schedule.delays(5))
    doubled = DelaySchedule(Exponential(2.0), 5, seed=3)
    torch.testing.assert_close(doubled.delays(9), 2 * schedule.delays(9), rtol=1e-15, atol=0)


def test_exponential_and_persistent_slow_latency_models():
    generator = torch.Generator().manual_seed(0)
    samples = Exponential(2.0).sample((20000,), generator)
    assert stats.kstest(samples.numpy(), stats.expon(scale=2.0).cdf).pvalue > 0.01
    slow = make_latency_model("persistent_slow", slow=(1, 3), delay=3.0, base=ShiftedExponential(0.1, 0.01))
    rows = slow.sample((50, 4), generator)
    assert (rows[:, [1, 3]] > 3.1).all() and (rows[:, [0, 2]] < 1).all()
    assert PersistentSlow(slow=(2,), delay=1.5).sample((3,), generator).tolist() == [0, 0, 1.5]
    with pytest.raises(ValueError, match="out of range"):
        PersistentSlow(slow=(5,)).sample((3,), generator)
    with pytest.raises(ValueError, match="mean must be a positive"):
        Exponential(0.0)


def test_first_arrivals_is_the_order_statistic():
    order, step_time = first_arrivals(torch.tensor([3.0, 1.0, 2.0, 1.0]), 3)
    assert order == [1, 3, 2] and step_time == 2.0
    with pytest.raises(ValueError, match="wait_for"):
        first_arrivals(torch.zeros(3), 4)


def test_simulation_waits_for_the_fastest_and_advances_the_clock():
    n = 6
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    data = PartitionedData(torch.randn(60, 4), torch.randint(0, 3, (60,)), num_partitions=n, batch_size=5)
    code = make_gradient_code("gc-fr", num_workers=n, num_stragglers=2)  # groups {0, 1, 2}, {3, 4, 5}
    delays = DelaySchedule(PersistentSlow(slow=(0, 3), delay=5.0, base=Exponential(0.1)), n, seed=1)
    simulation = Simulation(code, model, data, lr=0.1, delays=delays, compute_time=0.01)
    records = simulation.run(4)
    for record in records:
        assert sorted(record.arrived) == [1, 2, 4, 5]  # the slow set never arrives
        assert record.step_time < 5 and record.load == 3
        assert len(record.used) == 2  # one per FR group
    assert math.isclose(records[-1].time, sum(r.step_time for r in records))
    with pytest.raises(ValueError, match="no delays"):
        Simulation(code, model, data, lr=0.1, delays=None).step(0)


def _event_driven(code, delays, compute_time, steps):
    """An independent reference of the carried-over clock: a discrete-event simulation with a heap. The coordinator
    broadcasts version t when step t - 1 closes; an idle worker starts the newest version; a result of the current
    version counts, an older one is dropped; a step closes at its wait_for-th result."""
    import heapq

    n, events, now = code.num_workers, [], 0.0
    version = [None] * n  # the version each worker is computing (None: idle)

    def start(worker, v, at):
        version[worker] = v
        duration = code.compute_load(v) * compute_time + float(delays.delays(v)[worker])
        heapq.heappush(events, (at + duration, worker, v))

    for worker in range(n):
        start(worker, 0, 0.0)
    arrived_sets, step_times, current, arrived = [], [], 0, []
    while current < steps:
        at, worker, v = heapq.heappop(events)
        version[worker] = None
        if v == current:
            arrived.append(worker)
            if len(arrived) == code.wait_for:  # close the step, broadcast the next version
                arrived_sets.append(arrived)
                step_times.append(at - now)
                now, current, arrived = at, current + 1, []
                for idle in range(n):
                    if version[idle] is None and current < steps:
                        start(idle, current, at)
                continue
        if current < steps:  # a dropped (older) result, or one of this version beyond the first: start the newest
            if v != current:
                start(worker, current, at)
    return arrived_sets, step_times


@pytest.mark.parametrize("scheme,s", [("is-sgd", 3), ("gc-fr", 2), ("pgc-cr", 2)])
def test_carried_over_clock_equals_an_event_driven_simulation(scheme, s):
    n, t_c = 12, 0.4
    code = make_gradient_code(scheme, num_workers=n, num_stragglers=s)
    delays = DelaySchedule(Exponential(1.0), n, seed=3)
    arrived, times = timeline(code, delays, t_c, 300)
    ref_arrived, ref_times = _event_driven(code, delays, t_c, 300)
    assert arrived == ref_arrived
    assert times == pytest.approx(ref_times, rel=1e-12, abs=1e-12)
    _, abandoned = timeline(code, delays, t_c, 300, carry_over=False)
    assert all(c >= a - 1e-12 for c, a in zip(times, abandoned))  # a worker is never free earlier
    assert sum(times) > 1.05 * sum(abandoned)  # and the stragglers' late work costs real time


def test_a_straggler_starts_the_newest_step_when_it_finishes():
    """By hand: n = 3, wait for 2, no compute time. Worker 2 takes 10 s at step 0, so it misses steps 0 and 1 and
    starts step 2's task at t = 10, when it is free."""
    clock = WorkerClock(3)
    first = clock.step([1, 1, 1], torch.tensor([1.0, 2.0, 10.0], dtype=torch.float64), 0.0, 2)
    assert first.arrived == [0, 1] and first.step_time == 2.0 and first.started == [0, 1, 2]
    second = clock.step([1, 1, 1], torch.tensor([1.0, 1.5, 0.1], dtype=torch.float64), 0.0, 2)
    assert second.arrived == [0, 1] and second.step_time == 1.5 and second.started == [0, 1]
    assert second.finish[2] == math.inf  # still busy with step 0 when step 1 closed at t = 3.5
    third = clock.step([1, 1, 1], torch.tensor([9.0, 9.0, 0.5], dtype=torch.float64), 0.0, 2)
    assert third.started == [0, 1, 2] and third.arrived == [2, 0]  # 2 finishes at 10.5, 0 at 12.5
    assert third.step_time == pytest.approx(9.0) and third.finish[2] == pytest.approx(7.0)
    abandon = WorkerClock(3, carry_over=False)
    abandon.step([1, 1, 1], torch.tensor([1.0, 2.0, 10.0], dtype=torch.float64), 0.0, 2)
    assert abandon.step([1, 1, 1], torch.tensor([1.0, 1.5, 0.1], dtype=torch.float64), 0.0, 2).arrived == [2, 0]


def test_carried_over_pipelined_stragglers_use_stale_caches():
    """PGC-FR under exponential delays: on the carried-over clock a worker still busy when a step closes never
    computes that step's slot, so the decoded sums carry slots older than s; replaying the same arrivals (the
    runtime: every worker computes every step) keeps every slot within s, as the PGC schedule promises."""
    n, s = 6, 2
    torch.manual_seed(0)
    data = PartitionedData(torch.randn(60, 4), torch.randint(0, 3, (60,)), num_partitions=n, batch_size=5)
    code = make_gradient_code("pgc-fr", num_workers=n, num_stragglers=s)
    delays = DelaySchedule(Exponential(1.0), n, seed=2)
    carried = Simulation(code, torch.nn.Linear(4, 3), data, lr=0.1, delays=delays, compute_time=0.05)
    records = carried.run(30)
    assert sum(len(r.staleness) > s + 1 for r in records) >= 5 and all(len(r.staleness) >= s + 1 for r in records)
    replay = Simulation(code, torch.nn.Linear(4, 3), data, lr=0.1, delays=None)
    replayed = replay.run(30, arrivals=[r.arrived for r in records])
    assert all(len(r.staleness) == s + 1 for r in replayed) and math.isnan(replayed[0].step_time)
    for record in records:  # every used worker contributes its s + 1 slots
        assert sum(record.staleness) == len(record.used) * (s + 1)
