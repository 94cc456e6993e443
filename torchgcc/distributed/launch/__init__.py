"""A minimal local launcher: P processes of ``python -m torchgcc.distributed`` (or any program) on this machine,
time-bounded.

Its command line is ``python -m torchgcc.distributed.launch`` (:mod:`torchgcc.app.commands.launch`).

It sets the variables torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so
the job code is the same under both, and TORCH_CPP_LOG_LEVEL=ERROR unless it is set (c10's warnings come with C++
stack traces: one per failed store call of every rank whose coordinator died). Unlike torchrun it never tears the
job down when a worker rank fails (that is the point of coded execution), and it ends the job when the coordinator
(rank 0) has exited: ranks still running ``grace_s`` later (a stopped or hung process) are killed, as is everything
when the time limit passes or the launcher is interrupted. On Linux the ranks also end (SIGKILL, from the kernel)
when the launcher itself is killed, and their output goes to unnamed temporary files, so a killed launcher leaves
neither processes nor files behind.
``torchgcc bench-latency`` and the tests use it, and so can people who want to kill ranks by hand::

    python -m torchgcc.distributed.launch --nproc 5 -- -N 8 -K 4 --steps 100 --mode measured
    # prints "rank r pid X" on stderr; then e.g. kill -KILL <pid of rank 2>; kill -STOP <pid of rank 3>
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Sequence

__all__ = ["JobRun", "free_port", "launch"]

#: prctl option: the signal a process gets when its parent ends (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


@dataclass
class JobRun:
    """What a launched job left behind.

    Attributes:
        returncodes: exit status per rank.
        records: the JSON lines rank 0 printed, parsed.
        stderr: every rank's standard error, concatenated with ``--- rank r ---`` headers.
    """

    returncodes: list[int]
    records: list[dict]
    stderr: str

    def of(self, event: str) -> list[dict]:
        """Records whose ``event`` field is ``event`` (``"start"``, ``"summary"``, ``"error"``)."""
        return [r for r in self.records if r.get("event") == event]

    @property
    def steps(self) -> list[dict]:
        """The per-step records."""
        return [r for r in self.records if "step" in r]


def free_port() -> int:
    """A TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(
    args: Sequence[str],
    *,
    nproc: int,
    timeout_s: float = 120.0,
    on_record: Callable[[dict], None] | None = None,
    on_start: Callable[[list[int]], None] | None = None,
    grace_s: float = 5.0,
    program: Sequence[str] = ("-m", "torchgcc.distributed"),
) -> JobRun:
    """Run ``python *program *args`` (default: the job ``python -m torchgcc.distributed *args``) on ``nproc`` local
    processes and wait at most ``timeout_s``.

    ``on_record`` is called with every JSON line of rank 0 as it appears (for progress bars), ``on_start`` with
    the process ids by rank. Once rank 0 has exited, ranks still running after ``grace_s`` are killed (their
    return code is then -9). Whatever ends the
    wait (the job, the time limit, Ctrl-C, an exception), every process of the job that still runs is killed with
    its whole process group before this returns or raises. The ranks' output goes to unnamed temporary files,
    freed with the last process that holds them.

    Raises:
        TimeoutError: the job did not finish in time (the message holds every rank's stderr).
    """
    port = free_port()
    processes: list[subprocess.Popen] = []
    logs = []
    ends_with_launcher = _ends_with_this_process()
    try:
        for rank in range(nproc):
            env = dict(
                os.environ,
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(nproc),
                LOCAL_WORLD_SIZE=str(nproc),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                TORCHELASTIC_USE_AGENT_STORE="False",
                # c10's warnings carry C++ stack traces: a rank whose coordinator died would print one per failed
                # store call; its own one-line error is what it has to say
                TORCH_CPP_LOG_LEVEL=os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR"),
            )
            # unnamed files: the kernel frees them with the last process holding them, even after a SIGKILL
            out = tempfile.TemporaryFile("w+", prefix="torchgcc-launch-")
            err = tempfile.TemporaryFile("w+", prefix="torchgcc-launch-")
            logs.append((out, err))
            processes.append(
                subprocess.Popen(
                    [sys.executable, *program, *args],
                    env=env,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    preexec_fn=ends_with_launcher,
                )
            )
        if on_start is not None:
            on_start([p.pid for p in processes])
        records = _wait(processes, logs[0][0].fileno(), timeout_s, on_record, grace_s)
        if records is None:
            raise TimeoutError(f"job {list(args)} did not finish in {timeout_s} s:\n{_read_stderr(logs)}")
        stderr = _read_stderr(logs)
    finally:
        _kill(processes)
        for out, err in logs:
            out.close()
            err.close()
    return JobRun(returncodes=[p.returncode for p in processes], records=records, stderr=stderr)


def _wait(
    processes: list[subprocess.Popen],
    rank0_out: int,
    timeout_s: float,
    on_record: Callable[[dict], None] | None,
    grace_s: float,
) -> list[dict] | None:
    """Wait for every process, feeding rank 0's JSON lines (read from the file descriptor ``rank0_out`` without
    moving its offset, which rank 0 writes at) to ``on_record``; the records, or None on timeout.

    Ranks still running ``grace_s`` after rank 0 exited are killed."""
    deadline = time.monotonic() + max(timeout_s, 0.0)
    coordinator_exited: float | None = None
    records: list[dict] = []
    position = 0
    while True:
        done = all(p.poll() is not None for p in processes)
        available = os.fstat(rank0_out).st_size - position
        complete, newline, _ = os.pread(rank0_out, available, position).rpartition(b"\n")  # a partial line: next time
        position += len(complete) + len(newline)
        for line in complete.split(b"\n") if newline else []:
            if line.startswith(b"{"):
                records.append(json.loads(line))
                if on_record is not None:
                    on_record(records[-1])
        if done:
            return records
        now = time.monotonic()
        if now > deadline:
            return None
        if processes[0].poll() is not None:
            coordinator_exited = coordinator_exited or now
            if now - coordinator_exited > grace_s:
                _kill(processes)
        time.sleep(0.05)


def _ends_with_this_process() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel SIGKILL the child when this process ends, however it ends (Linux's
    ``PR_SET_PDEATHSIG``; None elsewhere). The signal follows the thread that started the child: ``launch`` waits
    in that thread until the job is over."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child must not load libraries between fork and exec
    parent = os.getpid()

    def arm() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # this process already ended before the child armed the signal
            os._exit(1)

    return arm


def _kill(processes: list[subprocess.Popen]) -> None:
    """SIGKILL the process group of every process still running, and reap it."""
    for process in processes:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


def _read_stderr(logs) -> str:
    parts = []
    for rank, (_, err) in enumerate(logs):
        err.seek(0)
        parts.append(f"--- rank {rank} ---\n{err.read()}")
    return "\n".join(parts)
