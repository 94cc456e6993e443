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
from typing import Literal, Optional, Sequence, overload

import torch

__all__ = [
    "NODE_ORDERS",
    "SEED_RANGE",
    "batch_shape",
    "check_arrived",
    "check_finite",
    "check_integer",
    "check_mask",
    "check_nodes",
    "check_real",
    "check_seed",
    "check_tensor",
    "real_tensor",
]

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


def check_arrived(mask: torch.Tensor, min_arrived: int) -> None:
    """A one-line ``ValueError`` naming the first group unless every row of the ``(B, N)`` bool ``mask`` holds at
    least ``min_arrived`` True (results a decoder needs). One host read."""
    counts = mask.sum(dim=-1)
    short = counts < min_arrived
    if bool(short.any()):
        group = int(short.nonzero()[0])
        raise ValueError(
            f"group {group} has {int(counts[group])} arrived results but this decoder needs at least "
            f"{min_arrived} ({int(short.sum())} group(s) short)"
        )


def real_tensor(value: object, name: str) -> torch.Tensor:
    """``value`` as float64 if it is a tensor of real numbers (integer or floating point; not bool, not complex,
    whose imaginary part a cast would drop) that holds values (not on the meta device), else a one-line
    ``TypeError`` / ``ValueError`` naming ``name``. Only converts: no host read (the callers below read)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of real numbers, got {type(value).__name__}; convert it with "
            "torch.as_tensor(...)"
        )
    if value.dtype == torch.bool or value.is_complex():
        raise TypeError(f"{name} must hold real numbers, got a {value.dtype} tensor")
    if value.is_meta:
        raise ValueError(f"{name} is on the meta device, which holds no values to check; pass it on cpu or cuda")
    return value.to(torch.float64)


def check_finite(value: object, name: str, *, low: Optional[float] = None) -> torch.Tensor:
    """:func:`real_tensor` of ``value`` if every entry is finite (and ``>= low`` when given), else a one-line
    ``ValueError`` naming ``name`` and the first offending value. One host read."""
    values = real_tensor(value, name)
    valid = torch.isfinite(values) if low is None else torch.isfinite(values) & (values >= low)
    if not bool(valid.all()):
        what = "finite" if low is None else f"finite and >= {low:g}"
        raise ValueError(f"{name} must be {what}, got {float(values[~valid][0])!r} at index {_first(~valid)}")
    return values


#: What :func:`check_nodes` requires of the values along the last dimension.
NODE_ORDERS = ("any", "distinct", "increasing")


def check_nodes(value: object, name: str, *, order: str = "any", batched: bool = True) -> torch.Tensor:
    """:func:`real_tensor` of ``value`` if it holds nodes or evaluation points: shape ``(..., n)`` (``(n,)`` unless
    ``batched``), every entry finite and, along the last dimension, pairwise ``"distinct"`` or strictly
    ``"increasing"`` (``order``, one of :data:`NODE_ORDERS`). Else a one-line ``TypeError`` / ``ValueError`` naming
    ``name``. One host read when the values are valid (more, only to word the error, when not)."""
    values = real_tensor(value, name)
    if values.ndim == 0 or (values.ndim > 1 and not batched):
        shape = "(..., n)" if batched else "(n,): one-dimensional"
        raise ValueError(f"{name} must have shape {shape}, got shape {tuple(values.shape)}")
    valid = torch.isfinite(values).all()
    if order != "any":
        steps = (values.sort(dim=-1).values if order == "distinct" else values).diff(dim=-1)
        valid = valid & (steps > 0).all()
    if not bool(valid):
        check_finite(values, name)  # raises for a non-finite entry
        if (steps == 0).any():
            rule = "they must be strictly increasing (distinct and sorted)" if order == "increasing" else ""
            raise ValueError(f"{name} contain duplicates; {rule or 'every one must be distinct'}")
        raise ValueError(f"{name} must be sorted in strictly increasing order")
    return values


def batch_shape(**shapes: Sequence[int]) -> torch.Size:
    """The broadcast of the named batch ``shapes`` (e.g. ``knots=knots.shape[:-1]``), else a one-line
    ``ValueError`` naming the arguments and their shapes."""
    try:
        return torch.broadcast_shapes(*shapes.values())
    except RuntimeError:
        listed = ", ".join(f"{name} {tuple(shape)}" for name, shape in shapes.items())
        raise ValueError(f"the batch shapes of {listed} do not broadcast") from None


def _first(flags: torch.Tensor) -> tuple[int, ...]:
    """The index of the first True entry of ``flags`` (at least one)."""
    return tuple(int(i) for i in flags.nonzero()[0])
