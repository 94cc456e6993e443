"""A minimal local launcher: P processes of ``python -m torchgcc.distributed`` on this machine, time-bounded.

It sets the variables torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so
the job code is the same under both. Unlike torchrun it never tears the job down when one rank exits non-zero,
and it kills the whole process group when the time limit passes, so a bug cannot leave processes behind.
``torchgcc bench-latency`` and the tests use it; people use torchrun.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Sequence

__all__ = ["JobRun", "free_port", "launch"]


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


def launch(args: Sequence[str], *, nproc: int, timeout_s: float = 120.0) -> JobRun:
    """Run ``python -m torchgcc.distributed *args`` on ``nproc`` local processes and wait at most ``timeout_s``.

    Raises:
        TimeoutError: the job did not finish in time (every process was killed; the message holds their stderr).
    """
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="torchgcc-launch-") as folder:
        processes, logs = [], []
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
            )
            out = open(os.path.join(folder, f"{rank}.out"), "w+")
            err = open(os.path.join(folder, f"{rank}.err"), "w+")
            logs.append((out, err))
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "torchgcc.distributed", *args],
                    env=env,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            )
        try:
            for process in processes:
                process.wait(timeout=max(timeout_s, 0.0))
        except subprocess.TimeoutExpired:
            for process in processes:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
            raise TimeoutError(f"job {list(args)} did not finish in {timeout_s} s:\n{_read_stderr(logs)}") from None
        logs[0][0].seek(0)
        records = [json.loads(line) for line in logs[0][0] if line.startswith("{")]
        stderr = _read_stderr(logs)
        for out, err in logs:
            out.close()
            err.close()
    return JobRun(returncodes=[p.returncode for p in processes], records=records, stderr=stderr)


def _read_stderr(logs) -> str:
    parts = []
    for rank, (_, err) in enumerate(logs):
        err.seek(0)
        parts.append(f"--- rank {rank} ---\n{err.read()}")
    return "\n".join(parts)
