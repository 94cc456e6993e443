"""Serving on real worker processes (ProcessWorkers): decode from the fastest, survive a killed worker, leave nothing
behind (workers exit when their coordinator dies), and a CPU hog pinned where asked."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from processes import alive

from torchgcc import CodedModule, make_code
from torchgcc.app.workloads import mlp_workload
from torchgcc.serving import PoissonArrivals, form_batches, serve_open_loop
from torchgcc.serving.interference import CpuHog
from torchgcc.workers import ProcessWorkers, WaitPolicy

pytestmark = pytest.mark.distributed


def test_processes_serve_a_code_from_the_fastest_and_survive_a_killed_worker():
    """N = 4, K = 2, S = 2: workers 2 and 3 are 0.2 s and 5 s late on every task and worker 1 is SIGKILLed after
    the 5th batch. Every batch still decodes (from {0, 1} before the kill, {0, 2} after it), equal to CodedModule
    with that mask; uncoded then sends the dead worker's slot to a live one and stays exact."""
    task = mlp_workload(seed=2, batch_size=30)
    queries = task.batch(0)
    arrivals = PoissonArrivals(5.0, seed=3).times(len(queries))
    batches = form_batches(arrivals, batch_size=2, timeout_s=0.02)
    delays = torch.zeros(len(batches), 4, dtype=torch.float64)
    delays[:, 2] = 0.2
    delays[:, 3] = 5.0
    single = CodedModule(task.model, make_code("gcc", num_inputs=2, num_workers=4))
    with ProcessWorkers(task.model, 4) as pool:
        pids = pool.pids

        def kill_after_five(done: int, total: int) -> None:
            if done == 5:
                os.kill(pids[1], signal.SIGKILL)

        run = serve_open_loop(
            CodedModule(task.model, make_code("gcc", num_inputs=2, num_workers=4), workers=pool, wait=WaitPolicy(2)),
            queries,
            arrivals,
            batches,
            delays=delays,
            on_batch=kill_after_five,
        )
        assert run.missing == [] and run.lost_workers == [1]
        assert {tuple(r.arrived) for r in run.batches[:5]} == {(0, 1)}
        assert {tuple(r.arrived) for r in run.batches[-3:]} == {(0, 2)}
        assert float(run.latency_s.max()) < 4.0  # no batch waited for worker 3
        for record, batch in zip(run.batches, batches):
            mask = torch.zeros(4, dtype=torch.bool)
            mask[record.arrived] = True
            with torch.no_grad():
                expected = single(queries[batch.queries], mask=mask.expand(math.ceil(len(batch.queries) / 2), -1))
            assert (run.outputs[batch.queries] - expected).abs().max() <= 1e-5

        uncoded = serve_open_loop(
            CodedModule(task.model, make_code("uncoded", num_inputs=4), workers=pool, wait=WaitPolicy(None)),
            queries[:6],
            arrivals[:6],
            form_batches(arrivals[:6], batch_size=2, timeout_s=0.02),
        )
        assert uncoded.missing == []
        with torch.no_grad():
            torch.testing.assert_close(uncoded.outputs, task.model(queries[:6]), rtol=0, atol=1e-6)
    assert not any(alive(pid) for pid in pids)


def test_workers_exit_when_their_coordinator_is_killed(tmp_path):
    script = textwrap.dedent(
        """
        import sys, time
        from torch import nn
        from torchgcc.workers import ProcessWorkers, WaitPolicy
        if __name__ == "__main__":
            pool = ProcessWorkers(nn.Linear(2, 2), 3)
            print(*pool.pids, flush=True)
            time.sleep(600)
        """
    )
    path = tmp_path / "coordinator.py"
    path.write_text(script)
    # its own TMPDIR: a SIGKILLed coordinator cannot remove its forkserver's pymp-* folder
    env = dict(os.environ, TMPDIR=str(tmp_path))
    coordinator = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(pid) for pid in coordinator.stdout.readline().split()]
        assert len(pids) == 3 and all(alive(pid) for pid in pids)
        coordinator.kill()
        coordinator.wait()
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in pids)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()


def test_cpu_hog_runs_pinned_on_the_given_core_and_stops():
    core = sorted(os.sched_getaffinity(0))[-1]
    with CpuHog([core]) as hog:
        (process,) = hog.processes
        assert os.sched_getaffinity(process.pid) == {core} and process.poll() is None
    assert process.poll() is not None and not hog.running
    with pytest.raises(ValueError, match="cores"):
        CpuHog([10_000])


def test_a_temporary_folder_too_long_for_the_forkserver_socket_is_named_with_the_fix(tmp_path):
    """The forkserver binds a Unix socket under TMPDIR; past 107 bytes the error names TMPDIR and the fix instead of
    multiprocessing's bare 'AF_UNIX path too long' (a fresh interpreter: no forkserver runs yet)."""
    long = tmp_path / ("t" * 60) / ("m" * 60)
    long.mkdir(parents=True)
    script = (
        "import torch\nfrom torchgcc.workers.processes import ProcessWorkers\nProcessWorkers(torch.nn.Identity(), 1)\n"
    )
    env = dict(os.environ, TMPDIR=str(long))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("OSError: ProcessWorkers:") and str(long) in last and "set TMPDIR" in last, done.stderr
