"""Real multi-process jobs launched with a hard time limit.

Each launch starts 3 processes (coordinator + 2 worker ranks) unless it reproduces a documented command; every
scenario that can share a launch does. A bug that hangs a process ends in a timeout that kills the whole process
group, never in a stuck CI job. After a normal run every rank exits 0 and writes nothing on stderr but its own
one-line ``[torchgcc]`` messages.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from torchgcc import CodedModule, make_code
from torchgcc.app.workloads import mlp_workload
from torchgcc.distributed.launch import launch
from torchgcc.stragglers import FixedStragglers

pytestmark = pytest.mark.distributed

COMMON = ["-N", "6", "-K", "3", "--batch-size", "12", "--seed", "5"]  # ranks 1: workers [0, 2, 4], 2: [1, 3, 5]


def assert_clean_stderr(stderr: str) -> None:
    """Every rank's stderr (the launcher's ``--- rank r ---`` headers) holds only one-line ``[torchgcc]`` messages:
    no traceback, no C++ frames, no store warnings."""
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("--- rank ")]
    assert all(line.startswith("[torchgcc] ") for line in lines), stderr[-3000:]


def _single_process_outputs(saved: dict, code_name: str) -> list[torch.Tensor]:
    model = mlp_workload(seed=5, batch_size=12).model
    # the job's coordinator calibrates GCC's default by GCV alone (torchgcc.app.coded_job)
    coded = CodedModule(model, make_code(code_name, num_inputs=3, num_workers=6), validate_calibration=False)
    with torch.no_grad():
        return [coded(s["x"], mask=s["mask"]) for s in saved["steps"]]


def test_simulated_mode_matches_single_process_and_survives_a_hung_rank(tmp_path):
    """Mode (a) equals CodedModule for the same masks; a rank hung from step 2 becomes a straggler every step."""
    path = tmp_path / "run.pt"
    run = launch(
        [
            *COMMON,
            "--code",
            "gcc",
            "--mode",
            "simulated",
            "-S",
            "1",
            "--steps",
            "4",
            "--deadline",
            "0.5",
            "--hang-rank",
            "1",
            "--hang-step",
            "2",
            "--save",
            str(path),
        ],
        nproc=3,
        timeout_s=90,
    )
    assert run.returncodes == [0, 0, 0], run.stderr
    assert_clean_stderr(run.stderr)
    steps = run.steps
    assert [s["step"] for s in steps] == [0, 1, 2, 3]
    saved = torch.load(path, weights_only=False)
    # the drawn masks are the seeded FixedStragglers masks, minus the hung rank's workers from step 2 on
    drawn = FixedStragglers(1, seed=5)
    for s, record in zip(saved["steps"], steps):
        expected = drawn.sample(4, 6)
        if s["step"] >= 2:
            expected[:, [0, 2, 4]] = False
        assert torch.equal(s["mask"], expected)
        assert record["arrived"] == expected.any(0).nonzero().flatten().tolist()
    assert all(s["lost_workers"] == [] for s in steps)  # hung is not lost: its heartbeat thread still beats
    for s, single in zip(saved["steps"], _single_process_outputs(saved, "gcc")):
        torch.testing.assert_close(s["output"], single, rtol=0, atol=1e-6)


def test_injected_latency_returns_early_and_survives_a_killed_rank(tmp_path):
    """Mode (b) never waits for a worker delayed 60 s; a rank killed at step 2 is reported lost, the run ends."""
    path = tmp_path / "run.pt"
    run = launch(
        [
            *COMMON,
            "--code",
            "gcc,bacc",
            "--mode",
            "injected",
            "-S",
            "1",
            "--steps",
            "4",
            "--deadline",
            "0",
            "--latency",
            "shifted_exponential",
            "--latency-param",
            "shift=0.001",
            "--latency-param",
            "scale=0.002",
            "--slow-worker",
            "3",
            "--slow-delay",
            "60",
            "--kill-rank",
            "2",
            "--kill-step",
            "2",
            "--kill-exit-code",
            "7",
            "--heartbeat-timeout",
            "0.5",
            "--save",
            str(path),
        ],
        nproc=3,
        timeout_s=90,  # the job can only finish in time if no step waited for the 60 s worker
    )
    assert run.returncodes == [0, 0, 7], run.stderr
    assert_clean_stderr(run.stderr)
    steps = run.steps
    assert [(s["step"], s["scheme"]) for s in steps] == [(t, c) for t in range(4) for c in ("gcc", "bacc")]
    saved = torch.load(path, weights_only=False)
    assert len(saved["steps"]) == len(steps) and all(bool(s["delays"][3] >= 60) for s in saved["steps"])
    # steps 0 and 1 (two schemes each): the 5 fast workers are exactly the quorum N - S; then rank 2 (workers 1, 3,
    # 5) is gone and steps 2 and 3 decode from the survivors
    assert [r["arrived"] for r in steps] == [[0, 1, 2, 4, 5]] * 4 + [[0, 2, 4]] * 4
    assert steps[-1]["lost_workers"] == [1, 3, 5]
    assert "lost rank(s) [2] hosting workers [1, 3, 5]" in run.stderr
    assert run.of("summary")[0]["lost_workers"] == [1, 3, 5]
    for code in ("gcc", "bacc"):
        mine = [s for s in saved["steps"] if s["scheme"] == code]
        for s, single in zip(mine, _single_process_outputs({"steps": mine}, code)):
            torch.testing.assert_close(s["output"], single, rtol=0, atol=1e-6)


def test_torchrun_entry_point_and_its_teardown_when_a_rank_fails(tmp_path):
    """Under torchrun (agent-hosted store) the job runs; a rank exiting non-zero makes torchrun stop the job, and
    the coordinator says why in its last JSON lines instead of hanging."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "3",
        "--log-dir",
        str(tmp_path / "logs"),  # else torchrun leaves a torchelastic_* folder in /tmp
        "-m",
        "torchgcc.distributed",
        *COMMON,
        "-S",
        "1",
        "--steps",
        "200",  # >= 10 s of steps:
        "--mode",
        "injected",
        "--latency-param",
        "shift=0.05",
        "--latency-param",
        "scale=0.001",  # far more
        # than torchrun needs to notice the failure and stop the job
        "--kill-rank",
        "1",
        "--kill-step",
        "2",
        "--kill-exit-code",
        "1",
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    try:
        stdout, stderr = process.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    records = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert process.returncode != 0, stdout
    assert [r["step"] for r in records if "step" in r][:2] == [0, 1], stderr
    assert all(len(r["arrived"]) >= 5 for r in records if r.get("step", 9) < 2)  # N - S = 5 before the kill
    # after it, the data plane sees the dead rank's pair break at once: decoded from the 3 survivors
    assert all(len(r["arrived"]) >= 3 for r in records if "step" in r)
    errors = [r for r in records if r.get("event") == "error"]
    assert errors and "terminated by the launcher" in errors[0]["error"], stderr
    assert records[-1]["event"] == "summary" and records[-1]["status"] == 143


