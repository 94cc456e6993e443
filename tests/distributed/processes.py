"""What the process tests ask of the operating system (Linux's /proc), in one place, and a model with a fault in one
worker process (importable by the workers)."""

import multiprocessing
from pathlib import Path

import torch


def alive(pid: int) -> bool:
    """Whether process ``pid`` is running: it exists and is not a zombie. A process that exits while its ``stat`` is
    read is gone too (the read then raises ``ProcessLookupError``)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


class WorkerFault(torch.nn.Module):
    """A linear model whose copy in worker process ``worker`` (a ProcessWorkers process, named
    ``torchgcc-worker-N``) returns ``None`` (``fault="none"``) or its first output column only (``"shape"``)."""

    def __init__(self, worker: int, fault: str) -> None:
        super().__init__()
        self.worker, self.fault = worker, fault
        self.linear = torch.nn.Linear(3, 2)

    def forward(self, x):
        y = self.linear(x)
        if multiprocessing.current_process().name != f"torchgcc-worker-{self.worker}":
            return y
        return None if self.fault == "none" else y[:, :1]
