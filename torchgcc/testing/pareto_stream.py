"""A controller fed i.i.d. Pareto unit durations: the stream the controller's tests and ``benchmarks/pareto_streams.py``
both run, so that the published streams are the tested ones."""

from __future__ import annotations

from typing import Callable, Protocol

import torch

__all__ = ["pareto_stream"]


class SizeController(Protocol):
    """What the stream drives: a group-size controller such as :class:`torchgcc.control.StragglerAwareController`
    (a layer above this package, so not imported here)."""

    def choose(self) -> int: ...

    def observe(self, durations: torch.Tensor) -> object: ...


def pareto_stream(
    controller: SizeController, steps: int, shape_of_step: Callable[[int], float], seed: int
) -> list[int]:
    """Run ``controller`` for ``steps`` steps: each step it chooses a group size ``g`` and observes ``g`` durations
    drawn from Pareto(1, ``shape_of_step(step)``) (by inversion of float64 uniforms of a generator seeded with
    ``seed``). Returns the chosen sizes."""
    generator = torch.Generator().manual_seed(seed)
    chosen = []
    for step in range(steps):
        size = controller.choose()
        chosen.append(size)
        u = torch.rand(size, generator=generator, dtype=torch.float64)
        controller.observe((1 - u) ** (-1 / shape_of_step(step)))
    return chosen
