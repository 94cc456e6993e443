"""The serving loop's parts on a virtual clock: arrivals, batching, hedging, and the dispatch/decode loop checked
against queueing theory (the Lindley recursion of an M/D/1 and an M/M/1 queue) and against the single-process
CodedModule."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

from torchgcc import BACC, LCC, Code, CodedModule, make_code
from torchgcc.control.wait_count import WaitCountController
from torchgcc.points import resolve_points
from torchgcc.serving import HedgePolicy, PoissonArrivals, form_batches, serve_open_loop
from torchgcc.serving.batcher import Batch
from torchgcc.workers import Task, VirtualWorkers, WaitPolicy


def _coded(model, name, workers, *, num_inputs, num_stragglers=None, **wait):
    """``CodedModule`` of the code ``name`` on ``workers`` (uncoded: K = N), waiting for the fastest N - S (None:
    until it can decode)."""
    n = workers.num_workers
    code = make_code(name, num_inputs=n if name == "uncoded" else num_inputs, num_workers=n)
    return CodedModule(model, code, workers=workers, wait=WaitPolicy(num_stragglers, **wait))


def _mlp() -> nn.Module:
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 5)).eval()


def test_poisson_arrivals_are_seeded_and_have_exponential_gaps():
    times = PoissonArrivals(40.0, seed=1).times(5000)
    assert torch.equal(times, PoissonArrivals(40.0, seed=1).times(5000))
    assert not torch.equal(times, PoissonArrivals(40.0, seed=2).times(5000))
    gaps = torch.diff(times, prepend=times.new_zeros(1)).numpy()
    assert (gaps > 0).all()
    assert stats.kstest(gaps, stats.expon(scale=1 / 40.0).cdf).pvalue > 1e-3
    with pytest.raises(ValueError, match="rate"):
        PoissonArrivals(0.0, seed=0)


def _reference_batches(times: list[float], batch_size: int, timeout_s: float) -> list[tuple[list[int], float]]:
    """The batching rule replayed event by event: a queue that empties when full or when its head times out."""
    out, queue = [], []
    for i, t in enumerate(times):
        if queue and t > times[queue[0]] + timeout_s:
            out.append((queue, times[queue[0]] + timeout_s))
            queue = []
        queue.append(i)
        if len(queue) == batch_size:
            out.append((queue, t))
            queue = []
    if queue:
        out.append((queue, times[queue[0]] + timeout_s))
    return out


def test_batches_are_full_or_leave_at_the_timeout():
    times = torch.tensor([0.0, 0.1, 0.2, 1.0, 1.05, 1.06, 3.0], dtype=torch.float64)
    batches = form_batches(times, batch_size=2, timeout_s=0.5)
    assert [(b.queries, b.formed_s) for b in batches] == [
        ([0, 1], 0.1),
        ([2], 0.7),
        ([3, 4], 1.05),
        ([5], 1.56),
        ([6], 3.5),
    ]
    random = PoissonArrivals(30.0, seed=4).times(500)
    for size, timeout in ((4, 0.05), (3, 0.0), (8, 1.0)):
        mine = [(b.queries, b.formed_s) for b in form_batches(random, batch_size=size, timeout_s=timeout)]
        assert mine == _reference_batches(random.tolist(), size, timeout)
    assert [b.formed_s for b in form_batches(times[:3], batch_size=2, timeout_s=math.inf)] == [0.1, 0.2]
    with pytest.raises(ValueError, match="increasing"):
        form_batches(times.flip(0), batch_size=2, timeout_s=0.1)


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (lambda t: form_batches(t, batch_size=2.5, timeout_s=10.0), ValueError, "batch_size"),
        (lambda t: form_batches(t, batch_size=np.float64(2.0), timeout_s=10.0), ValueError, "batch_size"),
        (lambda t: form_batches(t, batch_size=2, timeout_s="1"), TypeError, "timeout_s"),
        (lambda t: form_batches(t.tolist(), batch_size=2, timeout_s=1.0), TypeError, "arrival_s"),
        (lambda t: form_batches(t.clone().fill_(math.nan), batch_size=2, timeout_s=1.0), ValueError, "arrival_s"),
        (lambda t: form_batches(t.view(2, 3), batch_size=2, timeout_s=1.0), ValueError, "arrival_s"),
        (lambda t: PoissonArrivals(math.inf, seed=0), ValueError, "rate"),
        (lambda t: PoissonArrivals(1.0, seed="a"), TypeError, "seed"),
        (lambda t: PoissonArrivals(1.0, seed=1.5), ValueError, "seed"),
        (lambda t: PoissonArrivals(1.0, seed=0).times(2.5), ValueError, "num_queries"),
    ],
)
def test_batching_and_arrivals_name_a_bad_argument(call, error, name):
    times = torch.tensor([0.0, 0.1, 0.2, 0.3, 0.4, 0.5], dtype=torch.float64)
    with pytest.raises(error, match=name) as info:
        call(times)
    assert "\n" not in str(info.value)


def test_nan_arrival_is_refused_not_batched():
    with pytest.raises(ValueError, match="arrival_s"):
        form_batches(torch.tensor([0.0, math.nan, 0.2], dtype=torch.float64), batch_size=2, timeout_s=1.0)
    # numpy integers are integers: the same batches as the rule replayed event by event
    times = PoissonArrivals(30.0, seed=np.int64(4)).times(np.int64(200))
    mine = [(b.queries, b.formed_s) for b in form_batches(times, batch_size=np.int64(3), timeout_s=np.float64(0.05))]
    assert mine == _reference_batches(times.tolist(), 3, 0.05)


def test_hedge_threshold_is_the_percentile_of_the_recent_window():
    policy = HedgePolicy(0.9, window=50, warmup=10)
    latencies = np.random.default_rng(0).exponential(0.1, size=80)
    for latency in latencies[:10]:  # warm-up: no backups before 10 observations
        assert policy.threshold_s() == math.inf
        policy.observe(latency)
    assert policy.threshold_s() == pytest.approx(np.quantile(latencies[:10], 0.9), rel=1e-12)
    for latency in latencies[10:]:
        policy.observe(latency)
    assert policy.threshold_s() == pytest.approx(np.quantile(latencies[-50:], 0.9), rel=1e-12)
    assert HedgePolicy(fixed_s=0.25).threshold_s() == 0.25


def _lindley_sojourns(arrival_s: list[float], service_s: list[float]) -> torch.Tensor:
    """The sojourn times of a FIFO single-server queue, by the Lindley recursion (an independent reference)."""
    free, sojourns = 0.0, []
    for arrival, service in zip(arrival_s, service_s):
        free = max(arrival, free) + service
        sojourns.append(free - arrival)
    return torch.tensor(sojourns, dtype=torch.float64)


@pytest.mark.parametrize("service", ["deterministic", "exponential"])
def test_one_worker_queue_is_the_lindley_recursion(service):
    """One query per batch, one worker: an M/D/1 or M/M/1 queue at load 0.5. Every query's latency equals its
    sojourn time by the Lindley recursion (the batch forms at the arrival; encoding and decoding take no virtual
    time), and about half the queries waited for the one before (P(wait) = rho), so the queue is exercised."""
    rate, mean_service, count = 5.0, 0.1, 2_000
    arrivals = PoissonArrivals(rate, seed=0).times(count)
    batches = form_batches(arrivals, batch_size=1, timeout_s=0.0)
    if service == "deterministic":
        pool, delays = VirtualWorkers(nn.Identity(), 1, service_s=mean_service), None
        times = torch.full((count,), mean_service, dtype=torch.float64)
    else:
        generator = torch.Generator().manual_seed(1)
        uniform = torch.rand(len(batches), 1, generator=generator, dtype=torch.float64)
        pool, delays = VirtualWorkers(nn.Identity(), 1), -mean_service * torch.log1p(-uniform)
        times = delays[:, 0]
    run = serve_open_loop(
        _coded(nn.Identity(), "uncoded", pool, num_inputs=1), torch.zeros(count, 1), arrivals, batches, delays=delays
    )
    expected = _lindley_sojourns(arrivals.tolist(), times.tolist())
    torch.testing.assert_close(run.latency_s.double(), expected, rtol=0, atol=1e-9)
    waited = float((expected > times + 1e-9).double().mean())
    assert 0.4 < waited < 0.6, waited


def test_a_code_decodes_from_the_fastest_and_cancels_the_straggler_so_no_queue_builds():
    """Worker 2 takes 10 s per task: the code never waits for it, cancels its tasks (it keeps up), and every batch
    equals CodedModule with the batch's mask; uncoded waits for it and its queue grows without bound."""
    model, count = _mlp(), 60
    arrivals = PoissonArrivals(20.0, seed=2).times(count)
    batches = form_batches(arrivals, batch_size=4, timeout_s=0.05)
    queries = torch.randn(count, 6)
    delays = torch.zeros(len(batches), 4, dtype=torch.float64)
    delays[:, 2] = 10.0
    coded = _coded(model, "gcc", VirtualWorkers(model, 4, service_s=0.01), num_inputs=2, num_stragglers=1)
    run = serve_open_loop(coded, queries, arrivals, batches, delays=delays)
    assert all(record.arrived == [0, 1, 3] for record in run.batches)
    assert float(run.latency_s.max()) < 0.05 + 0.011  # batching wait + one service time: no queueing
    single = CodedModule(model, make_code("gcc", num_inputs=2, num_workers=4))
    for batch in batches:
        mask = torch.tensor([True, True, False, True]).expand(math.ceil(len(batch.queries) / 2), -1)
        with torch.no_grad():
            expected = single(queries[batch.queries], mask=mask)
        torch.testing.assert_close(run.outputs[batch.queries], expected, rtol=0, atol=1e-6)

    full = form_batches(arrivals, batch_size=4, timeout_s=math.inf)  # every share holds a query: none is padding
    delays = torch.zeros(len(full), 4, dtype=torch.float64)
    delays[:, 2] = 10.0
    uncoded = serve_open_loop(
        _coded(model, "uncoded", VirtualWorkers(model, 4, service_s=0.01), num_inputs=4, timeout_s=math.inf),
        queries,
        arrivals,
        full,
        delays=delays,
    )
    assert uncoded.missing == []
    done = torch.tensor([r.done_s for r in uncoded.batches], dtype=torch.float64)
    torch.testing.assert_close(torch.diff(done), torch.full((len(full) - 1,), 10.01, dtype=torch.float64))
    with torch.no_grad():
        torch.testing.assert_close(uncoded.outputs, model(queries), rtol=0, atol=1e-6)


