"""The torchrun runtime of gradient-coded training against the simulator replaying the same arrivals.

Each test launches one torchrun job (gloo, CPU) with a hard time limit that kills the whole process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest
import torch

from torchgcc.app.commands.gradient_coding_job import build_job
from torchgcc.gradient_coding import Simulation
from torchgcc.gradient_coding.gradients import flat_parameters

pytestmark = pytest.mark.distributed


def _torchrun(args: list[str], nproc: int, timeout_s: float = 55.0) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="torchgcc-test-logs-") as logs:  # else torchrun leaves torchelastic_*
        return _torchrun_logged(args, nproc, timeout_s, logs)


def _torchrun_logged(args: list[str], nproc: int, timeout_s: float, logs: str) -> list[dict]:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        f"--log-dir={logs}",
        "-m",
        "torchgcc.gradient_coding.runtime",
        *args,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"torchrun job did not finish in {timeout_s} s:\n{err[-3000:]}")
    assert process.returncode == 0, err[-3000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _replay(args: list[str], saved: dict, num_workers: int) -> torch.Tensor:
    _, job = build_job(args, num_workers=num_workers)
    Simulation(job.code, job.model, job.data, lr=job.lr, delays=None).run(job.steps, arrivals=saved["arrivals"])
    return flat_parameters(job.model)


def test_fr_with_a_worker_three_seconds_late_matches_the_simulator(tmp_path):
    """5 processes (4 workers, s = 1, FR); worker 3 is 3 s late at every step: no step waits for it, and the
    model after 10 steps equals the simulator's for the same arrivals."""
    path = tmp_path / "run.pt"
    args = [
        "--scheme",
        "gc-fr",
        "-s",
        "1",
        "--steps",
        "10",
        "--slow-worker",
        "3",
        "--slow-delay",
        "3",
        "--save",
        str(path),
    ]
    records = _torchrun(args, nproc=5)
    steps = [r for r in records if "step" in r and "event" not in r]
    assert [r["step"] for r in steps] == list(range(10))
    assert all(r["wall_s"] < 1.0 for r in steps), [r["wall_s"] for r in steps]
    assert all(3 not in r["arrived"] and len(r["arrived"]) == 3 for r in steps)
    saved = torch.load(path, weights_only=False)
    torch.testing.assert_close(saved["parameters"], _replay(args, saved, 4), rtol=0, atol=1e-6)


def test_pipelined_cr_under_random_delays_matches_the_simulator(tmp_path):
    """PGC-CR (uniform decoding; every worker's cache must advance every step) with exponential delays."""
    path = tmp_path / "run.pt"
    args = [
        "--scheme",
        "pgc-cr",
        "-s",
        "1",
        "--steps",
        "8",
        "--mean-delay",
        "0.05",
        "--model",
        "lenet5",
        "--lr",
        "0.2",
        "--save",
        str(path),
    ]
    records = _torchrun(args, nproc=4)
    assert records[-1]["event"] == "summary" and records[-1]["workers_not_closed"] == []
    saved = torch.load(path, weights_only=False)
    assert all(len(a) == 2 for a in saved["arrivals"])
    torch.testing.assert_close(saved["parameters"], _replay(args, saved, 3), rtol=0, atol=1e-6)


def test_adaptive_wait_count_chooses_s_per_step_from_the_arrivals_it_observed(tmp_path):
    """IS-SGD with S in 0..2 chosen per step under fast delays (no worker near the 0.3 s deadline): the controller
    starts at S = 2 and learns to wait for every worker; the abandoned workers report when their results would
    have been ready, the choices replay from the saved finish times, and the model equals the simulator's for the
    same arrivals."""
    from torchgcc.control.wait_count import WaitCountController

    path = tmp_path / "run.pt"
    args = [
        "--scheme",
        "is-sgd",
        "-s",
        "2",
        "--steps",
        "16",
        "--mean-delay",
        "0.02",
        "--wait-deadline",
        "0.3",
        "--wait-budget",
        "0.2",
        "--save",
        str(path),
    ]
    records = _torchrun(args, nproc=5)
    steps = [r for r in records if "step" in r and "event" not in r]
    saved = torch.load(path, weights_only=False)
    chosen = saved["S_by_step"]
    assert [r["S"] for r in steps] == chosen and chosen[0] == 2 and chosen[-1] == 0  # warm-up at S = s, then all
    assert all(b <= a for a, b in zip(chosen, chosen[1:]))
    replay = WaitCountController(
        4, deadline=0.3, budget=0.2, candidates=range(3), discount=0.95, eta=2.0, warmup=1, max_step=4, seed=0
    )
    for record, finish in zip(steps, saved["finish_s"]):
        s = replay.choose()
        assert record["S"] == s and len(record["arrived"]) >= 4 - s
        assert torch.isfinite(finish).all() and (finish < 0.3).all()  # every worker heard, abandoned ones too
        replay.observe(finish.masked_fill(finish > 0.3, float("inf")), num_stragglers=s, watched_until=0.3)
    assert saved["wait_policy"]["controller"]["steps"] == 16
    torch.testing.assert_close(saved["parameters"], _replay(args, saved, 4), rtol=0, atol=1e-6)
