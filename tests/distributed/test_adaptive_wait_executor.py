"""The distributed executor with an adaptive wait count: the S of every step is the controller's choice."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from torchgcc import CodedModule, make_code
from torchgcc.app.wait_count_verdict import compare_with_fixed
from torchgcc.app.workloads import mlp_workload
from torchgcc.control.wait_count import WaitCountController
from torchgcc.distributed.launch import launch

pytestmark = pytest.mark.distributed

N, K, DEADLINE = 6, 3, 0.4


def test_gcc_adaptive_waits_for_the_controllers_n_minus_s_and_feeds_it_watched_arrivals(tmp_path):
    path = tmp_path / "run.pt"
    run = launch(
        [
            "-N",
            str(N),
            "-K",
            str(K),
            "--batch-size",
            "12",
            "--seed",
            "5",
            "--code",
            "gcc:adaptive,gcc:S=1",
            "--mode",
            "injected",
            "--steps",
            "7",
            "--deadline",
            "0",
            "--latency",
            "shifted_exponential",
            "--latency-param",
            "shift=0.01",
            "--latency-param",
            "scale=0.03",
            "--wait-deadline",
            str(DEADLINE),
            "--wait-warmup",
            "2",
            "--save",
            str(path),
        ],
        nproc=3,
        timeout_s=90,
    )
    assert run.returncodes == [0, 0, 0], run.stderr
    saved = torch.load(path, weights_only=False)
    records = [r for r in run.steps if r["scheme"] == "gcc:adaptive"]
    steps = [s for s in saved["steps"] if s["scheme"] == "gcc:adaptive"]
    # replay an identical controller on the arrivals the executor recorded: it must choose the same S every step
    replay = WaitCountController(
        N,
        deadline=DEADLINE,
        budget=0.01,
        candidates=range(N - K + 1),
        discount=0.95,
        eta=2.0,
        warmup=2,
        max_step=4,
        seed=5,
    )
    for record, step in zip(records, steps):
        chosen = replay.choose()
        assert record["S"] == chosen
        assert len(record["arrived"]) >= N - chosen
        assert step["watched_s"] >= DEADLINE  # late arrivals were recorded up to the deadline ...
        late = step["delays"] > DEADLINE
        assert torch.isfinite(step["arrival_s"][~late]).all()  # ... so every worker faster than it was seen
        replay.observe(step["arrival_s"], num_stragglers=chosen, watched_until=step["watched_s"])
    chosen = [r["S"] for r in records]
    assert chosen[:2] == [N - K, N - K] and min(chosen) < N - K  # warm-up at the fallback, then it waits for more
    assert saved["wait_policies"]["gcc:adaptive"]["controller"]["steps"] == 7
    assert all(r["S"] == 1 for r in run.steps if r["scheme"] == "gcc:S=1")
    summary = run.of("summary")[0]
    assert summary["wait_policies"]["gcc:adaptive"]["changes"] == replay.controller.changes
    assert math.isclose(summary["schemes"]["gcc:adaptive"]["mean_S"], sum(chosen) / len(chosen))
    model, code = mlp_workload(seed=5, batch_size=12).model, make_code("gcc", num_inputs=K, num_workers=N)
    coded = CodedModule(model, code, validate_calibration=False)  # as the job's coordinator calibrates (GCV alone)
    with torch.no_grad():
        for step in steps:  # decoded from exactly the results in the mask, like the single-process module
            torch.testing.assert_close(step["output"], coded(step["x"], mask=step["mask"]), rtol=0, atol=1e-6)


def test_bench_latency_adaptive_wait_reports_the_verdict_of_its_own_rows(tmp_path):
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "torchgcc",
        "bench-latency",
        "--nproc",
        "3",
        "--settings",
        f"{N}x{K}",
        "--latency-model",
        "tail_change",
        "--latency-param",
        "shift=0.01",
        "--latency-param",
        "scale=0.02",
        "--latency-param",
        "scale_after=0.1",
        "--latency-param",
        "change_at=4",
        "--adaptive-wait",
        "--wait-deadline",
        str(DEADLINE),
        "--wait-stragglers",
        "1,3",
        "--steps",
        "8",
        "--seed",
        "2",
        "--out",
        str(out),
    ]
    done = subprocess.run(
        command, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr
    setting = json.loads((out / "results.json").read_text())["settings"][0]
    rows, report = setting["schemes"], setting["adaptive_wait"]
    assert set(rows) == {"uncoded", "gcc:S=1", "gcc:S=3", "gcc:adaptive"}
    assert len(report["S_by_step"]) == 8 and report["S_by_step"][0] == 3  # warm-up at the largest fixed S
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert report["S_by_step"] == [r["S"] for r in steps if r["scheme"] == "gcc:adaptive"]
    assert isinstance(report["detected_changes"], int) and report["change_at_step"] == 4
    fixed = [
        {"S": s, "p99": rows[f"gcc:S={s}"]["p99_latency_s"], "agreement": rows[f"gcc:S={s}"]["agreement"]}
        for s in (1, 3)
    ]
    adaptive = {"p99": rows["gcc:adaptive"]["p99_latency_s"], "agreement": rows["gcc:adaptive"]["agreement"]}
    assert report["verdict"] == compare_with_fixed(fixed, adaptive, DEADLINE)
    for name, row in rows.items():
        latency = torch.tensor([r["latency_s"] for r in steps if r["scheme"] == name], dtype=torch.float64)
        assert row["over_deadline"] == pytest.approx(float((latency > DEADLINE).double().mean()))
