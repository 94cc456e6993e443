"""The coordinator against scripted worker threads on an in-process TCPStore (no process launch, fast)."""

from __future__ import annotations

import threading
import time

import pytest
import torch
import torch.distributed as dist

from torchgcc import CodedModule
from torchgcc.distributed import Coordinator, Measured, Simulated, TooFewWorkersError, make_scheme
from torchgcc.distributed.transport import KEY_PREFIX, Channel
from torchgcc.distributed.tasks import mlp_task
from torchgcc.stragglers import FixedStragglers

WORLD = 3  # coordinator + 2 worker ranks; round robin: rank 1 hosts workers [0, 2], rank 2 hosts [1, 3]
N, K = 4, 2


@pytest.fixture
def master():
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    yield store


def _channel(master, rank: int) -> Channel:
    return Channel(dist.PrefixStore(KEY_PREFIX, master.clone()), rank, WORLD)


class ScriptedRank(threading.Thread):
    """A worker rank that answers honestly, except that ``late`` workers answer one round late and ranks with
    ``silent_from`` stop answering and beating from that round on (a crash)."""

    def __init__(self, master, rank, model, *, late=(), silent_from=None):
        super().__init__(daemon=True)
        self.channel = _channel(master, rank)
        self.model, self.late, self.silent_from = model, set(late), silent_from
        self.stop = threading.Event()

    def run(self):
        self.channel.count("ready", 1)
        round_, held = 0, []
        while not self.stop.is_set():
            if self.silent_from is not None and round_ >= self.silent_from:
                return
            self.channel.beat()
            payload = self.channel.take_work(round_)
            if payload is None:
                time.sleep(0.001)
                continue
            for old_round, worker, output in held:  # yesterday's results, posted while today's round runs
                self.channel.post_result(old_round, worker, output)
            held = []
            with torch.no_grad():
                outputs = self.model(payload["inputs"].flatten(0, 1)).unflatten(0, payload["inputs"].shape[:2])
            for worker, output in zip(payload["workers"], outputs):
                if worker in self.late:
                    held.append((round_, worker, output))
                else:
                    self.channel.post_result(round_, worker, output)
            round_ += 1


def _start(master, model, **scripts):
    ranks = [ScriptedRank(master, rank, model, **scripts.get(f"rank{rank}", {})) for rank in (1, 2)]
    for rank in ranks:
        rank.start()
    return ranks


def test_late_results_never_reach_a_later_step(master):
    task = mlp_task(seed=1, batch_size=10)
    ranks = _start(master, task.model, rank2={"late": [3]})
    scheme = make_scheme("gcc", num_inputs=K, num_workers=N)
    coordinator = Coordinator(_channel(master, 0), num_workers=N, heartbeat_timeout_s=5.0, step_timeout_s=10.0)
    mode = Measured(num_stragglers=1)
    for step in range(4):
        x = task.batch(step)
        result = coordinator.step(scheme, x, mode.plan(5, N), step=step)
        # worker 3's result of this step only arrives during the next one: it must never be used
        assert result.arrived == [0, 1, 2]
        expected = CodedModule(task.model, scheme.code)(x, mask=result.mask)
        torch.testing.assert_close(result.output, expected, rtol=0, atol=1e-6)
    for rank in ranks:
        rank.stop.set()


def test_simulated_mask_is_used_as_drawn(master):
    task = mlp_task(seed=2, batch_size=8)
    ranks = _start(master, task.model)
    scheme = make_scheme("bacc", num_inputs=K, num_workers=N)
    coordinator = Coordinator(_channel(master, 0), num_workers=N, step_timeout_s=10.0)
    mode, reference = Simulated(FixedStragglers(1, seed=3)), FixedStragglers(1, seed=3)
    for step in range(3):
        x = task.batch(step)
        result = coordinator.step(scheme, x, mode.plan(4, N), step=step, deadline_s=5.0)
        mask = reference.sample(4, N)
        assert torch.equal(result.mask, mask)
        torch.testing.assert_close(result.output, CodedModule(task.model, scheme.code)(x, mask=mask), rtol=0, atol=1e-6)
    for rank in ranks:
        rank.stop.set()


def test_too_few_surviving_workers_is_a_clear_error(master):
    task = mlp_task(seed=3, batch_size=8)
    ranks = _start(master, task.model, rank2={"silent_from": 1})
    scheme = make_scheme("lcc", num_inputs=K, num_workers=N, degree=2)  # needs (K-1)*2+1 = 3 results
    assert scheme.min_arrived == 3
    coordinator = Coordinator(_channel(master, 0), num_workers=N, heartbeat_timeout_s=0.3, step_timeout_s=20.0)
    mode = Measured(num_stragglers=0)
    assert coordinator.step(scheme, task.batch(0), mode.plan(4, N), step=0).arrived == [0, 1, 2, 3]
    with pytest.raises(TooFewWorkersError, match=r"only 2 of 4 workers remain \(lost: \[1, 3\]\)"):
        coordinator.step(scheme, task.batch(1), mode.plan(4, N), step=1)
    for rank in ranks:
        rank.stop.set()
