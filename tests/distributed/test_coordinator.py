"""The coordinator against scripted worker threads on an in-process TCPStore (no process launch, fast)."""

from __future__ import annotations

import threading
import time

import pytest
import torch
import torch.distributed as dist

from torchgcc import CodedModule
from torchgcc.distributed import Coordinator, Measured, Simulated, TooFewWorkersError, make_execution_scheme
from torchgcc.distributed.links import Result, worker_link
from torchgcc.distributed.tasks import mlp_task
from torchgcc.distributed.transport import KEY_PREFIX, Channel
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
    """A worker rank that answers honestly through a worker link, except that ``late`` workers answer one round
    late, ranks with ``silent_from`` stop answering and beating from that round on (a crash), ranks with
    ``hang_from`` stop reading and answering but keep beating (hung), and ranks with ``pause=(round, seconds)``
    stop both for a while and then resume (SIGSTOP / SIGCONT)."""

    def __init__(self, master, rank, model, transport, *, late=(), silent_from=None, hang_from=None, pause=None):
        super().__init__(daemon=True)
        self.channel = _channel(master, rank)
        self.model, self.transport, self.late = model, transport, set(late)
        self.silent_from, self.hang_from, self.pause = silent_from, hang_from, pause
        self.stop = threading.Event()
        self.beating = threading.Event()
        self.beating.set()

    def _beat(self):
        beats = self.channel.clone()
        while not self.stop.is_set():
            if self.beating.is_set():
                try:
                    beats.beat()
                except dist.DistError:
                    return
            time.sleep(0.02)

    def run(self):
        try:
            self._serve()
        except dist.DistError:  # the test ended and its store went away
            return

    def _serve(self):
        threading.Thread(target=self._beat, daemon=True).start()
        self.channel.count("ready", 1)
        link = worker_link(self.transport, self.channel)
        held = []
        while not self.stop.is_set():
            work = link.next_work()
            if work is None:
                if link.closed:
                    return
                time.sleep(0.001)
                continue
            if self.silent_from is not None and work.round >= self.silent_from:
                self.beating.clear()
                return
            if self.hang_from is not None and work.round >= self.hang_from:
                return  # reads nothing more, but its heartbeat goes on
            if self.pause is not None and work.round == self.pause[0]:
                self.beating.clear()
                time.sleep(self.pause[1])
                self.beating.set()
                continue  # this round is long over
            for result in held:  # yesterday's results, sent while today's round runs
                link.send(result)
            held = []
            with torch.no_grad():
                outputs = self.model(work.inputs.flatten(0, 1)).unflatten(0, work.inputs.shape[:2])
            for worker, output in zip(work.workers, outputs):
                result = Result(work.round, worker, output, 0.0)
                if worker in self.late:
                    held.append(result)
                else:
                    link.send(result)


def _start(master, model, transport, **scripts):
    ranks = [ScriptedRank(master, rank, model, transport, **scripts.get(f"rank{rank}", {})) for rank in (1, 2)]
    for rank in ranks:
        rank.start()
    return ranks


@pytest.fixture(params=["pg", "store"])
def transport(request):
    return request.param


def test_late_results_never_reach_a_later_step(master, transport):
    task = mlp_task(seed=1, batch_size=10)
    ranks = _start(master, task.model, transport, rank2={"late": [3]})
    scheme = make_execution_scheme("gcc", num_inputs=K, num_workers=N)
    coordinator = Coordinator(
        _channel(master, 0), num_workers=N, heartbeat_timeout_s=5.0, step_timeout_s=10.0, transport=transport
    )
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


def test_simulated_mask_is_used_as_drawn(master, transport):
    task = mlp_task(seed=2, batch_size=8)
    ranks = _start(master, task.model, transport)
    scheme = make_execution_scheme("bacc", num_inputs=K, num_workers=N)
    coordinator = Coordinator(_channel(master, 0), num_workers=N, step_timeout_s=10.0, transport=transport)
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
    ranks = _start(master, task.model, "store", rank2={"silent_from": 1})
    scheme = make_execution_scheme("lcc", num_inputs=K, num_workers=N, degree=2)  # needs (K-1)*2+1 = 3 results
    assert scheme.min_arrived == 3
    coordinator = Coordinator(
        _channel(master, 0), num_workers=N, heartbeat_timeout_s=0.3, step_timeout_s=20.0, transport="store"
    )
    mode = Measured(num_stragglers=0)
    assert coordinator.step(scheme, task.batch(0), mode.plan(4, N), step=0).arrived == [0, 1, 2, 3]
    with pytest.raises(TooFewWorkersError, match=r"only 2 of 4 workers remain \(lost: \[1, 3\]\)"):
        coordinator.step(scheme, task.batch(1), mode.plan(4, N), step=1)
    for rank in ranks:
        rank.stop.set()


