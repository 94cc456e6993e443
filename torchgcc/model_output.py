"""What coded computing accepts from a model: a tensor, or a tuple, list, namedtuple or dict of tensors (one level).

:func:`flatten_output` splits an output into its :class:`OutputSpec` (the container and its keys, picklable, so it
can travel with a worker's results) and its tensors; :meth:`OutputSpec.build` puts tensors back into the container.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import torch

__all__ = ["ModelOutput", "OutputSpec", "flatten_output"]

#: A model output: a tensor, or a tuple, list or dict of tensors (all decoded together).
ModelOutput = Union[torch.Tensor, tuple, list, dict]


@dataclass(frozen=True)
class OutputSpec:
    """The container of a model output.

    Attributes:
        container: None for a bare tensor, else the output's type (``tuple``, ``list``, ``dict``, a namedtuple or a
            dict subclass).
        keys: the dict's keys, or the positions ``0 .. n-1`` of a sequence (``(None,)`` for a tensor).
    """

    container: Optional[type]
    keys: tuple

    def describe(self) -> str:
        """The structure in words, for errors: ``"a tensor"``, ``"a dict with keys ['a', 'b']"``, ``"a tuple of 2"``."""
        if self.container is None:
            return "a tensor"
        if issubclass(self.container, dict):
            return f"a {self.container.__name__} with keys {list(self.keys)}"
        return f"a {self.container.__name__} of {len(self.keys)}"

    def build(self, tensors: Sequence[torch.Tensor]) -> ModelOutput:
        """``tensors`` (one per key, in order) in this container."""
        if self.container is None:
            return tensors[0]
        if issubclass(self.container, dict):
            return self.container(zip(self.keys, tensors))
        container: Any = self.container
        if issubclass(container, tuple) and hasattr(container, "_fields"):  # a namedtuple
            return container(*tensors)
        return container(tensors)


def flatten_output(output: object, rows: int) -> tuple[OutputSpec, list[torch.Tensor]]:
    """``(spec, tensors)`` of a model output whose every tensor has ``rows`` rows (one per input row); anything else
    raises ``TypeError`` or ``ValueError`` naming the output."""
    if isinstance(output, torch.Tensor):
        spec, values = OutputSpec(None, (None,)), [output]
    elif isinstance(output, dict):
        spec, values = OutputSpec(type(output), tuple(output.keys())), list(output.values())
    elif isinstance(output, (tuple, list)):
        spec, values = OutputSpec(type(output), tuple(range(len(output)))), list(output)
    else:
        raise TypeError(
            f"CodedModule decodes a model output that is a tensor, or a tuple, list or dict of tensors; "
            f"got {type(output).__name__}"
        )
    if not values:
        raise ValueError(f"the model returned an empty {type(output).__name__}: CodedModule has nothing to decode")
    for key, value in zip(spec.keys, values):
        name = "model output" if key is None else f"model output [{key!r}]"
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"{name} is a {type(value).__name__}, not a tensor: CodedModule decodes tensors only (return the "
                "other values from a separate call)"
            )
        if not value.is_floating_point():
            raise TypeError(f"{name} has dtype {value.dtype}: CodedModule decodes floating-point outputs only")
        if value.ndim == 0 or value.shape[0] != rows:
            raise ValueError(
                f"{name} has shape {tuple(value.shape)}, but the model ran on {rows} coded inputs: CodedModule needs "
                f"one output row per input row, (B * N, *out) = ({rows}, ...)"
            )
    return spec, values
