"""Utilities of a size: what a larger group or a larger wait count buys, on a common [0, 1] scale.

The controller maximises ``U(size) - lambda * P(event | size)``. ``U`` is normalised over the candidate sizes to
``[0, 1]`` (smallest 0, largest 1) so that ``lambda`` has the same meaning whatever the raw utility.

- ``"log"``: ``log(size)``, diminishing returns (the default; SAGC-style "benefit of large groups").
- ``"variance"``: ``1 - 1 / size``, the variance reduction of a mean over ``size`` samples: the group-relative
  baseline's error variance falls as ``1 / G``.
- ``"linear"``: ``size``.

A user's own measured utility (e.g. the accuracy of coded inference per wait count) is given as a sequence of
values, one per candidate size.
"""

from __future__ import annotations

from typing import Callable, Sequence, Union

import torch

from torchgcc.registry import Registry

__all__ = ["UTILITIES", "UtilitySpec", "normalised_utility"]

#: Raw utility functions of the sizes ``(n,)`` float64 by name.
UTILITIES: Registry[Callable[[torch.Tensor], torch.Tensor]] = Registry("utility")
UTILITIES.register("log", torch.log)
UTILITIES.register("variance", lambda sizes: 1 - 1 / sizes)
UTILITIES.register("linear", lambda sizes: sizes)

UtilitySpec = Union[str, Sequence[float], torch.Tensor]


def normalised_utility(spec: UtilitySpec, sizes: torch.Tensor) -> torch.Tensor:
    """``U`` of the candidate ``sizes`` ``(n,)`` (sorted ascending), min-max scaled to ``[0, 1]``, float64.

    ``spec`` is a name in :data:`UTILITIES` or one value per size. A constant utility becomes all zeros.
    """
    sizes = sizes.double()
    if isinstance(spec, str):
        raw = UTILITIES[spec](sizes)
    else:
        raw = torch.as_tensor(spec, dtype=torch.float64).flatten()
        if raw.shape != sizes.shape:
            raise ValueError(
                f"utility must be a name in {UTILITIES.names()} or one value per size "
                f"({len(sizes)}), got {len(raw)} values"
            )
    if not torch.isfinite(raw).all():
        raise ValueError(f"utility values must be finite, got {raw.tolist()}")
    span = raw.max() - raw.min()
    return (raw - raw.min()) / span if span > 0 else torch.zeros_like(raw)