def test_simulated_mode_with_a_hung_rank_decodes_every_group(master, transport):
    """Bug (a): N = 4, K = 2, S = 2 with rank 1 (workers 0, 2) hung: groups whose drawn survivors include a hung
    worker used to crash the coordinator ('group 3 has 1 arrived results'); they now decode from what arrived."""
    task = mlp_task(seed=4, batch_size=16)
    ranks = _start(master, task.model, transport, rank1={"hang_from": 1})
    scheme = make_execution_scheme("gcc", num_inputs=K, num_workers=N)
    coordinator = Coordinator(_channel(master, 0), num_workers=N, step_timeout_s=10.0, transport=transport)
    mode, drawn = Simulated(FixedStragglers(2, seed=0)), FixedStragglers(2, seed=0)
    masks = []
    for step in range(4):
        x = task.batch(step)
        result = coordinator.step(scheme, x, mode.plan(8, N), step=step, deadline_s=0.2)
        expected = drawn.sample(8, N)
        if step >= 1:  # rank 1 hangs from step 1: its workers never arrive
            expected[:, [0, 2]] = False
            expected[expected.sum(1) < 2] = torch.tensor([False, True, False, True])  # topped up: workers 1, 3
        assert torch.equal(result.mask, expected)
        torch.testing.assert_close(
            result.output, CodedModule(task.model, scheme.code)(x, mask=result.mask), rtol=0, atol=1e-6
        )
        masks.append(result.mask)
    assert masks[0][:, [0, 2]].any() and not torch.stack(masks[1:])[:, :, [0, 2]].any()
    for rank in ranks:
        rank.stop.set()


def test_store_transport_deletes_work_of_a_hung_rank(master):
    """Bug (c): work posted to a hung rank used to stay in the store forever (one payload per step)."""
    task = mlp_task(seed=5, batch_size=8)
    ranks = _start(master, task.model, "store", rank1={"hang_from": 0})
    scheme = make_execution_scheme("gcc", num_inputs=K, num_workers=N)
    coordinator = Coordinator(_channel(master, 0), num_workers=N, step_timeout_s=10.0, transport="store")
    probe = _channel(master, 0)
    for step in range(6):
        coordinator.step(scheme, task.batch(step), Measured(num_stragglers=2).plan(4, N), step=step)
    # the hung rank read round 0 and nothing since; only the newest unread work may exist
    assert [r for r in range(6) if probe.store.check([f"work/1/{r}"])] == [5]
    for rank in ranks:
        rank.stop.set()


def test_a_paused_rank_is_readmitted_when_it_beats_again(master, transport, capfd):
    """Bug (e): a rank declared lost after a pause (SIGSTOP-like) used to stay lost for good."""
    task = mlp_task(seed=6, batch_size=8)
    ranks = _start(master, task.model, transport, rank2={"pause": (1, 1.5)})
    scheme = make_execution_scheme("gcc", num_inputs=K, num_workers=N)
    coordinator = Coordinator(
        _channel(master, 0), num_workers=N, heartbeat_timeout_s=0.4, step_timeout_s=10.0, transport=transport
    )
    mode = Measured(num_stragglers=2)
    results = []
    for step in range(40):
        results.append(coordinator.step(scheme, task.batch(step), mode.plan(4, N), step=step, deadline_s=0.1))
        if results[-1].lost_workers == [] and any(r.lost_workers for r in results) and 3 in results[-1].arrived:
            break
        time.sleep(0.05)
    assert any(r.lost_workers == [1, 3] for r in results)  # declared lost during the pause ...
    assert results[-1].lost_workers == [] and 3 in results[-1].arrived  # ... and used again after it
    assert "re-admitted workers [1, 3]" in capfd.readouterr().err
    for rank in ranks:
        rank.stop.set()
