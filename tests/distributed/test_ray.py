"""The Ray engine on a local Ray instance and one set of actors for the module: CodedModule on RayWorkers decodes
from the first N - S (equal to the in-process CodedModule with the round's mask, for a model with two outputs and
noise), killed actors are handled (one for good, one restarted by Ray), the serving loop runs on the actors, and the
job's loop on the Ray engine writes the torchrun engine's records."""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time

import pytest
import torch
from torch import nn

from torchgcc import CodedModule, make_code
from torchgcc.app.workloads import mlp_workload
from torchgcc.noise import GaussianNoise
from torchgcc.stragglers import FixedStragglers
from torchgcc.workers import Task, WaitPolicy

pytestmark = pytest.mark.distributed
ray = pytest.importorskip("ray")

from torchgcc.distributed.ray_workers import RayWorkers, local_ray  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors cannot import this test module

N, K = 6, 3


class TwoHeads(nn.Module):
    """A model returning a dict of two tensors."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.body = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 10))

    def forward(self, x):
        logits = self.body(x)
        return {"logits": logits, "features": logits.tanh()[:, :4]}


@pytest.fixture(scope="module")
def task():
    return mlp_workload(seed=5, batch_size=12)


@pytest.fixture(scope="module")
def ray_instance():
    with local_ray(num_cpus=2) as instance:
        yield instance


@pytest.fixture(scope="module")
def workers(task, ray_instance):
    with RayWorkers(task.model, N, max_restarts=1) as actors:
        yield actors


def test_coded_module_on_ray_actors_equals_the_in_process_module_given_the_same_mask(ray_instance):
    """Acceptance: a dict-output model with noise; the round decodes from the first N - S = 4 (or more, when they
    came together) and equals the in-process CodedModule given that mask to 1e-6; then the same with a drawn mask
    of two stragglers per group (different per group), which the round waits for and decodes from."""
    model = TwoHeads().eval()
    code = make_code("gcc", num_inputs=K, num_workers=N)
    x = torch.randn(12, 16, generator=torch.Generator().manual_seed(0))
    drawn = FixedStragglers(2, seed=1).sample(4, N)
    with RayWorkers(model, N) as actors:
        on_ray = CodedModule(model, code, workers=actors, wait=WaitPolicy(2), noise=GaussianNoise(0.1, seed=3))
        # its own code: each module's first forward validates, drawing from its own noise stream
        in_process = CodedModule(model, make_code("gcc", num_inputs=K, num_workers=N), noise=GaussianNoise(0.1, seed=3))
        for mask in (None, drawn):
            with torch.no_grad():
                got = on_ray(x, mask=mask)
                expected = in_process(x, mask=on_ray.last_mask)
            if mask is None:  # the arrival mask: the same workers for every group
                assert int(on_ray.last_mask[0].sum()) >= N - 2
                assert bool((on_ray.last_mask == on_ray.last_mask[:1]).all())
            else:
                assert torch.equal(on_ray.last_mask, drawn) and not bool((drawn == drawn[:1]).all())
            assert list(got) == ["logits", "features"]
            for key in got:
                torch.testing.assert_close(got[key], expected[key], rtol=0, atol=1e-6)


def wait_until_dead(workers, worker: int, timeout_s: float = 30.0) -> None:
    """Return once a call to ``worker``'s killed (not restarting) actor fails."""
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        try:
            ray.get(workers.ping(worker), timeout=timeout_s)
        except ray.exceptions.RayActorError:  # the kill has landed
            return
        time.sleep(0.01)
    raise AssertionError(f"actor {worker} still answers {timeout_s} s after it was killed")


