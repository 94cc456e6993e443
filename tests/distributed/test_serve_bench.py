"""``torchgcc serve-bench`` end to end on real worker processes (small sizes), and stopped by Ctrl-C with either
engine: no process (Ray's included) and no temp folder is left, nothing is written."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from processes import alive

from torchgcc.app.cli import main

pytestmark = pytest.mark.distributed

SMALL = ["--queries", "24", "--rates", "100,1000", "--trials", "2", "--no-progress", "--threads", "1"]


def _strict(text: str) -> dict:
    def refuse(constant: str) -> None:
        raise ValueError(f"not valid JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_serve_bench_writes_every_rate_and_scheme_with_latency_quantiles_and_both_accuracies(tmp_path, capsys):
    schemes = "uncoded,replication,hedged,gcc:S=2"
    assert main(["serve-bench", *SMALL, "--schemes", schemes, "--out", str(tmp_path)]) == 0
    assert f"wrote {tmp_path}" in capsys.readouterr().out
    result = _strict((tmp_path / "results.json").read_text())
    records = result["records"]
    assert [(r["rate_qps"], r["scheme"]) for r in records] == [(r, s) for r in (100, 1000) for s in schemes.split(",")]
    for record in records:
        assert record["trials"] == 2 and record["median_s"] <= record["p99_s"] <= record["p999_s"]
        assert 0 <= record["accuracy"] <= 1 and 0 <= record["agreement"] <= 1 and record["missing"] == 0
    exact = [r for r in records if r["scheme"] != "gcc:S=2"]  # the baselines agree with the base model everywhere
    assert len(exact) == 6 and all(r["agreement"] == 1.0 for r in exact)
    assert [r["accuracy"] for r in exact] == pytest.approx([r["base_accuracy"] for r in exact])
    tasks = {r["scheme"]: r["tasks_per_batch"] for r in records if r["rate_qps"] == 100}
    assert tasks["gcc:S=2"] == 8  # the same N = 8 workers for all; a code sends all N coded inputs
    assert 1 <= tasks["uncoded"] <= 8 and 1 <= tasks["replication"] <= 8  # not the shares of padding rows
    assert tasks["hedged"] >= tasks["uncoded"]
    assert len(result["runs"]) == 16 and result["config"]["real_execution"] is True
    assert len(result["config"]["loadavg_before"]) == 3
    for name in ("results.csv", "table.md", "latency_vs_load.png", "frontier.png"):
        assert (tmp_path / name).stat().st_size > 0


def _session(sid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-s", str(sid)], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


def _worker_processes(sid: int) -> list[int]:
    """The children of session ``sid``'s processes outside it: ProcessWorkers' workers, forked by the forkserver
    into sessions of their own (a Ctrl-C at the terminal reaches only the coordinator)."""
    session = _session(sid)
    found = subprocess.run(["pgrep", "-P", ",".join(map(str, session))], capture_output=True, text=True).stdout
    return [int(pid) for pid in found.split() if int(pid) not in session]


def _ray_processes(folder_prefix: str) -> list[int]:
    """Processes whose command line names one of our Ray temp folders (Ray starts its own sessions)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and folder_prefix in (entry / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


@pytest.fixture
def short_tmpdir():
    """A folder for TMPDIR short enough for the forkserver's socket, which lives under it: an AF_UNIX path holds at
    most 107 bytes, and pytest's tmp_path under pytest-xdist (.../popen-gw0/<test name>/...) leaves too few."""
    folder = Path(tempfile.mkdtemp(prefix="tg-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("engine", ["processes", "ray"])
def test_ctrl_c_of_serve_bench_leaves_no_process_and_no_temp_folder(tmp_path, short_tmpdir, engine):
    if engine == "ray":
        pytest.importorskip("ray")
    before = {p.name for p in Path("/tmp").glob("torchgcc-ray-*")}
    out = tmp_path / "out"
    command = [sys.executable, "-m", "torchgcc", "serve-bench", "--engine", engine, "-N", "4", "-K", "2"]
    command += ["--queries", "4000", "--rates", "50", "--trials", "1", "--no-progress", "--out", str(out)]
    env = dict(os.environ, TMPDIR=str(short_tmpdir), OMP_NUM_THREADS="1")
    bench = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the 4 workers run
            if engine == "processes":
                workers = _worker_processes(bench.pid)
            else:  # its actors (Ray's processes stay in the driver's session; another Ray run's do not)
                workers = [pid for pid in _ray_processes("ray::_ModelWorker") if pid in _session(bench.pid)]
            if len(workers) >= 4:
                break
            time.sleep(0.2)
        assert len(workers) == 4, workers
        time.sleep(1.0)  # serving
        session = set(_session(bench.pid))
        new = [p.name for p in Path("/tmp").glob("torchgcc-ray-*") if p.name not in before]
        started = [name for name in new if session & set(_ray_processes(name))]  # not another Ray run's folder
        os.killpg(bench.pid, signal.SIGINT)  # Ctrl-C: SIGINT to the whole foreground group
        output, _ = bench.communicate(timeout=60)
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
    assert bench.returncode == 130, output[-3000:]
    assert "interrupted" in output
    deadline = time.monotonic() + 10  # the forkserver and resource tracker exit once serve-bench has
    while (_session(bench.pid) or [pid for pid in workers if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _session(bench.pid) == [] and [pid for pid in workers if alive(pid)] == []
    assert not out.exists()
    # no pymp-* (forkserver) folder; torchinductor_* is torch's own cache, made when the classifier is trained
    assert [p.name for p in short_tmpdir.iterdir() if not p.name.startswith("torchinductor_")] == []
    assert len(started) == {"processes": 0, "ray": 1}[engine]  # the run's own Ray folder existed (Ray only) ...
    assert [name for name in started if (Path("/tmp") / name).exists()] == []  # ... and is gone
    assert [pid for name in started for pid in _ray_processes(name)] == []
