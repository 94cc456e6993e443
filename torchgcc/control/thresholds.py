"""When a unit counts as a straggler: a fixed deadline, or a multiple of the step's median duration."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable

import torch

from torchgcc.checks import check_real
from torchgcc.registry import Registry

__all__ = ["DeadlineThreshold", "RelativeThreshold", "StragglerThreshold", "THRESHOLDS", "make_threshold"]


class StragglerThreshold(ABC):
    """Maps one step's unit durations ``(n,)`` (seconds, finite ones only) to the straggler threshold in seconds."""

    @abstractmethod
    def __call__(self, durations: torch.Tensor) -> float: ...

    @abstractmethod
    def state_dict(self) -> dict[str, Any]: ...


class DeadlineThreshold(StragglerThreshold):
    """A unit straggles when its duration exceeds ``deadline`` seconds."""

    def __init__(self, deadline: float) -> None:
        self.deadline = check_real("deadline (seconds)", deadline, low=0, low_open=True)

    def __call__(self, durations: torch.Tensor) -> float:
        return self.deadline

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "deadline", "deadline": self.deadline}

    def __repr__(self) -> str:
        return f"DeadlineThreshold({self.deadline:g})"


class RelativeThreshold(StragglerThreshold):
    """A unit straggles when its duration exceeds ``kappa`` times the median duration of its step.

    This is SAGC's "max versus median rollout length" signal: it needs no absolute time scale, so it keeps its
    meaning when the hardware or the output lengths change.
    """

    def __init__(self, kappa: float) -> None:
        self.kappa = check_real("kappa (a multiple of the median)", kappa, low=1, low_open=True)

    def __call__(self, durations: torch.Tensor) -> float:
        return self.kappa * float(durations.double().median())

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "relative", "kappa": self.kappa}

    def __repr__(self) -> str:
        return f"RelativeThreshold(kappa={self.kappa:g})"


#: Threshold kinds by name (the ``kind`` entry of their ``state_dict``).
THRESHOLDS: Registry[Callable[..., StragglerThreshold]] = Registry("straggler threshold")
THRESHOLDS.register("deadline", DeadlineThreshold)
THRESHOLDS.register("relative", RelativeThreshold)


def make_threshold(state: dict[str, Any]) -> StragglerThreshold:
    """Rebuild a threshold from its ``state_dict``."""
    params = {key: value for key, value in state.items() if key != "kind"}
    return THRESHOLDS[state["kind"]](**params)