def test_replication_is_exact_and_waits_for_one_copy_of_each_query():
    model, count = _mlp(), 24
    arrivals = torch.arange(1, count + 1, dtype=torch.float64)  # one query per second: no queueing
    batches = form_batches(arrivals, batch_size=2, timeout_s=10.0)
    delays = torch.zeros(len(batches), 4, dtype=torch.float64)
    delays[:, 0] = 0.5  # the first copy of query 0 is slow; worker 1 holds the other copy
    run = serve_open_loop(
        _coded(model, "replication", VirtualWorkers(model, 4, service_s=0.01), num_inputs=2),
        torch.randn(count, 6),
        arrivals,
        batches,
        delays=delays,
    )
    assert all(record.arrived == [1, 2, 3] for record in run.batches)  # 1, 2 and 3 come together: all are used
    torch.testing.assert_close(run.latency_s[1::2], torch.full((count // 2,), 0.01, dtype=torch.float64))


@pytest.mark.parametrize("latency", [math.nan, math.inf, -0.1, "0.2"])
def test_hedge_policy_refuses_a_latency_that_would_turn_hedging_off(latency):
    """observe(nan) made every later threshold NaN (no clock reaches it: no backup ever again); refused, naming it."""
    policy = HedgePolicy(percentile=0.5, window=4, warmup=1)
    with pytest.raises((TypeError, ValueError), match="latency_s"):
        policy.observe(latency)
    policy.observe(0.2)
    assert policy.threshold_s() == pytest.approx(0.2)


def test_hedging_sends_a_backup_to_an_idle_worker_after_the_threshold():
    """Two workers, worker 1 takes 1 s longer: its share gets a backup on worker 0 at 0.3 s, done at 0.3 + 0.1."""
    model, count = _mlp(), 10
    arrivals = 5.0 * torch.arange(1, count // 2 + 1, dtype=torch.float64).repeat_interleave(2)  # pairs, far apart
    batches = form_batches(arrivals, batch_size=2, timeout_s=0.0)
    delays = torch.zeros(len(batches), 2, dtype=torch.float64)
    delays[:, 1] = 1.0
    queries = torch.randn(count, 6)
    run = serve_open_loop(
        _coded(model, "uncoded", VirtualWorkers(model, 2, service_s=0.1), num_inputs=2),
        queries,
        arrivals,
        batches,
        delays=delays,
        hedge=HedgePolicy(fixed_s=0.3),
    )
    torch.testing.assert_close(run.latency_s, torch.full((count,), 0.4, dtype=torch.float64))
    assert run.backups == count // 2 and all(r.hedged == [1] and r.backups_won == 1 for r in run.batches)
    with torch.no_grad():
        torch.testing.assert_close(run.outputs, model(queries), rtol=0, atol=1e-6)


def test_a_deadline_decodes_from_what_arrived():
    model = _mlp()
    arrivals = torch.tensor([1.0, 1.0 + 1e-9], dtype=torch.float64)
    batches = form_batches(arrivals, batch_size=2, timeout_s=1.0)
    delays = torch.tensor([[0.0, 0.0, 5.0, 5.0]], dtype=torch.float64)
    run = serve_open_loop(
        _coded(model, "gcc", VirtualWorkers(model, 4, service_s=0.01), num_inputs=2, num_stragglers=0, deadline_s=0.2),
        torch.randn(2, 6),
        arrivals,
        batches,
        delays=delays,
    )
    assert run.batches[0].arrived == [0, 1]
    assert run.batches[0].done_s == pytest.approx(1.0 + 1e-9 + 0.2)


def test_virtual_workers_cancellation_drops_queued_tasks_and_stops_a_running_delay():
    pool = VirtualWorkers(nn.Identity(), 1, service_s=0.1)
    pool.submit([Task(key, 0, torch.zeros(1), delay_s=1.0) for key in range(3)])
    pool.cancel([0, 2])  # 0 is running: its delay stops; 2 is queued: dropped
    (first,) = pool.wait(math.inf)
    assert first.key == 1 and first.finished_s == pytest.approx(0.1 + 1.1)
    assert pool.wait(math.inf) == []


@pytest.mark.parametrize("name", ["uncoded", "replication"])
def test_slots_holding_only_padding_are_not_sent_nor_waited_for(name):
    """Batches of one query (the timeout fired): uncoded needs only worker 0's share, replication only the copies
    of input 0 (workers 0 and 1); worker 3 is 10 s slow and is neither sent work nor waited for."""
    model = _mlp()
    arrivals = torch.tensor([1.0, 3.0, 5.0], dtype=torch.float64)
    batches = form_batches(arrivals, batch_size=4, timeout_s=0.1)
    delays = torch.zeros(len(batches), 4, dtype=torch.float64)
    delays[:, 3] = 10.0
    queries = torch.randn(3, 6)
    run = serve_open_loop(
        _coded(model, name, VirtualWorkers(model, 4, service_s=0.01), num_inputs=2),
        queries,
        arrivals,
        batches,
        delays=delays,
    )
    assert run.tasks == 3 * (1 if name == "uncoded" else 2)
    torch.testing.assert_close(run.latency_s, torch.full((3,), 0.1 + 0.01, dtype=torch.float64))
    with torch.no_grad():
        torch.testing.assert_close(run.outputs, model(queries), rtol=0, atol=1e-6)


def _on_nodes_code(name: str, alpha_nodes: list) -> Code:
    """BACC or LCC (degree 1) with K = 3, N = 8 and each of ``alpha_nodes`` either a worker's point (an int: that
    worker's encoder row is one-hot) or a point of its own (a float)."""
    beta = resolve_points("chebyshev2", 8, name="beta")
    alpha = torch.stack([beta[a] if isinstance(a, int) else torch.tensor(a, dtype=torch.float64) for a in alpha_nodes])
    if name == "bacc":
        return BACC(3, 8, alpha=alpha, beta=beta)
    return LCC(3, 8, degree=1, alpha=alpha, beta=beta)


@pytest.mark.parametrize("name", ["bacc", "lcc"])
@pytest.mark.parametrize(
    ("alpha_nodes", "slow", "tasks", "arrived"),
    [
        # slot 6 reads only padding (a copy of query 1), as slot 3 reads only query 1: it arrives with slot 3's result
        ([-0.5, 3, 6], None, 7, list(range(8))),
        ([-0.5, 3, 6], 3, 7, [0, 1, 2, 4, 5, 7]),  # slot 3 straggles, so slot 6 has no result either
        ([-0.5, 0.1, 6], None, 8, list(range(8))),  # no other slot computes slot 6's coded input: it is sent
    ],
)
def test_a_small_batch_decodes_as_the_module_with_the_reported_mask(name, alpha_nodes, slow, tasks, arrived):
    """A batch of two queries (K = 3) with a code whose slot 6 reads only padding (the audit's finding: it was
    decoded as a zero result, although the in-process module computes the model on its coded input, a copy of the
    last query). The served output must equal the in-process CodedModule under the mask the record reports (and,
    with no straggler, its plain forward, every slot's result computed in process)."""
    model = _mlp()
    code = _on_nodes_code(name, alpha_nodes)
    queries = torch.randn(2, 6)
    delays = torch.zeros(1, 8, dtype=torch.float64)
    if slow is not None:
        delays[0, slow] = 50.0
    pool = VirtualWorkers(model, 8, service_s=1.0)
    wait = WaitPolicy(0 if slow is None else 2)
    run = serve_open_loop(
        CodedModule(model, code, workers=pool, wait=wait),
        queries,
        torch.zeros(2),
        [Batch(0, [0, 1], 0.0)],
        delays=delays,
    )
    assert run.tasks == tasks and run.batches[0].arrived == arrived
    mask = torch.zeros(1, 8, dtype=torch.bool)
    mask[0, arrived] = True
    with torch.no_grad():
        expected = CodedModule(model, code)(queries, mask=mask)
        torch.testing.assert_close(run.outputs, expected, rtol=0, atol=1e-5)
        if slow is None:
            torch.testing.assert_close(run.outputs, CodedModule(model, code)(queries), rtol=0, atol=1e-5)


class _NanFromWorkerOne(VirtualWorkers):
    """VirtualWorkers whose worker 1 returns NaN results (they arrive; a nonfinite="straggle" decoder drops them)."""

    def wait(self, until_s):
        return [
            dataclasses.replace(done, output=done.output * math.nan)
            if done.worker == 1 and done.output is not None
            else done
            for done in super().wait(until_s)
        ]


class _FirstTaskFailsOnWorkerTwo(VirtualWorkers):
    """VirtualWorkers whose worker 2 fails its first task (its model raised, as on Ray: an error completion with the
    task's key) and lives on."""

    failed = False

    def wait(self, until_s):
        done = super().wait(until_s)
        for i, completion in enumerate(done):
            if completion.worker == 2 and not self.failed:
                self.failed = True
                done[i] = dataclasses.replace(completion, output=None, error="RuntimeError: model failed once")
        return done


def test_a_task_that_fails_on_a_live_worker_loses_that_copy_not_the_worker():
    """Uncoded on 4 workers: worker 2's first task fails, the worker lives (not in lost_workers()). That slot must be
    sent again (to another worker), every query served exactly, and worker 2 keep serving later batches: it was
    marked lost for the rest of the run."""
    model = _mlp()
    pool = _FirstTaskFailsOnWorkerTwo(model, 4, service_s=0.1)
    queries = torch.randn(12, 6)
    batches = [Batch(i, list(range(4 * i, 4 * i + 4)), 1.0 * i) for i in range(3)]
    arrivals = torch.arange(3, dtype=torch.float64).repeat_interleave(4)
    run = serve_open_loop(_coded(model, "uncoded", pool, num_inputs=4), queries, arrivals, batches)
    assert pool.failed and run.lost_workers == [] and run.missing == []
    assert run.tasks == 13  # 3 batches of 4, and the failed slot once more
    with torch.no_grad():
        torch.testing.assert_close(run.outputs, model(queries), rtol=0, atol=1e-6)
    assert all(record.arrived == [0, 1, 2, 3] for record in run.batches)


def test_a_record_lists_the_slots_the_decoder_used_without_the_non_finite_ones():
    """With nonfinite="straggle" the decoder drops worker 1's NaN result: BatchRecord.arrived must say so (it listed
    slot 1 as used), and decoding clean results under the mask it reports must give the served outputs."""
    model, code = _mlp(), make_code("gcc", num_inputs=4, num_workers=8, lambda_dec="spacing", nonfinite="straggle")
    queries = torch.randn(4, 6)
    pool = _NanFromWorkerOne(model, 8, service_s=1.0)
    run = serve_open_loop(
        CodedModule(model, code, workers=pool, wait=WaitPolicy(0)),
        queries,
        torch.zeros(4),
        [Batch(0, [0, 1, 2, 3], 0.0)],
    )
    assert run.batches[0].arrived == [0, 2, 3, 4, 5, 6, 7] and run.missing == []
    mask = torch.zeros(1, 8, dtype=torch.bool)
    mask[0, run.batches[0].arrived] = True
    with torch.no_grad():
        torch.testing.assert_close(run.outputs, CodedModule(model, code)(queries, mask=mask), rtol=0, atol=1e-6)


@pytest.mark.parametrize("watch_s", [2.0, None])
def test_an_adaptive_wait_learns_as_in_the_modules_rounds(watch_s):
    """The audit's finding: serve_open_loop chose S with the controller but never let it observe, so it stayed at
    its fallback. Batches far apart (no queueing), every worker answers in 1 s (together: every result is used, as a
    round uses every result the engine hands over at once): the loop must use the same results per batch, and leave
    the controller in the same state, as CodedModule.forward's rounds on the same engine."""
    model, count, n = _mlp(), 30, 8
    queries = torch.randn(4 * count, 6)

    def module() -> CodedModule:
        controller = WaitCountController(n, deadline=2.0, candidates=list(range(n - 4 + 1)), seed=0)
        wait = WaitPolicy(adaptive=controller, watch_s=watch_s)
        return CodedModule(
            model,
            make_code("gcc", num_inputs=4, num_workers=n),
            workers=VirtualWorkers(model, n, service_s=1.0),
            wait=wait,
        )

    served = module()
    batches = [Batch(i, list(range(4 * i, 4 * i + 4)), 10.0 * i) for i in range(count)]
    arrivals = torch.arange(count, dtype=torch.float64).repeat_interleave(4) * 10.0
    run = serve_open_loop(served, queries, arrivals, batches)
    rounds, used = module(), []
    with torch.no_grad():
        for batch in batches:
            rounds(queries[batch.queries])
            used.append(int(rounds.last_mask[0].sum()))
    assert [len(record.arrived) for record in run.batches] == used
    shares = served.wait.adaptive.stragglers_distribution()
    assert sum(share > 0 for share in shares.values()) > 1, shares  # it did adapt: batches ran at several S
    controllers = served.wait.adaptive, rounds.wait.adaptive
    assert controllers[0].stragglers_distribution() == controllers[1].stragglers_distribution()
    assert controllers[0].num_stragglers == controllers[1].num_stragglers


def _serve(queries=None, arrival_s=None, batches=None, **options):
    model = _mlp()
    coded = _coded(model, "uncoded", VirtualWorkers(model, 4, service_s=0.1), num_inputs=4)
    queries = torch.randn(8, 6) if queries is None else queries
    arrival_s = torch.zeros(8, dtype=torch.float64) if arrival_s is None else arrival_s
    batches = [Batch(0, [0, 1, 2, 3], 0.0), Batch(1, [4, 5, 6, 7], 0.0)] if batches is None else batches
    return serve_open_loop(coded, queries, arrival_s, batches, **options)


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        # two batches with one index: the second replaced the first in flight (queries 4-7 got 0-3's outputs)
        (lambda: _serve(batches=[Batch(0, [0, 1, 2, 3], 0.0), Batch(0, [4, 5, 6, 7], 0.0)]), ValueError, "batches"),
        (lambda: _serve(batches=[Batch(0, [0, 1, 2, 3], 0.0), Batch(2, [4, 5, 6, 7], 0.0)]), ValueError, "batches"),
        (lambda: _serve(batches=[Batch(0, [0, 1, 2, 9], 0.0), Batch(1, [4, 5, 6, 7], 0.0)]), ValueError, "queries"),
        (lambda: _serve(batches=[Batch(0, [0, 1, 2, 3], 0.0), Batch(1, [3, 5, 6, 7], 0.0)]), ValueError, "queries"),
        (lambda: _serve(batches=[Batch(0, [], 0.0), Batch(1, [4, 5, 6, 7], 0.0)]), ValueError, "queries"),
        (lambda: _serve(batches=[Batch(0, [0, 1, 2, 3], math.nan), Batch(1, [4, 5], 0.0)]), ValueError, "formed_s"),
        (lambda: _serve(batches=[]), ValueError, "batches"),
        (lambda: _serve(batches=[(0, [0, 1, 2, 3], 0.0)]), TypeError, "batches"),
        (lambda: _serve(arrival_s=[0.0] * 8), TypeError, "arrival_s"),
        (lambda: _serve(arrival_s=torch.full((8,), math.nan)), ValueError, "arrival_s"),
        (lambda: _serve(arrival_s=torch.zeros(2, 4)), ValueError, "arrival_s"),
        (lambda: _serve(queries=torch.randn(8, 6).tolist()), TypeError, "queries"),
        (lambda: _serve(delays=[[0.0] * 4] * 2), TypeError, "delays"),
        (lambda: HedgePolicy(window=2.5), ValueError, "window"),
        (lambda: HedgePolicy(window=True), TypeError, "window"),
        (lambda: HedgePolicy(warmup=1.5), ValueError, "warmup"),
        (lambda: HedgePolicy("0.9"), TypeError, "percentile"),
        (lambda: HedgePolicy(math.nan), ValueError, "percentile"),
        (lambda: HedgePolicy(fixed_s="1"), TypeError, "fixed_s"),
        (lambda: HedgePolicy(fixed_s=math.nan), ValueError, "fixed_s"),
    ],
)
def test_serving_names_a_bad_argument(call, error, name):
    """One line naming the argument (the audit found silent wrong outputs for a repeated batch index and raw
    AttributeError / IndexError / TypeError / RuntimeError for the others)."""
    with pytest.raises(error, match=name) as info:
        call()
    assert "\n" not in str(info.value)


def test_hand_built_batches_in_any_order_are_served_exactly():
    """Batch indices must be 0..len-1, each once, but the list may hold them in any order."""
    model = _mlp()
    queries = torch.randn(8, 6)
    run = _serve(queries=queries, batches=[Batch(1, [4, 5, 6, 7], 0.0), Batch(0, [0, 1, 2, 3], 0.0)])
    assert [record.index for record in run.batches] == [0, 1] and run.missing == []
    with torch.no_grad():
        torch.testing.assert_close(run.outputs, model(queries), rtol=0, atol=1e-6)
