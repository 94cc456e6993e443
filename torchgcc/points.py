"""Regression and worker points on [-1, 1].

GCC, BACC and LCC place the K inputs at regression points ``alpha`` and the N workers at points ``beta``. The
defaults follow the BACC and GCC papers: ``alpha`` are Chebyshev points of the first kind and ``beta`` Chebyshev
points of the second kind. Every function returns a float64 tensor sorted ascending.

Points must lie on [-1, 1] (:func:`check_points`): the codes' smoothing is defined there (the spline objective
integrates ``u''^2`` over a length that the ``"spacing"`` and GCV rules and the adversarial lambda assume to be 2,
and a cubic spline's smoothing parameter changes with the cube of the points' scale), as is the Chebyshev basis of
LCC's fits. Points on another interval ``[lo, hi]`` map there by ``2 (t - lo) / (hi - lo) - 1``, for ``alpha`` and
``beta`` alike; the spline and polynomial codes are then the same codes of the mapped variable.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence, Union

import torch

from torchgcc.checks import check_integer, check_nodes, real_tensor

__all__ = [
    "chebyshev_first_kind",
    "chebyshev_second_kind",
    "check_points",
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

    Explicit points must be finite, strictly increasing (so no duplicates), on [-1, 1] and number ``n`` (see
    :func:`check_points`); ``count_name`` names ``n`` in the errors (e.g. ``"num_workers"``).

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
    if isinstance(spec, torch.Tensor):
        points = real_tensor(spec, name).detach().clone()
    else:
        try:
            points = torch.as_tensor(spec, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                f"{name} must be a rule name ({sorted(POINT_RULES)}) or {n} numbers, got {spec!r}"
            ) from None
    if points.ndim != 1 or points.numel() != n:
        raise ValueError(f"{name} must have shape ({n},) ({count_name}={n} points), got {tuple(points.shape)}")
    return check_points(points, name)


def check_points(points: torch.Tensor, name: str = "points") -> torch.Tensor:
    """``points`` if they are a float64 ``(n,)`` tensor of finite, strictly increasing values on [-1, 1], else a
    one-line ``ValueError`` naming ``name`` and the fix (``TypeError`` for a tensor that is not real: bool, complex).
    Reads the values (two host reads: :func:`~torchgcc.checks.check_nodes`, then the interval)."""
    points = check_nodes(points, name, order="increasing", batched=False)
    if len(points) and (points[0] < -1 or points[-1] > 1):
        lo, hi = float(points[0]), float(points[-1])
        raise ValueError(
            f"{name} must lie on [-1, 1], got points from {lo:g} to {hi:g}; map them there with "
            f"2 * (t - lo) / (hi - lo) - 1 (alpha and beta alike: the smoothing is defined on [-1, 1])"
        )
    return points


def _check_count(n: int, *, minimum: int) -> None:
    check_integer("the number of points", n, minimum=minimum)
