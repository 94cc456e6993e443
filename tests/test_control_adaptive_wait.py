"""The adaptive-wait study on a few steps: rows, pairing and the verdict."""

from __future__ import annotations

from dataclasses import replace

from torchgcc.app.experiments.adaptive_wait_study import ADAPTIVE_WAIT, run_adaptive_wait


def test_adaptive_wait_rows_are_paired_and_the_verdict_picks_the_most_accurate_feasible_s():
    tiny = replace(
        ADAPTIVE_WAIT, stragglers=(0, 4, 8, 12), steps=40, calibration_samples=64, calibration_repeats=1, warmup=4
    )
    records, config, verdict = run_adaptive_wait(tiny, progress=False)
    assert [r["scheme"] for r in records] == ["fixed S=0", "fixed S=4", "fixed S=8", "fixed S=12", "adaptive"]
    fixed = records[:-1]
    # the same latencies every step: waiting for fewer results is never slower
    assert all(a["p50"] >= b["p50"] and a["p99"] >= b["p99"] for a, b in zip(fixed, fixed[1:]))
    assert len(verdict["adaptive_S_by_step"]) == 40 and set(verdict["adaptive_S_by_step"]) <= {0, 4, 8, 12}
    meeting = [r for r in fixed if r["p99"] <= tiny.deadline]
    if meeting:
        assert verdict["reference_agreement"] == max(r["agreement"] for r in meeting)
    assert set(config["calibration_agreement"]) == {0, 4, 8, 12}
