"""Tiny built-in workloads for the entry point, the benchmark and the tests: every rank builds the same one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

__all__ = ["TASKS", "Task", "make_task"]


@dataclass
class Task:
    """A model and a deterministic stream of batches.

    Attributes:
        model: the network every worker runs (identical on every rank: built from the seed on the CPU).
        batch: ``step -> (M, *in)`` inputs of that step (the same on every call).
    """

    model: nn.Module
    batch: Callable[[int], torch.Tensor]


def mlp_task(*, seed: int = 0, batch_size: int = 64, in_features: int = 16, hidden: int = 64, classes: int = 10) -> Task:
    """A seeded random tanh MLP ``(M, in_features) -> (M, classes)`` on standard normal inputs."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(in_features, hidden), nn.Tanh(), nn.Linear(hidden, classes)).eval()

    def batch(step: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
        return torch.randn(batch_size, in_features, generator=generator)

    return Task(model=model, batch=batch)


#: name -> factory(seed=, batch_size=) -> Task.
TASKS: dict[str, Callable[..., Task]] = {"mlp": mlp_task}


def make_task(name: str, *, seed: int, batch_size: int) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose from {sorted(TASKS)}")
    return TASKS[name](seed=seed, batch_size=batch_size)