def test_sigkill_one_rank_and_sigstop_another_mid_run():
    """Real signals, not injected faults: every step still decodes from the survivors, both ranks are reported
    lost (the killed one at once, through its broken pair; the stopped one by its silent heartbeat), and the
    launcher ends the stopped process once the coordinator is done."""
    pids: list[int] = []

    def strike(record):
        if record.get("step") == 3 and record.get("scheme") == "gcc":
            os.kill(pids[2], signal.SIGKILL)  # rank 2: workers 1, 4
            os.kill(pids[3], signal.SIGSTOP)  # rank 3: workers 2, 5

    start = time.monotonic()
    run = launch(
        [
            "-N",
            "6",
            "-K",
            "2",
            "-S",
            "2",
            "--batch-size",
            "8",
            "--seed",
            "7",
            "--code",
            "gcc",
            "--steps",
            "12",
            "--mode",
            "injected",
            "--latency-param",
            "shift=0.03",
            "--latency-param",
            "scale=0.01",
            "--deadline",
            "0.5",
            "--heartbeat-timeout",
            "1",
            "--step-timeout",
            "20",
        ],
        nproc=4,
        timeout_s=100,
        on_start=pids.extend,
        on_record=strike,
        grace_s=3,
    )
    elapsed = time.monotonic() - start
    assert run.returncodes[0] == 0, run.stderr
    assert run.returncodes[2] == -signal.SIGKILL and run.returncodes[3] == -signal.SIGKILL  # stopped, then killed
    assert [s["step"] for s in run.steps] == list(range(12))
    assert run.of("summary")[0]["lost_workers"] == [1, 2, 4, 5]
    assert run.steps[-1]["arrived"] == [0, 3]  # rank 1's workers, the only survivors
    assert "lost rank(s) [2]" in run.stderr and "lost rank(s) [3]" in run.stderr
    for pid in pids:
        assert subprocess.run(["ps", "-p", str(pid)], capture_output=True).returncode != 0  # no process left
    assert elapsed < 100


