"""The adaptive-wait study on a few steps: rows, pairing and the verdict."""

from __future__ import annotations

from dataclasses import replace

from torchgcc.app.experiments import adaptive_wait_study


def test_adaptive_wait_rows_are_paired_and_the_verdict_picks_the_most_accurate_feasible_s():
    tiny = replace(
        adaptive_wait_study.DEFAULT,
        stragglers=(0, 4, 8, 12),
        steps=40,
        calibration_samples=64,
        calibration_repeats=1,
        warmup=4,
    )
    result = adaptive_wait_study.run(tiny, progress=False)
    records, config, verdict = result.records, result.config, result.extra["verdict"]
    assert [r["scheme"] for r in records] == ["fixed S=0", "fixed S=4", "fixed S=8", "fixed S=12", "adaptive"]
    fixed = records[:-1]
    # the same latencies every step: waiting for fewer results is never slower
    assert all(a["p50"] >= b["p50"] and a["p99"] >= b["p99"] for a, b in zip(fixed, fixed[1:]))
    assert len(verdict["adaptive_S_by_step"]) == 40 and set(verdict["adaptive_S_by_step"]) <= {0, 4, 8, 12}
    # waiting for N - 12 = 12 of 24 shifted-exponential latencies (shift 1 s, mean tail <= 0.4 s) stays far under
    # the 1.6 s deadline, so a reference exists
    meeting = [r for r in fixed if r["p99"] <= tiny.deadline]
    assert fixed[-1] in meeting
    assert verdict["reference_agreement"] == max(r["agreement"] for r in meeting)
    assert set(config["calibration_agreement"]) == {0, 4, 8, 12}
