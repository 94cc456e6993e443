"""Real multi-process jobs (gloo-free: the store transport) launched with a hard time limit.

Each launch starts 3 processes (coordinator + 2 worker ranks), the most these CI machines afford; every scenario
that can share a launch does. A bug that hangs a process ends in ``TimeoutError`` from the launcher, which kills the
whole process group, never in a stuck CI job.
"""

from __future__ import annotations

import pytest
import torch

from torchgcc import CodedModule, make_code
from torchgcc.distributed.launch import launch
from torchgcc.distributed.tasks import mlp_task

pytestmark = pytest.mark.distributed

COMMON = ["-N", "6", "-K", "3", "--batch-size", "12", "--seed", "5"]  # ranks 1: workers [0, 2, 4], 2: [1, 3, 5]


def _single_process_outputs(saved: dict, code_name: str) -> list[torch.Tensor]:
    model = mlp_task(seed=5, batch_size=12).model
    coded = CodedModule(model, make_code(code_name, num_inputs=3, num_workers=6))
    with torch.no_grad():
        return [coded(s["x"], mask=s["mask"]) for s in saved["steps"]]


def test_simulated_mode_matches_single_process_and_survives_a_hung_rank(tmp_path):
    """Mode (a) equals CodedModule for the same masks; a rank hung from step 2 becomes a straggler every step."""
    path = tmp_path / "run.pt"
    run = launch(
        [*COMMON, "--code", "gcc", "--mode", "simulated", "-S", "1", "--steps", "4", "--deadline", "0.5",
         "--hang-rank", "1", "--hang-step", "2", "--save", str(path)],
        nproc=3,
        timeout_s=90,
    )
    assert run.returncodes == [0, 0, 0], run.stderr
    steps = run.steps
    assert [s["step"] for s in steps] == [0, 1, 2, 3]
    saved = torch.load(path, weights_only=False)
    # the drawn masks are the seeded FixedStragglers masks, minus the hung rank's workers from step 2 on
    from torchgcc.stragglers import FixedStragglers

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
        [*COMMON, "--code", "gcc,bacc", "--mode", "injected", "-S", "1", "--steps", "4", "--deadline", "0",
         "--latency", "shifted_exponential", "--latency-param", "shift=0.001", "--latency-param", "scale=0.002",
         "--slow-worker", "3", "--slow-delay", "60", "--kill-rank", "2", "--kill-step", "2", "--kill-exit-code", "7",
         "--heartbeat-timeout", "0.5", "--save", str(path)],
        nproc=3,
        timeout_s=90,  # the job can only finish in time if no step waited for the 60 s worker
    )
    assert run.returncodes == [0, 0, 7], run.stderr
    steps = run.steps
    assert [(s["step"], s["code"]) for s in steps] == [(t, c) for t in range(4) for c in ("gcc", "bacc")]
    saved = torch.load(path, weights_only=False)
    for s, record in zip(saved["steps"], steps):
        assert torch.equal(s["delays"][3] >= 60, torch.tensor(True))
        if record["step"] < 2:  # the 5 fast workers are exactly the quorum N - S
            assert record["arrived"] == [0, 1, 2, 4, 5]
        else:  # rank 2 (workers 1, 3, 5) is gone: decode from the survivors
            assert record["arrived"] == [0, 2, 4]
    assert steps[-1]["lost_workers"] == [1, 3, 5]
    assert "lost rank(s) [2] hosting workers [1, 3, 5]" in run.stderr
    assert run.of("summary")[0]["lost_workers"] == [1, 3, 5]
    for code in ("gcc", "bacc"):
        mine = [s for s in saved["steps"] if s["code"] == code]
        for s, single in zip(mine, _single_process_outputs({"steps": mine}, code)):
            torch.testing.assert_close(s["output"], single, rtol=0, atol=1e-6)