def test_coded_module_on_the_ranks_of_a_launch_equals_the_in_process_module(tmp_path):
    """Acceptance: rank 0 holds CodedModule(model, code, workers=ProcessGroupWorkers(...)) with a model returning a
    dict of two tensors and noise; ranks 1 and 2 serve the model. Every forward decodes from the first N - S and
    equals the in-process CodedModule given its mask to 1e-6; every rank ends with status 0 and a clean stderr."""
    script = tmp_path / "coded_on_ranks.py"
    script.write_text(
        textwrap.dedent(
            """
            import json
            import warnings

            import torch
            from torch import nn

            import torchgcc
            from torchgcc.distributed import ProcessGroupWorkers, connect, serve
            from torchgcc.noise import GaussianNoise
            from torchgcc.workers import WaitPolicy


            class TwoHeads(nn.Module):
                def __init__(self):
                    super().__init__()
                    torch.manual_seed(5)  # the same weights on every rank
                    self.body = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 10))

                def forward(self, x):
                    logits = self.body(x)
                    return {"logits": logits, "features": logits.tanh()[:, :4]}


            model = TwoHeads().eval()
            channel = connect()
            if channel.rank == 0:
                code = torchgcc.GCC(3, 6)
                # four groups a batch: the default warns that it calibrates on fewer than its pool; this test
                # compares the two modules, which calibrate alike (the same first batch and mask)
                warnings.filterwarnings("ignore", category=torchgcc.CalibrationWarning)
                x = torch.randn(12, 16, generator=torch.Generator().manual_seed(0))
                with ProcessGroupWorkers(channel, num_workers=6) as workers:
                    noise = GaussianNoise(0.1, seed=3)
                    on_ranks = torchgcc.CodedModule(model, code, workers=workers, wait=WaitPolicy(2), noise=noise)
                    # its own code: each module's first forward validates, drawing from its own noise stream
                    in_process = torchgcc.CodedModule(model, torchgcc.GCC(3, 6), noise=GaussianNoise(0.1, seed=3))
                    for _ in range(3):
                        with torch.no_grad():
                            got = on_ranks(x)
                            expected = in_process(x, mask=on_ranks.last_mask)
                        diff = max(float((got[key] - expected[key]).abs().max()) for key in got)
                        arrived = on_ranks.last_mask.sum(1).tolist()
                        print(json.dumps({"keys": list(got), "arrived": arrived, "max_abs_diff": diff}), flush=True)
            else:
                serve(model, channel)
            """
        )
    )
    run = launch([], nproc=3, timeout_s=120, program=(str(script),))
    assert run.returncodes == [0, 0, 0], run.stderr
    assert_clean_stderr(run.stderr)
    assert len(run.records) == 3
    for record in run.records:
        assert record["keys"] == ["logits", "features"] and all(count >= 4 for count in record["arrived"])
        assert record["max_abs_diff"] <= 1e-6


def test_the_documented_injected_launch_ends_with_every_rank_at_status_zero():
    """`python -m torchgcc.distributed.launch --nproc 5 -- --mode injected --code gcc -N 8 -K 4 -S 2 --steps 20`
    used to end with exit codes [0, 1, 1, 1, 1]: the worker ranks read the store after the coordinator was gone.
    It also decoded every step from the first arrivals: its default deadline, 1 s, was inside the default injected
    delays (1 s + Exp(0.5 s)); the default deadline now lies beyond them, so every step waits for N - S = 6.

    The command as a user runs it with its defaults, at 4 steps instead of 20 (each step waits out an injected
    delay of at least 1 s; the shutdown and the wait do not depend on the number of steps)."""
    command = [sys.executable, "-m", "torchgcc.distributed.launch", "--nproc", "5", "--timeout", "300", "--"]
    command += ["--mode", "injected", "--code", "gcc", "-N", "8", "-K", "4", "-S", "2", "--steps", "4"]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=360, env=dict(os.environ, OMP_NUM_THREADS="1")
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "exit codes by rank: [0, 0, 0, 0, 0]" in done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    steps = [r for r in records if "step" in r]
    assert [r["step"] for r in steps] == list(range(4)) and records[-1]["status"] == 0
    assert all(len(r["arrived"]) >= 6 for r in steps), [r["arrived"] for r in steps]
    ours = [line for line in done.stderr.splitlines() if not line.startswith(("rank ", "exit codes by rank"))]
    assert_clean_stderr("\n".join(ours))


def test_bench_latency_quick_runs_end_to_end(tmp_path):
    """The documented smoke run (four jobs of 5 processes: 8x4 and 24x8 at two straggler probabilities) exits 0
    and writes its results: the command is documented as the first thing to try, and it once failed every time
    while no test ran it.

    With a tenth of the default delays (fast 2 ms, slow 30 ms instead of 20 ms and 300 ms) and 3 processes a job
    instead of 5: the same jobs and code path without ~60 s of sleeping (20 steps of 8 codes, most waiting out a
    slow worker at p = 0.2) and 8 of the 20 process start-ups (each imports torch: 2.5 s of CPU)."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "torchgcc", "bench-latency", "--quick", "--fast", "0.002", "--slow", "0.03"]
    command += ["--nproc", "3", "--out", str(out)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=900, env=dict(os.environ, OMP_NUM_THREADS="1")
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert [(s["N"], s["K"], s["p"]) for s in results["settings"]] == [
        (8, 4, 0.05),
        (8, 4, 0.2),
        (24, 8, 0.05),
        (24, 8, 0.2),
    ]
    assert all(row["steps"] == 20 for s in results["settings"] for row in s["schemes"].values())
    config = results["config"]  # the conditions the timings ran under
    assert len(config["load_average_before"]) == len(config["load_average_after"]) == 3
    assert config["threads_per_process"] == 1
    assert all((out / name).is_file() for name in ("results.csv", "steps.jsonl", "frontier.png"))
