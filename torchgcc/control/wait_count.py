"""Adaptive wait count for coded computing: how many of the N workers' results to wait for at each step.

Waiting for more results (a smaller number of tolerated stragglers ``S``) makes the decoded outputs more accurate
but the step slower: the step latency is the ``(N - S)``-th fastest worker latency. :class:`WaitCountController`
chooses ``S`` per step with :class:`~torchgcc.control.controller.StragglerAwareController`: the size is the wait
count ``k = N - S``, the utility is the accuracy of decoding from ``k`` results (a measured profile, or ``k``
itself), and a straggler event is a step whose latency exceeds ``deadline`` (more than ``N - k`` workers late).
The long-run fraction of steps over the deadline is held at ``budget``; ``min_accuracy`` removes the wait counts
whose profiled accuracy is below an accuracy floor.

Two safeguards of the controller are on by default here, because a deadline is usually a p99 target and every
miss counts: the chance constraint (each step's predicted probability of missing the deadline is at most
``budget``) and change detection (a step with improbably many late workers resets the posterior and allows an
immediate move to a larger S).

Callers (a coded-inference loop, the distributed executor, a gradient-coding runtime with ``n - s``)::

    policy = WaitCountController(num_workers=24, deadline=2.0, budget=0.01, accuracy=profile)
    for batch in batches:
        S = policy.choose()                     # stragglers tolerated this step: wait for N - S results
        latencies = run_step(batch, S)          # (N,) seconds; inf for results cancelled before they arrived
        policy.observe(latencies)
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional, Sequence

import torch

from torchgcc.checks import check_integer, check_real
from torchgcc.control.controller import StragglerAwareController
from torchgcc.control.event_models import WaitForFastest
from torchgcc.control.thresholds import DeadlineThreshold

__all__ = ["WaitCountController"]


class WaitCountController:
    """Chooses ``S`` (stragglers tolerated, i.e. wait for ``N - S`` results) per step under a deadline budget.

    Args:
        num_workers: N.
        deadline: seconds; a step slower than this is a straggler event.
        budget: allowed long-run fraction of steps over the deadline (e.g. 0.01 keeps the p99 near the deadline).
        candidates: the values of S to choose from (default ``0 .. N - 1``).
        accuracy: ``{S: accuracy}`` measured offline (e.g. RelAcc of the code at each S), the utility to maximise;
            default: the wait count ``N - S`` (more results are better).
        min_accuracy: drop the candidates whose ``accuracy`` is below this floor (needs ``accuracy``).
        fallback: the static S used during warm-up and after :meth:`use_fallback` (default: the largest S, the
            fastest choice).
        chance_constraint: only choose S whose predicted probability of missing the deadline is at most
            ``budget`` (the controller's ``risk_cap``).
        change_level: significance level of the controller's change test (``None``: no change detection).
        eta, discount, warmup, max_step: the controller's dual step size, posterior forgetting factor (memory about
            ``1 / (1 - discount)`` steps), warm-up steps at ``fallback`` and largest move per step. The defaults
            are the distributed executor's and the gradient-coding runtime's: with change detection handling abrupt
            changes, a long memory, one warm-up step and moves of up to 4.
        options: further :class:`StragglerAwareController` options (``hold``, ``prior``, ``seed``).

    Raises:
        TypeError / ValueError: one line naming the argument, for a ``num_workers``, candidate S or ``fallback``
            that is not an integer (``4.0``, ``"4"``, ``0.5``; numpy integers are integers), a value out of range,
            or ``accuracy`` lacking a candidate S or giving one a value that is not a finite number (checked before
            ``min_accuracy`` filters on it).
    """

    def __init__(
        self,
        num_workers: int,
        *,
        deadline: float,
        budget: float = 0.01,
        candidates: Optional[Sequence[int]] = None,
        accuracy: Optional[Mapping[int, float]] = None,
        min_accuracy: Optional[float] = None,
        fallback: Optional[int] = None,
        chance_constraint: bool = True,
        change_level: Optional[float] = 0.01,
        eta: float = 2.0,
        discount: float = 0.95,
        warmup: int = 1,
        max_step: int = 4,
        **options: Any,
    ) -> None:
        num_workers = check_integer("num_workers", num_workers, minimum=1)
        if candidates is None:
            candidates = range(num_workers)
        elif isinstance(candidates, (str, bytes)) or not isinstance(candidates, Iterable):
            raise TypeError(f"candidates must be a sequence of integers S (stragglers tolerated), got {candidates!r}")
        candidates = sorted({check_integer("candidates", s) for s in candidates})
        if not candidates or candidates[0] < 0 or candidates[-1] >= num_workers:
            raise ValueError(f"candidates (values of S) must lie in [0, N - 1 = {num_workers - 1}], got {candidates}")
        if accuracy is not None:
            missing = [s for s in candidates if s not in accuracy]
            if missing:
                raise ValueError(f"accuracy lacks the candidate S values {missing}")
            # a NaN would be dropped by the floor below (NaN >= floor is False) or break the utility
            accuracy = {s: check_real(f"accuracy[{s}] (S = {s})", accuracy[s]) for s in candidates}
        if min_accuracy is not None:
            if accuracy is None:
                raise ValueError("min_accuracy needs accuracy={S: value} to know which S meet it")
            min_accuracy = check_real("min_accuracy", min_accuracy)
            candidates = [s for s in candidates if accuracy[s] >= min_accuracy]
            if not candidates:
                raise ValueError(f"no S has accuracy >= min_accuracy={min_accuracy}; lower the floor")
        self.num_workers = num_workers
        waits = [num_workers - s for s in reversed(candidates)]  # ascending wait counts
        utility = "linear" if accuracy is None else [accuracy[num_workers - k] for k in waits]
        fallback = candidates[-1] if fallback is None else check_integer("fallback", fallback)
        if fallback not in candidates:
            raise ValueError(f"fallback={fallback} is not one of the candidate S values {candidates}")
        self.controller = StragglerAwareController(
            waits,
            budget=budget,
            threshold=DeadlineThreshold(deadline),
            event_model=WaitForFastest(num_workers),
            utility=utility,
            fallback=num_workers - fallback,
            risk_cap=budget if chance_constraint else None,
            change_level=change_level,
            eta=eta,
            discount=discount,
            warmup=warmup,
            max_step=max_step,
            **options,
        )

    @property
    def num_stragglers(self) -> int:
        """The current S."""
        return self.num_workers - self.controller.size

    @property
    def wait_count(self) -> int:
        """The current number of results waited for, ``N - S``."""
        return self.controller.size

    def choose(self) -> int:
        """S for the next step (wait for ``N - S`` results)."""
        return self.num_workers - self.controller.choose()

    def observe(
        self,
        latencies: torch.Tensor | Sequence[float],
        num_stragglers: Optional[int] = None,
        *,
        watched_until: Optional[float] = None,
    ) -> bool:
        """Record the ``(N,)`` worker latencies of a step run with ``num_stragglers`` (an integer, default: the
        current S).

        Results not seen by ``watched_until`` seconds (default: the end of the step) are ``inf``; an executor that
        keeps recording late arrivals until the deadline passes ``watched_until=deadline``. Returns whether the step
        missed the deadline.
        """
        size = None
        if num_stragglers is not None:
            num_stragglers = check_integer("num_stragglers", num_stragglers)
            candidates = sorted(self.num_workers - k for k in self.controller.sizes.tolist())
            if num_stragglers not in candidates:
                raise ValueError(f"num_stragglers={num_stragglers} is not one of the candidate S values {candidates}")
            size = self.num_workers - num_stragglers
        latencies = torch.as_tensor(latencies, dtype=torch.float64).flatten()
        if latencies.numel() != self.num_workers:
            raise ValueError(
                f"latencies must hold N = {self.num_workers} values (one per worker), got {latencies.numel()}"
            )
        return self.controller.observe(latencies, size=size, watched_until=watched_until)

    def use_fallback(self, enabled: bool = True) -> None:
        """Switch to the static fallback S (``enabled=False`` resumes adaptive choices)."""
        self.controller.use_fallback(enabled)

    def stragglers_distribution(self) -> dict[int, float]:
        """Fraction of observed steps run at each S."""
        return {self.num_workers - k: share for k, share in self.controller.size_distribution().items()}

    def state_dict(self) -> dict[str, Any]:
        return {"num_workers": self.num_workers, "controller": self.controller.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.num_workers = int(state["num_workers"])
        self.controller.load_state_dict(state["controller"])

    def __repr__(self) -> str:
        return f"WaitCountController(N={self.num_workers}, S={self.num_stragglers}, {self.controller!r})"
