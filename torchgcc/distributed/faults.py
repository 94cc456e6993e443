"""Fault injection on worker ranks: kill a rank, hang a rank, or slow down chosen coded workers."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field

import torch

__all__ = ["FaultPlan"]

logger = logging.getLogger("torchgcc.distributed")


@dataclass(frozen=True)
class FaultPlan:
    """Faults to inject, the same object on every rank (parsed from the same command line).

    Attributes:
        kill_rank, kill_step: rank ``kill_rank`` exits with ``os._exit(kill_exit_code)`` when it receives the work
            of step ``kill_step`` (or a later one): a crash, no clean-up, no result.
        kill_exit_code: 0 by default, because torchrun tears the whole job down when a rank exits non-zero (its
            own policy, not ours); pass 1 to watch that happen.
        hang_rank, hang_step: rank ``hang_rank`` blocks forever from step ``hang_step`` on (its heartbeat thread
            keeps running, like a process stuck in a kernel); it is a straggler at every later step.
        slow_workers, slow_delay_s: coded workers that answer ``slow_delay_s`` seconds late at every step, on top
            of any latency model (added to the delays the coordinator sends, so the run stays reproducible).
    """

    kill_rank: int | None = None
    kill_step: int = 0
    kill_exit_code: int = 0
    hang_rank: int | None = None
    hang_step: int = 0
    slow_workers: tuple[int, ...] = field(default_factory=tuple)
    slow_delay_s: float = 5.0

    def __post_init__(self) -> None:
        if self.kill_rank == 0 or self.hang_rank == 0:
            raise ValueError("faults are injected on worker ranks (>= 1); rank 0 is the coordinator")

    def extra_delays(self, num_workers: int) -> torch.Tensor:
        """``(N,)`` float64 seconds added to every step's injected delays."""
        extra = torch.zeros(num_workers, dtype=torch.float64)
        for worker in self.slow_workers:
            if not 0 <= worker < num_workers:
                raise ValueError(f"slow worker {worker} is not in 0..{num_workers - 1}")
            extra[worker] = self.slow_delay_s
        return extra

    def strike(self, rank: int, step: int) -> None:
        """Called by a worker rank when it receives the work of ``step``; kills or hangs it if planned."""
        if rank == self.kill_rank and step >= self.kill_step:
            logger.warning("injected fault: killing rank %d at step %d", rank, step)
            os._exit(self.kill_exit_code)
        if rank == self.hang_rank and step >= self.hang_step:
            logger.warning("injected fault: rank %d hangs from step %d", rank, step)
            threading.Event().wait()
