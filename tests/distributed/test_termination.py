"""Stopping a job from outside: SIGTERM or SIGINT of the local launcher or of torchrun ends every rank and leaves
no temp folder, and so does a SIGKILL of the local launcher (within 5 s); the summary still comes (valid JSON,
completed steps); worker ranks whose coordinator is killed exit non-zero; a SIGKILL of torchrun's agent leaves one
line per rank (no C++ stack trace) and non-zero statuses."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import alive

from torchgcc.distributed.heartbeat import EXIT_COORDINATOR_LOST

pytestmark = pytest.mark.distributed

#: prctl option: this process adopts its orphaned descendants (linux/prctl.h).
_PR_SET_CHILD_SUBREAPER = 36

#: a long job (about 30 s of steps), so that a signal always finds it running
LONG = ["-N", "4", "-K", "2", "-S", "1", "--steps", "300", "--mode", "injected", "--latency-param", "shift=0.1"]


def _strict_json(line: str) -> dict:
    """``json.loads`` that refuses NaN and Infinity (not JSON)."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not valid JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signalling_the_local_launcher_ends_every_rank_and_leaves_nothing_in_tmpdir(tmp_path, signum):
    command = [sys.executable, "-m", "torchgcc.distributed.launch", "--nproc", "3", "--", *LONG]
    env = dict(os.environ, TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    launcher = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=None,
    )
    try:
        pids = [int(launcher.stderr.readline().split()[-1]) for _ in range(3)]  # "rank r pid X"
        while launcher.stdout.readline().startswith('{"event"'):  # the start record; then a first step
            pass
        assert all(alive(pid) for pid in pids)
        launcher.send_signal(signum)
        _, err = launcher.communicate(timeout=30)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == (143 if signum == signal.SIGTERM else 130), err
    assert "interrupted" in err
    assert not any(alive(pid) for pid in pids)
    assert [p.name for p in tmp_path.iterdir()] == []  # no folder, socket or file of the launch


