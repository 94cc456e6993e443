"""What a "straggler event" is for a given size: the link between the size and the units it waits for.

A step with size ``g`` observes the durations of ``units(g)`` units and has a straggler event when at least
``at_least(g)`` of them exceed the threshold. With a per-unit exceedance probability ``q`` (a Beta posterior in
:class:`~torchgcc.control.tail_risk.BetaTailRisk`), the predicted event probability is the Beta-binomial tail
``P(X >= at_least(g))``, ``X ~ BetaBinomial(units(g), alpha, beta)``.

- :class:`AllMustFinish`: synchronous GRPO. Size ``G`` = rollouts per prompt; a step runs ``G * prompts`` rollouts
  and must wait for all of them, so one exceedance is an event: ``P = 1 - E[(1 - q)^(G * prompts)]``.
- :class:`WaitForFastest`: coded computing. ``N`` workers run every step; size ``k = N - S`` = results waited for.
  The step latency is the k-th fastest duration, which exceeds the threshold exactly when more than ``N - k``
  workers do: ``P = P(X >= N - k + 1)`` with ``X ~ BetaBinomial(N, alpha, beta)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable

import torch

from torchgcc.checks import check_integer
from torchgcc.registry import Registry

__all__ = ["AllMustFinish", "EVENT_MODELS", "EventModel", "WaitForFastest", "make_event_model"]


class EventModel(ABC):
    """How many units a size observes and how many exceedances make an event."""

    @abstractmethod
    def units(self, sizes: torch.Tensor) -> torch.Tensor:
        """Units observed per step at each size (int64, same shape)."""

    @abstractmethod
    def at_least(self, sizes: torch.Tensor) -> torch.Tensor:
        """The number of exceedances that makes a step at each size a straggler event (int64, same shape)."""

    @abstractmethod
    def check_size(self, size: int) -> None:
        """Raise ValueError if ``size`` is not a valid size for this model."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]: ...


class AllMustFinish(EventModel):
    """Every unit of the step must finish: ``units(G) = G * units_per_size``, one exceedance is an event.

    Args:
        units_per_size: units per unit of size (GRPO: prompts per step, each with a group of G rollouts).
    """

    def __init__(self, units_per_size: int = 1) -> None:
        self.units_per_size = check_integer("units_per_size", units_per_size, minimum=1)

    def units(self, sizes):
        return torch.as_tensor(sizes, dtype=torch.int64) * self.units_per_size

    def at_least(self, sizes):
        return torch.ones_like(torch.as_tensor(sizes, dtype=torch.int64))

    def check_size(self, size):
        if size < 1:
            raise ValueError(f"a group size must be >= 1, got {size}")

    def state_dict(self):
        return {"kind": "all_must_finish", "units_per_size": self.units_per_size}

    def __repr__(self) -> str:
        return f"AllMustFinish(units_per_size={self.units_per_size})"


class WaitForFastest(EventModel):
    """``num_workers`` units run every step and the step waits for the fastest ``k`` (the size).

    Args:
        num_workers: N.
    """

    def __init__(self, num_workers: int) -> None:
        self.num_workers = check_integer("num_workers", num_workers, minimum=1)

    def units(self, sizes):
        return torch.full_like(torch.as_tensor(sizes, dtype=torch.int64), self.num_workers)

    def at_least(self, sizes):
        return self.num_workers - torch.as_tensor(sizes, dtype=torch.int64) + 1

    def check_size(self, size):
        if not 1 <= size <= self.num_workers:
            raise ValueError(f"a wait count must be in [1, N={self.num_workers}], got {size}")

    def state_dict(self):
        return {"kind": "wait_for_fastest", "num_workers": self.num_workers}

    def __repr__(self) -> str:
        return f"WaitForFastest(num_workers={self.num_workers})"


#: Event models by name (the ``kind`` entry of their ``state_dict``).
EVENT_MODELS: Registry[Callable[..., EventModel]] = Registry("event model")
EVENT_MODELS.register("all_must_finish", AllMustFinish)
EVENT_MODELS.register("wait_for_fastest", WaitForFastest)


def make_event_model(state: dict[str, Any]) -> EventModel:
    """Rebuild an event model from its ``state_dict``."""
    params = {key: value for key, value in state.items() if key != "kind"}
    return EVENT_MODELS[state["kind"]](**params)