def test_killed_actors_are_lost_every_round_still_equals_coded_module_and_a_restarted_one_comes_back(workers, task):
    """Simulated masks with S = 2. Before round 2 actor 1 is killed for good and actor 3 is killed and restarted
    by Ray: every round decodes, both are reported lost and left out; actor 3 is re-admitted once it answers; each
    output equals CodedModule with the mask the round used (max difference <= 1e-5)."""
    code = make_code("gcc", num_inputs=K, num_workers=N)
    wait = WaitPolicy(0, deadline_s=5.0)
    coded = CodedModule(task.model, code, FixedStragglers(2, seed=5), workers=workers, wait=wait)
    single = CodedModule(task.model, code)
    readmitted_at, give_up = None, time.monotonic() + 60  # a restart takes seconds (a new process imports torch)
    worker_1 = []  # per round: (worker 1 reported lost, worker 1 in the mask)
    for step in range(10_000):
        if step == 2:
            workers.kill(1)
            workers.kill(3, restart=True)
            wait_until_dead(workers, 1)  # ray.kill is asynchronous: round 2's task could still reach the actor
        x = task.batch(step)
        with torch.no_grad():
            output = coded(x)
            assert (output - single(x, mask=coded.last_mask)).abs().max() <= 1e-5
        worker_1.append((1 in coded.last_round.lost_workers, bool(coded.last_mask[:, 1].any())))
        if bool(coded.last_mask[:, 3].any()) and step > 2:
            readmitted_at = step
        if (readmitted_at is not None and step >= 4) or time.monotonic() > give_up:
            break
    assert readmitted_at is not None, workers.events
    assert len(worker_1) > 4 and worker_1[2:] == [(True, False)] * (len(worker_1) - 2)  # killed for good at round 2
    events = [(e["event"], e["workers"]) for e in workers.events]
    assert sorted(events[:2]) == [("lost", [1]), ("lost", [3])] and events[2:] == [("readmitted", [3])]


