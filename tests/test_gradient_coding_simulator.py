"""The virtual clock against the closed form, the delay models, and the simulator's bookkeeping."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from torchgcc.gradient_coding import (
    DelaySchedule,
    PartitionedData,
    Simulation,
    expected_step_time,
    make_training_scheme,
)
from torchgcc.gradient_coding.clock import first_arrivals, timeline
from torchgcc.stragglers import Exponential, PersistentSlow, ShiftedExponential, make_latency_model


@pytest.mark.parametrize(
    "scheme,s", [("dgd", 0), ("is-sgd", 1), ("gc-fr", 1), ("gc-cr", 2), ("gc-fr", 3), ("pgc-fr", 2), ("is-gc", 3)]
)
@pytest.mark.parametrize("mean", [1.0, 2.0])
def test_mean_step_time_matches_the_order_statistic_closed_form(scheme, s, mean):
    """E[T] = c t_c + m (H_n - H_s) within 5% over 2000 simulated steps (n = 12, t_c = 0.3 s)."""
    n, t_c, steps = 12, 0.3, 2000
    code = make_training_scheme(scheme, num_workers=n, num_stragglers=s)
    _, times = timeline(code, DelaySchedule(Exponential(mean), n, seed=7), t_c, steps)
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
    code = make_training_scheme("gc-fr", num_workers=n, num_stragglers=2)  # groups {0, 1, 2}, {3, 4, 5}
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
