"""Checks of the numbers the public constructors take: one-line errors that name the argument, what it must be and
what was given.

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

__all__ = ["SEED_RANGE", "check_integer", "check_real", "check_seed"]

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