def test_killing_the_local_launcher_ends_every_rank_within_5_s_and_leaves_no_file(tmp_path):
    """SIGKILL of the launcher (no clean-up of its own can run): the kernel ends the ranks, nothing stays in TMPDIR."""
    command = [sys.executable, "-m", "torchgcc.distributed.launch", "--nproc", "3", "--", *LONG]
    env = dict(os.environ, TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    launcher = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    pids: list[int] = []
    try:
        pids = [int(launcher.stderr.readline().split()[-1]) for _ in range(3)]  # "rank r pid X"
        while not launcher.stdout.readline().startswith('{"step": 1'):
            pass
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 5
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        survivors = [pid for pid in pids if alive(pid)]
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    assert survivors == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_stopping_torchrun_ends_every_rank_and_still_writes_the_summary(tmp_path, how):
    """Ctrl-C (SIGINT to the whole foreground group: torchrun and every rank) or SIGTERM to torchrun alone: the
    coordinator writes an error and a valid summary counting the steps it completed, each rank says at most one
    line (no KeyboardInterrupt traceback), nothing is left running, and no torchelastic folder is left."""
    command = [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3"),
        *("--log-dir", str(tmp_path / "logs"), "-m", "torchgcc.distributed", *LONG),
    ]
    env = dict(os.environ, TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    agent = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        lines = []
        while not any(line.startswith('{"step": 2') for line in lines):
            lines.append(agent.stdout.readline())
        if how == "ctrl-c":
            os.killpg(agent.pid, signal.SIGINT)
        else:
            agent.send_signal(signal.SIGTERM)
        out, err = agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
    records = [_strict_json(line) for line in [*lines, *out.splitlines()] if line.startswith("{")]
    summary = records[-1]
    steps = [r for r in records if "step" in r]
    assert summary.get("event") == "summary", err[-3000:]
    assert summary["status"] == (130 if how == "ctrl-c" else 143)
    assert summary["steps"] == len(steps) and summary["steps_requested"] == 300
    assert [r for r in records if r.get("event") == "error"], records[-3:]
    assert "KeyboardInterrupt" not in err
    assert len([line for line in err.splitlines() if line.startswith("[torchgcc]")]) <= 3, err[-3000:]
    assert subprocess.run(["pgrep", "-s", str(agent.pid)], capture_output=True).stdout == b""
    assert not [p.name for p in tmp_path.iterdir() if p.name != "logs"]


def test_killing_the_torchrun_agent_leaves_one_line_per_rank_no_cpp_frames_and_non_zero_exits():
    """SIGKILL of torchrun's agent takes the rendezvous store with it. Each rank stops within 5 s, non-zero (this test
    process adopts the orphaned ranks as a child subreaper to read their statuses), and says one line: the entry
    point sets TORCH_CPP_LOG_LEVEL=ERROR before torch is imported, so none of c10's warnings of the failed store
    calls, with their C++ stack traces, reaches stderr (rank 0 may name the lost ranks before its error line)."""
    command = [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3"),
        *("-m", "torchgcc.distributed", *LONG),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("TORCH_CPP_LOG_LEVEL", None)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, os.strerror(ctypes.get_errno())
    ranks: dict[int, int] = {}  # rank -> pid
    try:
        agent = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        lines = [agent.stdout.readline()]
        while lines[-1] and not lines[-1].startswith('{"step": 2'):
            lines.append(agent.stdout.readline())
        for pid in subprocess.run(["pgrep", "-P", str(agent.pid)], capture_output=True, text=True).stdout.split():
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            ranks[int(next(v for v in environ if v.startswith(b"RANK="))[5:])] = int(pid)
        agent.kill()
        killed = time.monotonic()
        out, err = agent.communicate(timeout=60)  # EOF once every rank has closed the pipes: has exited
        seconds = time.monotonic() - killed
        statuses = {rank: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for rank, pid in ranks.items()}
    finally:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        for pid in ranks.values():
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    assert sorted(ranks) == [0, 1, 2], lines
    assert not re.search(r"frame #|c10::|c10d|Exception raised from|\.cpp:", err), err[-3000:]
    said = err.splitlines()
    # Each worker rank says its one line. Rank 0 says one error line, after a line per lost rank when it saw its
    # workers go before its own store read failed (a race between the two; either order is a correct report).
    workers_said = sorted(line for line in said if line.startswith("[torchgcc] rank "))
    assert [line.split(":")[0] for line in workers_said] == ["[torchgcc] rank 1", "[torchgcc] rank 2"], err
    coordinator_said = [line for line in said if not line.startswith("[torchgcc] rank ")]
    assert coordinator_said[-1].startswith("[torchgcc] error: "), err
    lost = re.compile(r"\[torchgcc\] step \d+: lost rank\(s\) \[(1|2|1, 2)\] .*")
    assert all(lost.fullmatch(line) for line in coordinator_said[:-1]), err
    assert len(coordinator_said) <= 3, err
    summary = _strict_json(out.splitlines()[-1])
    assert summary["event"] == "summary" and summary["status"] == statuses[0] != 0, out[-3000:]
    assert statuses[1] == statuses[2] == EXIT_COORDINATOR_LOST
    assert seconds < 5, seconds


def test_worker_ranks_exit_non_zero_with_one_line_each_when_their_coordinator_is_killed(tmp_path):
    """The store dies with rank 0: each worker rank says so in one line and exits 1, no C++ stack trace of the
    TCPStore's failed reads reaches stderr, and the launcher ends with the ranks' statuses and 128 + 9."""
    command = [sys.executable, "-m", "torchgcc.distributed.launch", "--nproc", "3", "--", *LONG]
    env = dict(os.environ, TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    env.pop("TORCH_CPP_LOG_LEVEL", None)
    launcher = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        pids = [int(launcher.stderr.readline().split()[-1]) for _ in range(3)]  # "rank r pid X"
        while not launcher.stdout.readline().startswith('{"step": 1'):
            pass
        os.kill(pids[0], signal.SIGKILL)
        _, err = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 128 + signal.SIGKILL, err
    said = [line for line in err.splitlines() if line and not line.startswith("--- rank")]
    assert said[-1] == f"exit codes by rank: {[-signal.SIGKILL, EXIT_COORDINATOR_LOST, EXIT_COORDINATOR_LOST]}"
    assert len(said) == 3, err  # one line per worker rank, nothing else
    assert all(line.startswith(f"[torchgcc] rank {r}: the coordinator is gone") for r, line in zip((1, 2), said))
    assert not any(alive(pid) for pid in pids)
    assert list(tmp_path.iterdir()) == []


def _sigterm_and_wait(driver: subprocess.Popen, pids: list[int]) -> tuple[str, str]:
    """SIGTERM ``driver``; its stdout and stderr once it has ended, after up to 5 s more for ``pids`` (Ray's
    processes) to go."""
    driver.send_signal(signal.SIGTERM)
    out, err = driver.communicate(timeout=60)
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return out, err


def test_sigterm_of_the_ray_driver_ends_with_the_error_line_the_summary_and_143(tmp_path):
    """Ray installs its own SIGTERM handlers (one aborts the process: status 134, no record); the job's handler
    comes back after ``ray.init``: the error record and the summary, status 143, and Ray's processes and its temp
    folder gone within 5 s."""
    pytest.importorskip("ray")
    psutil = pytest.importorskip("psutil")
    command = [sys.executable, "-m", "torchgcc.distributed", "--engine", "ray", *LONG]
    env = dict(os.environ, TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    driver = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        lines = [driver.stdout.readline()]
        while lines[-1] and not lines[-1].startswith('{"step": 1'):
            lines.append(driver.stdout.readline())
        ray_pids = [p.pid for p in psutil.Process(driver.pid).children(recursive=True)]  # GCS, raylet, actors
        folders = {f for pid in ray_pids for f in re.findall(r"/tmp/torchgcc-ray-\w+", " ".join(_cmdline(pid)))}
        out, err = _sigterm_and_wait(driver, ray_pids)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    records = [_strict_json(line) for line in [*lines, *out.splitlines()] if line.startswith("{")]
    assert driver.returncode == 143, err[-3000:]
    assert records[-2] == {"event": "error", "error": "Terminated: terminated (SIGTERM)"}
    summary = records[-1]
    assert summary["event"] == "summary" and summary["status"] == 143
    assert summary["steps"] == len([r for r in records if "step" in r]) >= 2
    assert [line for line in err.splitlines() if "torchgcc" in line] == [
        "[torchgcc] error: Terminated: terminated (SIGTERM)"
    ]
    assert not re.search(r"Traceback|SIGTERM received|frame #|Exception raised from|C\+\+", err), err[-3000:]
    assert [pid for pid in ray_pids if alive(pid)] == []
    assert len(folders) == 1 and not any(Path(folder).exists() for folder in folders)
    assert list(tmp_path.iterdir()) == []


def test_sigterm_while_ray_starts_is_the_error_line_and_143():
    """A SIGTERM once ``ray.init`` has started its first process (the GCS server) meets Ray's own Python handlers
    (``sys.exit(15)``, or ``sys.exit(1)`` once its node is up: status 15 or 1 and not a word): the job's one error
    line instead, status 143, and Ray's processes and its temp folder gone within 5 s."""
    pytest.importorskip("ray")
    psutil = pytest.importorskip("psutil")
    command = [sys.executable, "-m", "torchgcc.distributed", "--engine", "ray", *LONG]
    driver = subprocess.Popen(
        command,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        ray_pids: list[int] = []
        while not any("gcs_server" in " ".join(_cmdline(pid)) for pid in ray_pids) and driver.poll() is None:
            time.sleep(0.01)  # (an import's `ldconfig -p`, before the job's handler, is a child too)
            ray_pids = [p.pid for p in psutil.Process(driver.pid).children(recursive=True)]
        folders = {f for pid in ray_pids for f in re.findall(r"/tmp/torchgcc-ray-\w+", " ".join(_cmdline(pid)))}
        out, err = _sigterm_and_wait(driver, ray_pids)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert driver.returncode == 143, err[-3000:]
    error = "Terminated: terminated (SIGTERM) (before the first step)"
    assert [_strict_json(line) for line in out.splitlines()] == [{"event": "error", "error": error}]
    assert [line for line in err.splitlines() if "torchgcc" in line] == [f"[torchgcc] error: {error}"], err[-3000:]
    assert not re.search(r"Traceback|SIGTERM received|frame #|Exception raised from|C\+\+", err), err[-3000:]
    assert [pid for pid in ray_pids if alive(pid)] == []
    assert len(folders) == 1 and not any(Path(folder).exists() for folder in folders)


def test_the_processes_of_a_cut_short_ray_start_are_stopped_before_its_folder_is_removed(tmp_path):
    """What ``local_ray`` does after ``ray.shutdown``: every process naming the folder gets SIGTERM, one that ignores
    it SIGKILL after the timeout, each is waited for; a process that names another folder is left alone."""
    from torchgcc.distributed.ray_workers import _stop_processes_naming

    folder = str(tmp_path / "torchgcc-ray-cut")
    sleep = "import signal, sys, time; {}; print('ready', flush=True); time.sleep(60)"
    commands = {
        "polite": [sys.executable, "-c", sleep.format("pass"), folder],
        "stubborn": [sys.executable, "-c", sleep.format("signal.signal(signal.SIGTERM, signal.SIG_IGN)"), folder],
        "bystander": [sys.executable, "-c", sleep.format("pass"), str(tmp_path / "another-folder")],
    }
    processes = {
        name: subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for name, command in commands.items()
    }
    try:
        for process in processes.values():
            assert process.stdout.readline() == "ready\n"  # its handler is in place
        start = time.monotonic()
        _stop_processes_naming(folder, timeout_s=1.0)
        elapsed = time.monotonic() - start
        assert not alive(processes["polite"].pid) and not alive(processes["stubborn"].pid)
        assert alive(processes["bystander"].pid)
        assert 1.0 <= elapsed < 30  # the stubborn one outlived SIGTERM's timeout
    finally:
        for process in processes.values():
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()
            process.stdout.close()


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []
