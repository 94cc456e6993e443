"""Real interference: a competing CPU-bound process pinned to chosen cores (not an injected sleep).

A :class:`CpuHog` runs one busy-loop process per core it is given, pinned there with ``os.sched_setaffinity``;
a worker pinned to the same core (``ProcessPool(cpus=...)``) then shares it with the hog and slows down by
however the kernel's scheduler splits the core. The benchmark starts and stops it; :meth:`CpuHog.stop` (also on
exit of the ``with`` block, Ctrl-C included) kills and reaps every hog process.
"""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["CpuHog"]

_BUSY_LOOP = "while True:\n    pass\n"


class CpuHog:
    """Busy loops on ``cores`` (one process each) while started.

    Args:
        cores: CPU core numbers (as ``os.sched_getaffinity`` lists them).
    """

    def __init__(self, cores: list[int]) -> None:
        available = os.sched_getaffinity(0)
        unknown = sorted(set(cores) - available)
        if not cores or unknown:
            raise ValueError(f"cores must be a non-empty subset of this process's cores {sorted(available)}")
        self.cores = list(cores)
        self.processes: list[subprocess.Popen] = []

    @property
    def running(self) -> bool:
        return bool(self.processes)

    def start(self) -> None:
        """Start one busy loop per core (a no-op when already running)."""
        if self.processes:
            return
        try:
            for core in self.cores:
                # a Ctrl-C at the terminal ends it too (KeyboardInterrupt; its traceback goes to /dev/null)
                process = subprocess.Popen(
                    [sys.executable, "-c", _BUSY_LOOP], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                self.processes.append(process)
                os.sched_setaffinity(process.pid, {core})
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Kill and reap every busy loop (idempotent)."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()  # SIGKILL
            process.wait()
        self.processes = []

    def __enter__(self) -> "CpuHog":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
