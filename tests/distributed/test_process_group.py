"""The torchrun engine (ProcessGroupWorkers on rank 0) against scripted worker threads on an in-process TCPStore
(no process launch, fast), through CodedModule(model, code, workers=...)."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import torch
import torch.distributed as dist

from torchgcc import CodedModule, make_code
from torchgcc.app.workloads import mlp_workload
from torchgcc.distributed import ProcessGroupWorkers
from torchgcc.distributed.links import Result, worker_link
from torchgcc.distributed.transport import KEY_PREFIX, Channel
from torchgcc.stragglers import FixedStragglers
from torchgcc.workers import TooFewWorkersError, WaitPolicy

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
                link.send(result, result.output.shape[0])
            held = []
            groups = work.inputs.shape[0]
            with torch.no_grad():
                outputs = self.model(work.inputs.flatten(0, 1)).unflatten(0, work.inputs.shape[:2])  # (B, W, out)
            for i, worker in enumerate(work.workers):
                result = Result(work.round, worker, outputs[:, i], 0.0)
                if worker in self.late:
                    held.append(result)
                else:
                    link.send(result, groups)


def _start(master, model, transport, **scripts):
    ranks = [ScriptedRank(master, rank, model, transport, **scripts.get(f"rank{rank}", {})) for rank in (1, 2)]
    for rank in ranks:
        rank.start()
    return ranks


@pytest.fixture(params=["pg", "store"])
def transport(request):
    return request.param


def _engine(master, transport, **options) -> ProcessGroupWorkers:
    return ProcessGroupWorkers(_channel(master, 0), num_workers=N, transport=transport, **options)


def test_late_results_never_reach_a_later_round(master, transport):
    task = mlp_workload(seed=1, batch_size=10)
    ranks = _start(master, task.model, transport, rank2={"late": [3]})
    code = make_code("gcc", num_inputs=K, num_workers=N)
    coded = CodedModule(
        task.model, code, workers=_engine(master, transport, heartbeat_timeout_s=5.0), wait=WaitPolicy(1)
    )
    for step in range(4):
        x = task.batch(step)
        output = coded(x)
        # worker 3's result of this round only arrives during the next one: it must never be used
        assert coded.last_mask.any(0).nonzero().flatten().tolist() == [0, 1, 2]
        torch.testing.assert_close(output, CodedModule(task.model, code)(x, mask=coded.last_mask), rtol=0, atol=1e-6)
    for rank in ranks:
        rank.stop.set()


def test_simulated_mask_is_used_as_drawn(master, transport):
    task = mlp_workload(seed=2, batch_size=8)
    ranks = _start(master, task.model, transport)
    code = make_code("bacc", num_inputs=K, num_workers=N)
    wait = WaitPolicy(0, deadline_s=5.0, timeout_s=10.0)
    coded = CodedModule(task.model, code, FixedStragglers(1, seed=3), workers=_engine(master, transport), wait=wait)
    reference = FixedStragglers(1, seed=3)
    for step in range(3):
        x = task.batch(step)
        output = coded(x)
        mask = reference.sample(4, N)
        assert torch.equal(coded.last_mask, mask)
        torch.testing.assert_close(output, CodedModule(task.model, code)(x, mask=mask), rtol=0, atol=1e-6)
    for rank in ranks:
        rank.stop.set()


def test_too_few_surviving_workers_is_a_clear_error(master):
    task = mlp_workload(seed=3, batch_size=8)
    ranks = _start(master, task.model, "store", rank2={"silent_from": 1})
    code = make_code("lcc", num_inputs=K, num_workers=N, degree=2)  # needs (K-1)*2+1 = 3 results
    assert code.min_arrived == 3
    engine = _engine(master, "store", heartbeat_timeout_s=0.3)
    coded = CodedModule(task.model, code, workers=engine, wait=WaitPolicy(0, timeout_s=20.0))
    coded(task.batch(0))
    assert coded.last_mask.all()
    with pytest.raises(TooFewWorkersError, match=r"2 of 4 results after .* lost: \[1, 3\]\)"):
        coded(task.batch(1))
    for rank in ranks:
        rank.stop.set()


def test_simulated_mode_with_a_hung_rank_decodes_every_group(master, transport):
    """N = 4, K = 2, S = 2 with rank 1 (workers 0, 2) hung: groups whose drawn survivors include a hung worker
    decode from what arrived."""
    task = mlp_workload(seed=4, batch_size=16)
    ranks = _start(master, task.model, transport, rank1={"hang_from": 1})
    code = make_code("gcc", num_inputs=K, num_workers=N)
    wait = WaitPolicy(0, deadline_s=0.2, timeout_s=10.0)
    coded = CodedModule(task.model, code, FixedStragglers(2, seed=0), workers=_engine(master, transport), wait=wait)
    drawn = FixedStragglers(2, seed=0)
    masks = []
    for step in range(4):
        x = task.batch(step)
        output = coded(x)
        expected = drawn.sample(8, N)
        if step >= 1:  # rank 1 hangs from step 1: its workers never arrive
            expected[:, [0, 2]] = False
            expected[expected.sum(1) < 2] = torch.tensor([False, True, False, True])  # topped up: workers 1, 3
        assert torch.equal(coded.last_mask, expected)
        torch.testing.assert_close(output, CodedModule(task.model, code)(x, mask=expected), rtol=0, atol=1e-6)
        masks.append(coded.last_mask)
    assert masks[0][:, [0, 2]].any() and not torch.stack(masks[1:])[:, :, [0, 2]].any()
    for rank in ranks:
        rank.stop.set()


def test_store_transport_deletes_work_of_a_hung_rank(master):
    """Work posted to a hung rank must not stay in the store forever (one payload per round)."""
    task = mlp_workload(seed=5, batch_size=8)
    ranks = _start(master, task.model, "store", rank1={"hang_from": 0})
    code = make_code("gcc", num_inputs=K, num_workers=N)
    coded = CodedModule(task.model, code, workers=_engine(master, "store"), wait=WaitPolicy(2, timeout_s=10.0))
    probe = _channel(master, 0)
    for step in range(6):
        coded(task.batch(step))
    # the hung rank read round 0 and nothing since; only the newest unread work may exist
    assert [r for r in range(6) if probe.store.check([f"work/1/{r}"])] == [5]
    for rank in ranks:
        rank.stop.set()


def test_a_paused_rank_is_readmitted_when_it_beats_again(master, transport, caplog):
    """A rank declared lost after a pause (SIGSTOP-like) is used again once it beats."""
    task = mlp_workload(seed=6, batch_size=8)
    ranks = _start(master, task.model, transport, rank2={"pause": (1, 1.5)})
    code = make_code("gcc", num_inputs=K, num_workers=N)
    engine = _engine(master, transport, heartbeat_timeout_s=0.4)
    coded = CodedModule(task.model, code, workers=engine, wait=WaitPolicy(2, deadline_s=0.1, timeout_s=10.0))
    rounds = []
    with caplog.at_level(logging.WARNING, logger="torchgcc"):
        for step in range(40):
            coded(task.batch(step))
            rounds.append(coded.last_round)
            if not rounds[-1].lost_workers and any(r.lost_workers for r in rounds) and bool(coded.last_mask[0, 3]):
                break
            time.sleep(0.05)
    assert any(r.lost_workers == [1, 3] for r in rounds)  # declared lost during the pause ...
    assert rounds[-1].lost_workers == [] and bool(coded.last_mask[0, 3])  # ... and used again after it
    assert "re-admitted workers [1, 3]" in caplog.text
    for rank in ranks:
        rank.stop.set()
