"""Summary statistics of experiment records: log-log slopes and means over seeds with confidence intervals."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

__all__ = ["loglog_slope", "seed_mean_ci"]


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of ``log y`` against ``log x`` (``np.polyfit`` of degree 1); NaN with fewer than two
    points with ``y > 0``.

    >>> round(loglog_slope([10, 100, 1000], [1e-3, 1e-6, 1e-9]), 6)
    -3.0
    """
    points = [(a, b) for a, b in zip(x, y) if b is not None and b > 0]
    if len(points) < 2:
        return math.nan
    return float(np.polyfit(np.log([a for a, _ in points]), np.log([b for _, b in points]), 1)[0])


def seed_mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean of ``values`` (one per seed) and the half-width of its Student-t 95% interval (NaN for one value).

    Missing values (None or NaN) make both results NaN.
    """
    if not values or any(value is None or math.isnan(value) for value in values):
        return math.nan, math.nan
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, math.nan
    import scipy.stats

    std = math.sqrt(sum((value - mean) ** 2 for value in values) / (len(values) - 1))
    return mean, float(scipy.stats.t.ppf(0.975, len(values) - 1)) * std / math.sqrt(len(values))
