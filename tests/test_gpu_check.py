"""``benchmarks/gpu_check.sh --dry-run``: every part of the GPU harness runs on the CPU (the Triton kernels in Triton's
interpreter, small shapes, the CUDA tests collected), so that a GPU run can only fail on the hardware."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_the_gpu_check_dry_run_passes_and_writes_its_report(tmp_path):
    pytest.importorskip("triton")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh", "--dry-run", str(tmp_path)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["dry_run"] and list(report["parts"]) == ["pytest_cuda", "kernels", "decode", "profile"]
    for name, part in report["parts"].items():
        assert part["exit_code"] == 0, (name, part["log_tail"])
    assert "tests collected" in report["parts"]["pytest_cuda"]["log_tail"]
    assert report["acceptance"]["kernels_all_within_tolerance"] is True
    assert {row["B"] for row in report["parts"]["decode"]["figures"]["rows"]} == {1, 8}
    assert report["parts"]["profile"]["figures"] is not None


@pytest.mark.parametrize("args, code", [(["--help"], 0), (["-h"], 0), (["--dry-run", "--bogus"], 2), (["a", "b"], 2)])
def test_the_gpu_check_answers_help_and_bad_arguments_with_its_usage_line(tmp_path, args, code):
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        ["bash", str(root / "benchmarks/gpu_check.sh"), *args], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == code
    assert (result.stdout if code == 0 else result.stderr).startswith(("usage: ", "gpu_check.sh: "))
    assert "usage: bash benchmarks/gpu_check.sh [--dry-run] [OUT_DIR]" in result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == []  # no directory made, nothing run
