"""Independent numerical references (scipy, csaps, textbook formulas) used across the tests.

csaps is imported where it is used: the GPU machine's image has no csaps, and test_cuda needs only the tolerances.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse
from scipy.interpolate import CubicSpline, make_smoothing_spline


def natural_spline_reference(knots: np.ndarray, points: np.ndarray, lam: float) -> np.ndarray:
    """``(P, n)`` matrix of the natural cubic smoothing spline (mean-normalised lam), linear beyond the knots.

    Inside the hull: scipy's CubicSpline(natural) for lam = 0, make_smoothing_spline(lam=n*lam) otherwise. Beyond the
    outermost knots: the value and slope at the end knot, continued as a line.
    """
    n = len(knots)
    data = np.eye(n)
    if lam == 0:
        spline = CubicSpline(knots, data, bc_type="natural")
    else:
        spline = make_smoothing_spline(knots, data, lam=n * lam)
    slope = spline.derivative()
    ends = np.clip(points, knots[0], knots[-1])
    return spline(ends) + slope(ends) * (points - ends)[:, None]


def csaps_reference(knots: np.ndarray, points: np.ndarray, lam: float) -> np.ndarray:
    """``(P, n)`` matrix from csaps with p = 1 / (1 + n lam), for points inside the hull of the knots."""
    from csaps import CubicSmoothingSpline

    n = len(knots)
    spline = CubicSmoothingSpline(knots, np.eye(n), smooth=1.0 / (1.0 + n * lam))
    return np.asarray(spline(points)).T


def berrut_reference(nodes: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Berrut's first rational interpolant, written point by point from its definition."""
    out = np.zeros((len(points), len(nodes)))
    for p, x in enumerate(points):
        for j, t in enumerate(nodes):
            if x == t:
                out[p] = 0.0
                out[p, j] = 1.0
                break
        else:
            weights = np.array([(-1) ** j / (x - t) for j, t in enumerate(nodes)])
            out[p] = weights / weights.sum()
    return out


def reinsch_condition(knots: np.ndarray, lam: float) -> float:
    """The 2-norm condition number of the Reinsch matrix ``R + n lam Q^T Q`` of ``knots`` (built from its definition,
    Green and Silverman 1994: h the spacings, Q the (n, n - 2) second divided differences, R (n - 2, n - 2)
    tridiagonal; sparse, so that n = 4096 takes milliseconds): the ratio of its extreme eigenvalues (it is symmetric
    positive definite), from LAPACK's banded eigensolver; 1 for fewer than 3 knots (no system)."""
    n, h = len(knots), np.diff(knots)
    if n < 3:
        return 1.0
    j = np.arange(n - 2)
    q = scipy.sparse.coo_matrix(
        (
            np.concatenate([1 / h[:-1], -1 / h[:-1] - 1 / h[1:], 1 / h[1:]]),
            (np.concatenate([j, j + 1, j + 2]), np.tile(j, 3)),
        ),
        shape=(n, n - 2),
    ).tocsr()
    r = scipy.sparse.diags([h[1:-1] / 6, (h[:-1] + h[1:]) / 3, h[1:-1] / 6], [-1, 0, 1], shape=(n - 2, n - 2))
    system = (r + n * lam * (q.T @ q)).todia()
    bands = np.zeros((3, n - 2))  # LAPACK's lower banded storage: bands[i, c] = system[c + i, c] (= DIA's data)
    for offset, values in zip(system.offsets, system.data):
        if -2 <= offset <= 0:
            bands[-offset, : n - 2 + offset] = values[: n - 2 + offset]
    low = scipy.linalg.eigvals_banded(bands, lower=True, select="i", select_range=(0, 0))[0]
    high = scipy.linalg.eigvals_banded(bands, lower=True, select="i", select_range=(n - 3, n - 3))[0]
    return float(high / low)


def solve_tolerance(knots: np.ndarray, lam: float) -> float:
    """The difference allowed between two backward-stable solves of the smoothing spline's system on ``knots`` (entries
    of a decode matrix, at most ~1): 64 cond eps, ``cond`` from :func:`reinsch_condition`. It covers two orders of the
    same operations and FMA contraction (one rounding for ``a * b + c`` instead of two: each operation's error stays
    within an ulp), so it holds for a GPU kernel against a CPU one too."""
    return 64 * reinsch_condition(knots, lam) * np.finfo(np.float64).eps


def berrut_tolerance(nodes: np.ndarray, points: np.ndarray) -> float:
    """The difference allowed between two evaluations of Berrut's weights ``w_j / sum w`` (``w_j = (-1)^j / (x -
    t_j)``) summed in different orders: the sum's error is at most ``n eps sum |w|``, so each weight's is at most
    ``kappa (n kappa + 2) eps`` with ``kappa = sum |w| / |sum w|`` (the sum's condition number, which also bounds the
    weights); a factor 4 for the divisions. Points on a node (exact unit rows) need no allowance."""
    kappa = 1.0
    for x in points:
        if np.any(x == nodes):
            continue
        weights = (-1.0) ** np.arange(len(nodes)) / (x - nodes)
        kappa = max(kappa, np.abs(weights).sum() / abs(weights.sum()))
    return 4 * kappa * (len(nodes) * kappa + 2) * np.finfo(np.float64).eps
