"""Checks of the numbers the public constructors take and of the tensors the public entry points take: one-line
errors that name the argument, what it must be and what was given (the one validation path of the library).

A value that is not a number at all (a string, None, a list) raises ``TypeError``; a number of the wrong kind or
outside its range (``2.5`` workers, ``-1``, NaN) raises ``ValueError``. Numpy numbers are numbers; ``bool`` is not.

>>> check_integer("num_workers", 8, minimum=1)
8
>>> check_integer("num_workers", "8", minimum=1)
Traceback (most recent call last):
...
TypeError: num_workers must be an integer >= 1, got '8' (str); pass a number, not a string
"""

from __future__ import annotations

import math
import numbers
from typing import Literal, Optional, overload

import torch

__all__ = ["SEED_RANGE", "check_integer", "check_mask", "check_real", "check_seed", "check_tensor"]

#: The seeds ``torch.Generator.manual_seed`` takes: a signed or unsigned 64-bit integer.
SEED_RANGE = (-(2**63), 2**64 - 1)


def _not_a_number(name: str, what: str, value: object) -> TypeError:
    hint = "; pass a number, not a string" if isinstance(value, str) else ""
    return TypeError(f"{name} must be {what}, got {value!r} ({type(value).__name__}){hint}")


def _bound(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"  # an integer bound exactly, however large


def _interval(low: Optional[float], high: Optional[float], low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{_bound(low)}, {_bound(high)}{')' if high_open else ']'}"
    if low is not None:
        return f" {'>' if low_open else '>='} {_bound(low)}"
    if high is not None:
        return f" {'<' if high_open else '<='} {_bound(high)}"
    return ""


def check_integer(name: str, value: object, *, minimum: Optional[int] = None, maximum: Optional[int] = None) -> int:
    """``value`` as an ``int`` if it is an integer in ``[minimum, maximum]`` (either bound optional), else a
    one-line ``TypeError`` (not a number) or ``ValueError`` (not an integer, or out of range) naming ``name``."""
    what = "an integer" + _interval(minimum, maximum, False, False)
    if isinstance(value, bool) or not isinstance(value, numbers.Number):
        raise _not_a_number(name, what, value)
    if not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be {what}, got {value!r} ({type(value).__name__})")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value


def check_real(
    name: str,
    value: object,
    *,
    low: Optional[float] = None,
    high: Optional[float] = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite ``float`` in the interval from ``low`` to ``high`` (either bound optional, closed unless
    ``low_open`` / ``high_open``), else a one-line ``TypeError`` (not a real number) or ``ValueError`` (NaN, infinite
    or out of range) naming ``name``."""
    if low == 0 and low_open and high is None:
        what = "a positive finite number"
    else:
        what = "a finite number" + _interval(low, high, low_open, high_open)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _not_a_number(name, what, value)
    value = float(value)
    below = low is not None and (value <= low if low_open else value < low)
    above = high is not None and (value >= high if high_open else value > high)
    if not math.isfinite(value) or below or above:
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value


@overload
def check_seed(name: str, value: object, *, optional: Literal[False] = False) -> int: ...


@overload
def check_seed(name: str, value: object, *, optional: bool) -> Optional[int]: ...


def check_seed(name: str, value: object, *, optional: bool = False) -> Optional[int]:
    """``value`` as an ``int`` seed for ``torch.Generator.manual_seed`` (an integer in :data:`SEED_RANGE`), or
    ``None`` when ``optional`` and ``value`` is ``None`` (an unseeded stream); else a one-line ``TypeError`` /
    ``ValueError`` naming ``name``."""
    if optional and value is None:
        return None
    return check_integer(name, value, minimum=SEED_RANGE[0], maximum=SEED_RANGE[1])


def check_tensor(value: object, name: str, axis: str, size: int, trailing: str) -> torch.Tensor:
    """``value`` if it is a floating-point tensor of shape ``(B, size, *trailing)`` with ``B >= 1``, else a one-line
    error naming ``name``, the expected shape (``(B, axis=size, *trailing)``) and the fix. No text is formatted
    unless it raises (the decoder checks every call)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape (B, {axis}={size}, *{trailing}), got {type(value).__name__}; "
            "convert it with torch.as_tensor(...)"
        )
    if not value.is_floating_point():
        raise TypeError(f"{name} must be floating point, got {value.dtype}; cast it with .float()")
    if value.ndim >= 1 and value.shape[0] == 0:
        raise ValueError(f"{name} is an empty batch (B = 0, shape {tuple(value.shape)}); pass at least one group")
    if value.ndim < 2 or value.shape[1] != size:
        raise ValueError(f"{name} must have shape (B, {axis}={size}, *{trailing}), got {tuple(value.shape)}")
    return value


def check_mask(mask: object, num_workers: int, batch: Optional[int] = None) -> torch.Tensor:
    """``mask`` if it is a bool tensor of shape ``(B, N)`` (``N = num_workers``, ``B = batch`` when given), else a
    one-line error saying how to make one (no text is formatted unless it raises)."""

    def shape() -> str:
        return f"(B, N) = ({'B' if batch is None else batch}, {num_workers})"

    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"mask must be a bool torch.Tensor of shape {shape()} (True = result arrived), got "
            f"{type(mask).__name__}; convert it with torch.as_tensor(mask, dtype=torch.bool)"
        )
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = result arrived), got {mask.dtype}; use mask.bool()")
    if mask.ndim != 2 or mask.shape[1] != num_workers or (batch is not None and mask.shape[0] != batch):
        hint = "; a single group's (N,) mask is mask.unsqueeze(0)" if mask.ndim == 1 else ""
        raise ValueError(f"mask must have shape {shape()}, got {tuple(mask.shape)}{hint}")
    return mask