def test_serving_on_actors_decodes_from_the_fastest_and_survives_a_killed_actor(task, ray_instance):
    """The open-loop serving loop on its own 4 actors: worker 3 is 5 s late on every task and never waited for;
    actor 1 is killed after the 4th batch and the code decodes from {0, 2} from then on."""
    from torchgcc.serving import PoissonArrivals, form_batches, serve_open_loop

    queries = task.batch(1)[:20]
    arrivals = PoissonArrivals(8.0, seed=1).times(len(queries))
    batches = form_batches(arrivals, batch_size=2, timeout_s=0.02)
    delays = torch.zeros(len(batches), 4, dtype=torch.float64)
    delays[:, 2], delays[:, 3] = 0.2, 5.0
    code = make_code("gcc", num_inputs=2, num_workers=4)
    single = CodedModule(task.model, code)
    with RayWorkers(task.model, 4) as actors:

        def kill_after_four(done: int, total: int) -> None:
            if done == 4:
                actors.kill(1)

        run = serve_open_loop(
            CodedModule(task.model, code, workers=actors, wait=WaitPolicy(2)),
            queries,
            arrivals,
            batches,
            delays=delays,
            on_batch=kill_after_four,
        )
    assert run.missing == [] and run.lost_workers == [1]
    assert {tuple(r.arrived) for r in run.batches[:4]} == {(0, 1)} and run.batches[-1].arrived == [0, 2]
    assert float(run.latency_s.max()) < 4.0
    for record, batch in zip(run.batches, batches):
        mask = torch.zeros(4, dtype=torch.bool)
        mask[record.arrived] = True
        with torch.no_grad():
            expected = single(queries[batch.queries], mask=mask.expand(-(-len(batch.queries) // 2), -1))
        assert (run.outputs[batch.queries] - expected).abs().max() <= 1e-5


def test_the_job_on_the_ray_engine_writes_the_torchrun_engines_records(workers):
    """``JobSettings(engine="ray")``: the job's loop on Ray actors gives the same records as under torchrun (the
    keys of docs/distributed.md), every code equal to the single-process CodedModule (--check) and the baselines
    exact up to rounding."""
    from torchgcc.app.coded_job import JobSettings, run_job

    emitted = []
    settings = JobSettings(
        engine="ray",
        schemes=("gcc", "replication", "uncoded"),
        num_workers=N,
        num_inputs=K,
        num_stragglers=1,
        steps=3,
        batch_size=12,
        mode="injected",
        latency_params={"shift": 0.001, "scale": 0.002},
        check=True,
        seed=5,
    )
    outcome = run_job(settings, emit=emitted.append)
    assert outcome.status == 0 and emitted[0]["event"] == "start" and emitted[0]["engine"] == "ray"
    keys = {"step", "scheme", "latency_s", "compute_s", "payload_mb_per_rank", "arrived", "missing", "mse"}
    keys |= {"agreement", "lost_workers", "S", "max_abs_diff_single_process"}
    assert len(outcome.records) == 9 and all(set(record) == keys for record in outcome.records)
    coded = [r for r in outcome.records if r["scheme"] == "gcc"]
    exact = [r for r in outcome.records if r["scheme"] != "gcc"]
    assert all(len(r["arrived"]) >= N - 1 and r["S"] == 1 for r in coded)
    assert all(r["max_abs_diff_single_process"] <= 1e-5 for r in outcome.records)
    assert all(r["mse"] < 1e-12 and r["agreement"] == 1.0 and r["S"] is None for r in exact)
    assert outcome.summary["steps"] == 3 and set(outcome.summary["schemes"]) == {"gcc", "replication", "uncoded"}


def test_a_signal_handlers_exception_comes_out_of_wait_as_itself(workers, task):
    """``ray.wait`` runs Python's signal handlers from Cython, lets what one raises out only when it returns, and
    wraps it in a ``SystemError``; the engine's wait raises the handler's own exception (a job's termination,
    Ctrl-C's ``KeyboardInterrupt``) while the task it waits for is still running."""

    class Stop(Exception):
        pass

    def stop(signum: int, frame: object) -> None:
        raise Stop

    previous = signal.signal(signal.SIGUSR1, stop)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        workers.submit([Task("late", 0, task.batch(0)[:2], delay_s=30.0)])
        timer.start()
        with pytest.raises(Stop):
            workers.wait(float("inf"))
        assert workers.wait(time.monotonic()) == []  # not once the task had ended (30 s on)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
        workers.cancel(["late"])


class FailsOnNaN(nn.Module):
    """A linear model that raises on an input holding NaN (how a test makes chosen workers' tasks fail)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.linear = nn.Linear(3, 2)

    def forward(self, x):
        if bool(torch.isnan(x).any()):
            raise RuntimeError("model failed on purpose")
        return self.linear(x)


def test_a_task_whose_model_raises_is_a_failed_worker_for_its_round(ray_instance, caplog):
    """Worker 1's model raises (its inputs hold NaN) and S = 0: the round decodes from the other three, each equal to
    the model run here, instead of letting Ray's RayTaskError out; the actor stays (not lost) and the next round
    uses it. When too few are left (three raise), TooFewWorkersError names the failures, and the round's task still
    running (worker 3: 30 s of injected delay) is cancelled: the next round on worker 3 is not stuck behind it."""
    from torchgcc.app.coded_job import InjectedDelays
    from torchgcc.workers import TooFewWorkersError, run_round

    model = FailsOnNaN().eval()
    code = make_code("gcc", num_inputs=2, num_workers=4, lambda_dec="spacing")
    coded = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(0))
    bad = coded.clone()
    bad[:, 1] = math.nan
    with RayWorkers(model, 4) as actors:
        engine = InjectedDelays(actors, torch.zeros(4))
        with caplog.at_level("WARNING", logger="torchgcc.distributed"):
            done = run_round(engine, bad, code=code, wait=WaitPolicy(0, timeout_s=30.0))
        assert done.mask[0].tolist() == [True, False, True, True] and done.lost_workers == []
        assert "worker 1" in caplog.text and "model failed on purpose" in caplog.text
        with torch.no_grad():
            expected = model(coded.flatten(0, 1)).unflatten(0, (2, 4))
        torch.testing.assert_close(done.results[:, [0, 2, 3]], expected[:, [0, 2, 3]], rtol=0, atol=1e-6)
        assert bool(run_round(engine, coded, code=code, wait=WaitPolicy(0, timeout_s=30.0)).mask.all())

        worse = coded.clone()
        worse[:, :3] = math.nan
        engine.delays = torch.tensor([0.0, 0.0, 0.0, 30.0])
        with pytest.raises(TooFewWorkersError, match=r"failed this round: \{0: .*model failed on purpose"):
            run_round(engine, worse, code=code, wait=WaitPolicy(0, timeout_s=2.0))
        engine.delays = None
        start = time.monotonic()
        assert bool(run_round(engine, coded, code=code, wait=WaitPolicy(0, timeout_s=20.0)).mask.all())
        assert time.monotonic() - start < 10.0


def test_closed_ray_workers_say_so(ray_instance):
    actors = RayWorkers(FailsOnNaN(), 2)
    actors.close()
    with pytest.raises(RuntimeError, match="RayWorkers is closed"):
        actors.submit([Task("k", 0, torch.zeros(1, 3))])
