"""The distributed executor with an adaptive wait count: the S of every step is the controller's choice."""

from __future__ import annotations

import math

import pytest
import torch

from torchgcc import CodedModule, make_code
from torchgcc.control.wait_count import WaitCountController
from torchgcc.distributed.launch import launch
from torchgcc.distributed.tasks import mlp_task

pytestmark = pytest.mark.distributed

N, K, DEADLINE = 6, 3, 0.4


def test_gcc_adaptive_waits_for_the_controllers_n_minus_s_and_feeds_it_watched_arrivals(tmp_path):
    path = tmp_path / "run.pt"
    run = launch(
        ["-N", str(N), "-K", str(K), "--batch-size", "12", "--seed", "5", "--code", "gcc:adaptive,gcc:S=1",
         "--mode", "injected", "--steps", "7", "--deadline", "0", "--latency", "shifted_exponential",
         "--latency-param", "shift=0.01", "--latency-param", "scale=0.03", "--wait-deadline", str(DEADLINE),
         "--wait-warmup", "2", "--save", str(path)],
        nproc=3, timeout_s=90,
    )
    assert run.returncodes == [0, 0, 0], run.stderr
    saved = torch.load(path, weights_only=False)
    records = [r for r in run.steps if r["scheme"] == "gcc:adaptive"]
    steps = [s for s in saved["steps"] if s["scheme"] == "gcc:adaptive"]
    # replay an identical controller on the arrivals the executor recorded: it must choose the same S every step
    replay = WaitCountController(N, deadline=DEADLINE, budget=0.01, stragglers=range(N - K + 1), discount=0.9,
                                 eta=2.0, warmup=2, seed=5)
    for record, step in zip(records, steps):
        chosen = replay.choose()
        assert record["S"] == chosen
        assert len(record["arrived"]) >= N - chosen
        assert step["watched_s"] >= DEADLINE  # late arrivals were recorded up to the deadline ...
        late = step["delays"] > DEADLINE
        assert torch.isfinite(step["arrival_s"][~late]).all()  # ... so every worker faster than it was seen
        replay.observe(step["arrival_s"], stragglers=chosen, watched_until=step["watched_s"])
    chosen = [r["S"] for r in records]
    assert chosen[:2] == [N - K, N - K] and min(chosen) < N - K  # warm-up at the fallback, then it waits for more
    assert saved["wait_policies"]["gcc:adaptive"]["controller"]["steps"] == 7
    assert all(r["S"] == 1 for r in run.steps if r["scheme"] == "gcc:S=1")
    summary = run.of("summary")[0]
    assert math.isclose(summary["schemes"]["gcc:adaptive"]["mean_S"], sum(chosen) / len(chosen))
    coded = CodedModule(mlp_task(seed=5, batch_size=12).model, make_code("gcc", num_inputs=K, num_workers=N))
    with torch.no_grad():
        for step in steps:  # decoded from exactly the results in the mask, like the single-process module
            torch.testing.assert_close(step["output"], coded(step["x"], mask=step["mask"]), rtol=0, atol=1e-6)
