"""The Ray backend of the executor on a local Ray instance and one set of actors for the module: ``ray.wait`` for
the first N - S, killed actors handled (one for good, one restarted by Ray); outputs checked against the
single-process CodedModule with the masks the steps used."""

from __future__ import annotations

import time

import pytest
import torch

from torchgcc import CodedModule, make_code
from torchgcc.distributed.arrival import Injected, Simulated
from torchgcc.distributed.faults import FaultPlan
from torchgcc.distributed.schemes import make_execution_scheme
from torchgcc.distributed.tasks import mlp_task
from torchgcc.stragglers import FixedStragglers, LatencyStragglers

pytestmark = pytest.mark.distributed
ray = pytest.importorskip("ray")

from torchgcc.distributed.ray_coordinator import RayCoordinator  # noqa: E402
from torchgcc.distributed.ray_workers import RayWorkers, local_ray  # noqa: E402

N, K = 6, 3


@pytest.fixture(scope="module")
def task():
    return mlp_task(seed=5, batch_size=12)


@pytest.fixture(scope="module")
def workers(task):
    with local_ray(num_cpus=2), RayWorkers(task.model, N, max_restarts=1) as actors:
        yield actors


def test_injected_delays_decode_from_the_first_n_minus_s_and_replication_is_exact(workers, task):
    """A worker 30 s late is never waited for: the code decodes from the first N - S = 5, replication from one
    copy of each input (exact), each step far below the slow worker's delay; then its task is cancelled."""
    mode = Injected(LatencyStragglers("shifted_exponential", seed=1, shift=0.001, scale=0.002), num_stragglers=1)
    coordinator = RayCoordinator(workers, faults=FaultPlan(slow_workers=(4,), slow_delay_s=30.0))
    x = task.batch(0)
    with torch.no_grad():
        reference = task.model(x)
        single = CodedModule(task.model, make_code("gcc", num_inputs=K, num_workers=N))
    results = {}
    for step, name in enumerate(("gcc", "replication", "gcc")):
        result = coordinator.step(
            make_execution_scheme(name, num_inputs=K, num_workers=N), x, mode.plan(4, N), step=step
        )
        assert 4 not in result.arrived and result.latency_s < 10
        results.setdefault(name, []).append(result)
    assert [len(result.arrived) for result in results["gcc"]] == [N - 1, N - 1]
    with torch.no_grad():
        assert max((r.output - single(x, mask=r.mask)).abs().max() for r in results["gcc"]) <= 1e-5
    torch.testing.assert_close(results["replication"][0].output, reference, rtol=0, atol=1e-6)
    assert coordinator.lost_workers == []


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


def test_killed_actors_are_lost_every_step_still_equals_coded_module_and_a_restarted_one_comes_back(workers, task):
    """Simulated masks with S = 2. Before step 2 actor 1 is killed for good and actor 3 is killed and restarted
    by Ray: every step decodes, both are reported lost and left out; actor 3 is re-admitted once it answers; each
    output equals CodedModule with the mask the step used (max difference <= 1e-5)."""
    scheme = make_execution_scheme("gcc", num_inputs=K, num_workers=N)
    single = CodedModule(task.model, make_code("gcc", num_inputs=K, num_workers=N))
    mode = Simulated(FixedStragglers(2, seed=5))
    coordinator = RayCoordinator(workers, step_timeout_s=30)
    readmitted_at, give_up = None, time.monotonic() + 60  # a restart takes seconds (a new process imports torch)
    worker_1 = []  # per step: (worker 1 reported lost, worker 1 in the mask)
    for step in range(10_000):
        if step == 2:
            workers.kill(1)
            workers.kill(3, restart=True)
            wait_until_dead(workers, 1)  # ray.kill is asynchronous: step 2's task could still reach the actor
        x = task.batch(step)
        result = coordinator.step(scheme, x, mode.plan(4, N), step=step, deadline_s=5.0)
        worker_1.append((1 in result.lost_workers, bool(result.mask[:, 1].any())))
        if 3 in result.arrived and step > 2:
            readmitted_at = step
        with torch.no_grad():
            assert (result.output - single(x, mask=result.mask)).abs().max() <= 1e-5
        if (readmitted_at is not None and step >= 4) or time.monotonic() > give_up:
            break
    assert readmitted_at is not None, coordinator.events
    assert len(worker_1) > 4 and worker_1[2:] == [(True, False)] * (len(worker_1) - 2)  # killed for good at step 2
    events = [(e["event"], e["workers"]) for e in coordinator.events]
    assert sorted(events[:2]) == [("lost", [1]), ("lost", [3])] and events[2:] == [("readmitted", [3])]


def test_serving_on_actors_decodes_from_the_fastest_and_survives_a_killed_actor(workers, task):
    """The open-loop serving loop on its own 4 actors (RayPool): worker 3 is 5 s late on every task and never
    waited for; actor 1 is killed after the 4th batch and the code decodes from {0, 2} from then on."""
    from torchgcc.serving import PoissonArrivals, form_batches, serve_open_loop
    from torchgcc.serving.ray_pool import RayPool

    queries = task.batch(1)[:20]
    arrivals = PoissonArrivals(8.0, seed=1).times(len(queries))
    batches = form_batches(arrivals, batch_size=2, timeout_s=0.02)
    delays = torch.zeros(len(batches), 4, dtype=torch.float64)
    delays[:, 2], delays[:, 3] = 0.2, 5.0
    single = CodedModule(task.model, make_code("gcc", num_inputs=2, num_workers=4))
    with RayWorkers(task.model, 4) as actors, RayPool(actors) as pool:

        def kill_after_four(done: int, total: int) -> None:
            if done == 4:
                actors.kill(1)

        run = serve_open_loop(
            pool,
            make_execution_scheme("gcc", num_inputs=2, num_workers=4),
            queries,
            arrivals,
            batches,
            num_stragglers=2,
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


def test_the_job_on_the_ray_engine_writes_the_torchrun_executors_records(workers):
    """``JobSettings(engine="ray")``: the job's loop on Ray actors gives the same records as under torchrun (the
    keys of docs/distributed.md), codes equal to the single-process CodedModule (--check) and baselines exact."""
    from torchgcc.distributed.job import JobSettings, run_job

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
    keys |= {"agreement", "lost_workers", "S"}
    coded = [r for r in outcome.records if r["scheme"] == "gcc"]
    exact = [r for r in outcome.records if r["scheme"] != "gcc"]
    assert len(coded) == 3 and len(exact) == 6
    assert all(set(record) == keys | {"max_abs_diff_single_process"} for record in coded)
    assert all(len(r["arrived"]) >= N - 1 and r["max_abs_diff_single_process"] <= 1e-5 for r in coded)
    assert all(set(record) == keys for record in exact)
    assert all(r["mse"] < 1e-12 and r["agreement"] == 1.0 for r in exact)  # float32 rounding of other batch shapes
    assert outcome.summary["steps"] == 3 and set(outcome.summary["schemes"]) == {"gcc", "replication", "uncoded"}
