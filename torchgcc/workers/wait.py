"""When a round stops waiting for results: the one rule every engine and the serving loop share.

A round sends a batch's N coded inputs to N workers; results come back in some order. :class:`WaitPolicy` decides,
from which workers' results arrived and which are still pending, whether to decode now. It asks the code which
masks it can decode (:meth:`torchgcc.Code.decodable`), so it works for every code (GCC, BACC, LCC, replication,
uncoded) without knowing which one it is.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from torchgcc.checks import check_integer, check_real

__all__ = ["WaitPolicy"]


class WaitPolicy:
    """The rule that ends a round's wait.

    The wait ends as soon as the code can decode every group from the results that arrived (``code.decodable``)
    and, on top of that,

    - ``num_stragglers=S``: at least ``N - S`` results arrived (the fastest ``N - S``; never more than can still
      arrive, so lost workers are not waited for); ``num_stragglers=None``: nothing more (the fewest results the
      code decodes from);
    - ``adaptive``: S is chosen before every round by a
      :class:`~torchgcc.control.wait_count.WaitCountController` (``choose()``), which then observes the round's
      arrival times (``observe(arrival_s, num_stragglers=, watched_until=)``), recorded until ``watch_s`` seconds
      after the start so that it learns which workers were late;
    - a ``required`` ``(B, N)`` mask (the simulated stragglers of a round): every worker it names arrived; the
      decode then uses ``required`` & arrived (a group that became undecodable because a required worker never
      came, though ``required`` itself decodes, uses every arrived result instead).

    Once ``deadline_s`` seconds passed since the start (or nothing more can arrive), the wait also ends when every
    group has the ``min_arrived`` results the decoder accepts (a partial decode: replication's inputs without an
    arrived copy are NaN). A round that still cannot decode ``timeout_s`` seconds after its start fails.

    Args:
        num_stragglers: S (an integer >= 0), or None (see above).
        deadline_s: seconds (finite, >= 0) after which a round decodes from what arrived; None: no deadline.
        timeout_s: seconds (> 0; ``inf``: never) after which a round that cannot decode fails.
        adaptive: a wait-count controller choosing S per round (then ``num_stragglers`` is unused).
        watch_s: seconds (finite, >= 0) after the start up to which late arrivals are recorded (after the decode's
            results are in; adaptive rounds); None: not watched.
    """

    def __init__(
        self,
        num_stragglers: Optional[int] = 0,
        *,
        deadline_s: Optional[float] = None,
        timeout_s: float = 30.0,
        adaptive: Any = None,
        watch_s: Optional[float] = None,
    ) -> None:
        if num_stragglers is not None:
            num_stragglers = check_integer("num_stragglers", num_stragglers, minimum=0)
        if deadline_s is not None:
            deadline_s = check_real("deadline_s", deadline_s, low=0)
        if watch_s is not None:
            watch_s = check_real("watch_s", watch_s, low=0)
        if not (isinstance(timeout_s, (int, float)) and timeout_s == math.inf):  # inf: never fail
            timeout_s = check_real("timeout_s", timeout_s, low=0, low_open=True)
        if adaptive is not None and not (hasattr(adaptive, "choose") and hasattr(adaptive, "observe")):
            raise TypeError(
                "adaptive must be a wait-count controller with choose() and observe() "
                f"(torchgcc.control.wait_count.WaitCountController), got {type(adaptive).__name__}"
            )
        self.num_stragglers = num_stragglers
        self.deadline_s = deadline_s
        self.timeout_s = timeout_s
        self.adaptive = adaptive
        self.watch_s = watch_s

    def stragglers(self) -> Optional[int]:
        """S for the next round: the controller's choice (adaptive), else ``num_stragglers``."""
        return self.adaptive.choose() if self.adaptive is not None else self.num_stragglers

    def observe(self, arrival_s: torch.Tensor, num_stragglers: Optional[int], watched_s: float) -> None:
        """Tell an adaptive controller the ``(N,)`` arrival seconds of a round run with ``num_stragglers``
        (``inf``: not seen by ``watched_s``); nothing to do otherwise."""
        if self.adaptive is not None:
            self.adaptive.observe(arrival_s, num_stragglers=num_stragglers, watched_until=watched_s)

    def usable(
        self, code: Any, arrived: torch.Tensor, required: Optional[torch.Tensor], num_groups: int
    ) -> torch.Tensor:
        """``(B, N)`` bool: the results a decode uses, given the ``(N,)`` workers whose results ``arrived``."""
        mask = arrived.expand(num_groups, -1)
        if required is None:
            return mask.clone()
        used = required & mask
        short = code.decodable(required) & ~code.decodable(used)
        return torch.where(short.unsqueeze(-1), mask, used)

    def deadline_at(self, started_s: float) -> float:
        """The clock time at which a round started at ``started_s`` reaches its deadline (``inf``: none)."""
        return math.inf if self.deadline_s is None else started_s + self.deadline_s

    def timeout_at(self, started_s: float) -> float:
        """The clock time at which a round started at ``started_s`` fails if it cannot decode."""
        return started_s + self.timeout_s

    def is_over(
        self,
        code: Any,
        arrived: torch.Tensor,
        pending: torch.Tensor,
        *,
        started_s: float,
        now_s: float,
        num_stragglers: Optional[int],
        required: Optional[torch.Tensor] = None,
        num_groups: int = 1,
    ) -> bool:
        """Whether to decode now.

        Args:
            code: the code (``decodable(mask)``, ``min_arrived``).
            arrived: ``(N,)`` bool, the workers whose results are in.
            pending: ``(N,)`` bool, the workers whose results may still come (live, not arrived).
            started_s, now_s: the clock when the round started, and now (the deadline is reached at
                :meth:`deadline_at`, the time a caller's timer wakes it up at).
            num_stragglers: the round's S (:meth:`stragglers`).
            required: ``(B, N)`` bool or None (see the class).
            num_groups: B.
        """
        if not bool(arrived.any()):
            return False
        usable = self.usable(code, arrived, required, num_groups)
        if required is not None:
            rule_met = not bool((required.any(0) & pending).any())
        elif num_stragglers is None:
            rule_met = True
        else:
            count, possible = int(arrived.sum()), int((arrived | pending).sum())
            rule_met = count >= min(arrived.numel() - num_stragglers, possible)
        if rule_met and bool(code.decodable(usable).all()):
            return True
        if now_s >= self.deadline_at(started_s) or not bool(pending.any()):
            return bool((usable.sum(dim=-1) >= code.min_arrived).all())
        return False

    def __repr__(self) -> str:
        s = "adaptive" if self.adaptive is not None else self.num_stragglers
        return f"WaitPolicy(num_stragglers={s}, deadline_s={self.deadline_s}, timeout_s={self.timeout_s})"
