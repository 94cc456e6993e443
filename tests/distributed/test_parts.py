"""Single-purpose pieces of torchgcc.distributed: placement, the uncoded scheme, fault plans, the launcher."""

from __future__ import annotations

import os

import pytest
import torch

from torchgcc.distributed import FaultPlan, UncodedScheme, place_workers
from torchgcc.distributed.launch import launch


@pytest.mark.parametrize("strategy", ["round_robin", "contiguous"])
@pytest.mark.parametrize(("num_workers", "world_size"), [(8, 5), (7, 4), (3, 4), (5, 2)])
def test_placement_hosts_every_worker_exactly_once(strategy, num_workers, world_size):
    assignment = place_workers(num_workers=num_workers, world_size=world_size, strategy=strategy)
    assert sorted(assignment) == list(range(1, world_size))
    hosted = sorted(w for workers in assignment.values() for w in workers)
    assert hosted == list(range(num_workers))
    sizes = [len(w) for w in assignment.values()]
    assert max(sizes) - min(sizes) <= 1


def test_placement_layouts():
    assert place_workers(num_workers=8, world_size=5) == {1: [0, 4], 2: [1, 5], 3: [2, 6], 4: [3, 7]}
    assert place_workers(num_workers=7, world_size=4, strategy="contiguous") == {1: [0, 1, 2], 2: [3, 4], 3: [5, 6]}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_workers": 4, "world_size": 1}, "at least 2 processes"),
        ({"num_workers": 2, "world_size": 4}, "at most 3 processes"),
        ({"num_workers": 4, "world_size": 3, "strategy": "zigzag"}, "unknown placement"),
    ],
)
def test_placement_rejects_bad_layouts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        place_workers(**kwargs)


def test_uncoded_scheme_reassembles_the_batch_and_needs_every_worker():
    scheme = UncodedScheme(num_workers=4)
    x = torch.arange(10.0).unsqueeze(1) * torch.tensor([1.0, -1.0])  # (10, 2)
    shares = scheme.encode(x)
    assert shares.shape == (4, 3, 2)
    results = shares.sum(-1, keepdim=True) + shares[..., :1] ** 2  # any per-sample function
    mask = torch.ones(1, 4, dtype=torch.bool)
    torch.testing.assert_close(scheme.decode(results, mask, 10), x.sum(-1, keepdim=True) + x[:, :1] ** 2)
    mask[0, 2] = False
    with pytest.raises(ValueError, match="every worker"):
        scheme.decode(results, mask, 10)


def test_fault_plan_extra_delays_and_validation():
    plan = FaultPlan(slow_workers=(1, 3), slow_delay_s=2.5)
    assert plan.extra_delays(4).tolist() == [0.0, 2.5, 0.0, 2.5]
    with pytest.raises(ValueError, match="slow worker 7"):
        FaultPlan(slow_workers=(7,)).extra_delays(4)
    with pytest.raises(ValueError, match="rank 0 is the coordinator"):
        FaultPlan(kill_rank=0)


@pytest.mark.distributed
def test_launcher_kills_a_stuck_job_when_its_time_is_up():
    # no deadline and a rank hung from the first step: the coordinator would wait for the whole step timeout
    args = ["-N", "2", "-K", "2", "-S", "0", "--deadline", "0", "--step-timeout", "600", "--hang-rank", "1"]
    with pytest.raises(TimeoutError, match="did not finish") as error:
        launch(args, nproc=2, timeout_s=6)
    pids = os.popen("pgrep -f '[t]orchgcc.distributed -N 2 -K 2 -S 0 --deadline 0'").read().split()
    assert pids == [], (pids, str(error.value))
