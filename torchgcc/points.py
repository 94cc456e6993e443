"""Regression and worker points on [-1, 1].

GCC, BACC and LCC place the K inputs at regression points ``alpha`` and the N workers at points ``beta``. The
defaults follow the BACC and GCC papers: ``alpha`` are Chebyshev points of the first kind and ``beta`` Chebyshev
points of the second kind. Every function returns a float64 tensor sorted ascending.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence, Union

import torch

__all__ = [
    "chebyshev_first_kind",
    "chebyshev_second_kind",
    "equispaced",
    "resolve_points",
    "POINT_RULES",
]


def chebyshev_first_kind(n: int) -> torch.Tensor:
    """Chebyshev points of the first kind, ``cos((2k - 1) pi / (2n))`` for k = 1..n, ascending, shape ``(n,)``.

    They lie strictly inside (-1, 1).
    """
    _check_count(n, minimum=1)
    k = torch.arange(1, n + 1, dtype=torch.float64)
    return torch.cos((2 * k - 1) * math.pi / (2 * n)).flip(0)


def chebyshev_second_kind(n: int) -> torch.Tensor:
    """Chebyshev points of the second kind, ``cos((k - 1) pi / (n - 1))`` for k = 1..n, ascending, shape ``(n,)``.

    They include both ends -1 and 1 (n >= 2).
    """
    _check_count(n, minimum=2)
    k = torch.arange(n, dtype=torch.float64)
    points = torch.cos(k * math.pi / (n - 1)).flip(0)
    points[0], points[-1] = -1.0, 1.0  # exact ends, free of rounding
    return points


def equispaced(n: int) -> torch.Tensor:
    """``n`` equispaced points on [-1, 1] including both ends (the midpoint 0 when n = 1), shape ``(n,)``."""
    _check_count(n, minimum=1)
    if n == 1:
        return torch.zeros(1, dtype=torch.float64)
    return torch.linspace(-1.0, 1.0, n, dtype=torch.float64)


#: Named point rules accepted wherever points are configured.
POINT_RULES: dict[str, Callable[[int], torch.Tensor]] = {
    "chebyshev1": chebyshev_first_kind,
    "chebyshev2": chebyshev_second_kind,
    "equispaced": equispaced,
}

PointSpec = Union[str, Sequence[float], torch.Tensor]


def resolve_points(spec: PointSpec, n: int, *, name: str = "points", count_name: str = "n") -> torch.Tensor:
    """Turn a rule name (see :data:`POINT_RULES`) or explicit points into a float64 ``(n,)`` tensor.

    Explicit points must be finite, strictly increasing (so no duplicates) and number ``n``; ``count_name`` names
    ``n`` in the error when a rule cannot make that many points (e.g. ``"num_workers"``).

    >>> resolve_points("equispaced", 5)
    tensor([-1.0000, -0.5000,  0.0000,  0.5000,  1.0000], dtype=torch.float64)
    >>> resolve_points([-1, 0.5, 0.2], 3, name="beta")
    Traceback (most recent call last):
    ...
    ValueError: beta must be sorted in strictly increasing order
    """
    if isinstance(spec, str):
        try:
            rule = POINT_RULES[spec]
        except KeyError:
            raise ValueError(f"unknown {name} rule {spec!r}; choose one of {sorted(POINT_RULES)}") from None
        try:
            return rule(n)
        except ValueError as error:
            raise ValueError(
                f"{name}={spec!r} cannot place {count_name}={n!r} points ({error}); raise {count_name} "
                f"or pick another {name} rule"
            ) from None
    points = torch.as_tensor(spec, dtype=torch.float64).detach().clone()
    if points.ndim != 1 or points.numel() != n:
        raise ValueError(f"{name} must have shape ({n},), got {tuple(points.shape)}")
    if not torch.isfinite(points).all():
        raise ValueError(f"{name} must be finite")
    steps = points.diff()
    if (steps == 0).any():
        raise ValueError(f"{name} contain duplicates; every point must be distinct")
    if (steps < 0).any():
        raise ValueError(f"{name} must be sorted in strictly increasing order")
    return points


def _check_count(n: int, *, minimum: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < minimum:
        raise ValueError(f"the number of points must be an integer >= {minimum}, got {n!r}")
