"""Fault injection on worker ranks: kill a rank, hang a rank, or slow down chosen coded workers."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Iterable

import torch

from torchgcc.checks import check_integer, check_real

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

    Raises:
        TypeError / ValueError: one line naming the field, for a rank that is not an integer >= 1, a step that is
            not an integer >= 0, an exit code outside 0..255, a slow worker that is not an integer >= 0, or a
            ``slow_delay_s`` that is not finite seconds >= 0.
    """

    kill_rank: int | None = None
    kill_step: int = 0
    kill_exit_code: int = 0
    hang_rank: int | None = None
    hang_step: int = 0
    slow_workers: tuple[int, ...] = field(default_factory=tuple)
    slow_delay_s: float = 5.0

    def __post_init__(self) -> None:
        """Reject a field no run can use (one line naming it): a NaN delay injected nothing, a negative rank or
        step silently never or always fired. Numpy numbers are kept as Python ones (the plan is pickled to ranks)."""
        checked: dict[str, object] = {}
        for name in ("kill_rank", "hang_rank"):
            rank = getattr(self, name)
            if rank is not None:
                checked[name] = check_integer(f"{name} (a worker rank; rank 0 is the coordinator)", rank, minimum=1)
        for name in ("kill_step", "hang_step"):
            checked[name] = check_integer(name, getattr(self, name), minimum=0)
        checked["kill_exit_code"] = check_integer("kill_exit_code", self.kill_exit_code, minimum=0, maximum=255)
        if isinstance(self.slow_workers, (str, bytes)) or not isinstance(self.slow_workers, Iterable):
            raise TypeError(f"slow_workers must be a sequence of coded worker indices, got {self.slow_workers!r}")
        checked["slow_workers"] = tuple(check_integer("slow_workers", w, minimum=0) for w in self.slow_workers)
        checked["slow_delay_s"] = check_real("slow_delay_s", self.slow_delay_s, low=0)
        for name, value in checked.items():
            object.__setattr__(self, name, value)  # frozen

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
