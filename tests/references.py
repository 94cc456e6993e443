"""Independent numerical references (scipy, csaps, textbook formulas) used across the tests.

csaps is imported where it is used: the GPU machine's image has no csaps, and test_cuda needs only the tolerances.
"""

from __future__ import annotations

from fractions import Fraction

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


def _reinsch_parts(knots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Green and Silverman's ``Q`` ``(n, n - 2)``, ``R`` ``(n - 2, n - 2)`` and the spacings ``h`` of ``knots``."""
    n, h = len(knots), np.diff(knots)
    q, r = np.zeros((n, max(n - 2, 0))), np.zeros((max(n - 2, 0), max(n - 2, 0)))
    for j in range(n - 2):
        q[j, j], q[j + 1, j], q[j + 2, j] = 1 / h[j], -1 / h[j] - 1 / h[j + 1], 1 / h[j + 1]
        r[j, j] = (h[j] + h[j + 1]) / 3
        if j + 1 < n - 2:
            r[j, j + 1] = r[j + 1, j] = h[j + 1] / 6
    return q, r, h


def green_silverman_reference(knots: np.ndarray, points: np.ndarray, lam: float, digits: int = 40) -> np.ndarray:
    """``(P, n)`` matrix of the natural cubic smoothing spline (mean-normalised lam), from Green and Silverman (1994,
    sec. 2.3) in ``digits``-digit arithmetic (mpmath), rounded once: fitted values ``g = (I + n lam Q R^-1 Q^T)^-1
    y``, second derivatives ``gamma = R^-1 Q^T g`` (zero at the ends), the cubic between knots, lines beyond them.
    Any ``n >= 2`` (scipy's make_smoothing_spline needs 5), and exact enough that a comparison measures only the
    other side's error."""
    import mpmath

    with mpmath.workdps(digits):
        t = [mpmath.mpf(float(value)) for value in knots]
        n = len(t)
        h = [t[i + 1] - t[i] for i in range(n - 1)]
        q, r = mpmath.zeros(n, max(n - 2, 1)), mpmath.zeros(max(n - 2, 1), max(n - 2, 1))
        for j in range(n - 2):
            q[j, j], q[j + 1, j], q[j + 2, j] = 1 / h[j], -1 / h[j] - 1 / h[j + 1], 1 / h[j + 1]
            r[j, j] = (h[j] + h[j + 1]) / 3
            if j + 1 < n - 2:
                r[j, j + 1] = r[j + 1, j] = h[j + 1] / 6
        if n > 2:
            mu = n * mpmath.mpf(float(lam))
            fitted = mpmath.inverse(mpmath.eye(n) + mu * q * mpmath.inverse(r) * q.T)  # column k: g of datum k
            inner = mpmath.inverse(r) * q.T * fitted
            gamma = mpmath.zeros(n, n)
            for i in range(n - 2):
                for k in range(n):
                    gamma[i + 1, k] = inner[i, k]
        else:
            fitted, gamma = mpmath.eye(n), mpmath.zeros(n, n)
        out = np.empty((len(points), n))
        for p, value in enumerate(points):
            x = mpmath.mpf(float(value))
            for k in range(n):
                g = [fitted[i, k] for i in range(n)]
                c = [gamma[i, k] for i in range(n)]
                if x <= t[0]:
                    out[p, k] = float(g[0] + ((g[1] - g[0]) / h[0] - h[0] * c[1] / 6) * (x - t[0]))
                elif x >= t[-1]:
                    out[p, k] = float(g[-1] + ((g[-1] - g[-2]) / h[-1] + h[-1] * c[-2] / 6) * (x - t[-1]))
                else:
                    i = min(int(np.searchsorted(knots, float(value), side="right")) - 1, n - 2)
                    a, b = x - t[i], t[i + 1] - x
                    cubic = (1 + a / h[i]) * c[i + 1] + (1 + b / h[i]) * c[i]
                    out[p, k] = float((a * g[i + 1] + b * g[i]) / h[i] - a * b / 6 * cubic)
    return out


def reinsch_terms(knots: np.ndarray, points: np.ndarray, lam: float) -> np.ndarray:
    """``(P, n)`` componentwise scale of the rounding errors of the decode matrix in the Reinsch form torchgcc
    evaluates, ``D^T = v + Q z``, ``M z = c - mu Q^T v`` (``M = R + mu Q^T Q``, ``mu = n lam``; ``v`` and ``c`` the
    weights of the knot values and of the interior second derivatives at each point, linear beyond the knots): the
    absolute terms of the right-hand side and of ``M`` times ``z``, carried through ``|Q| |M^-1|``, plus ``|v|`` and
    ``|Q| |z|``. A backward-stable evaluation errs by a small multiple of ``n eps`` times this (Skeel's componentwise
    bound), which far from the survivors, or between close ones, is much larger than ``|D|``."""
    n = len(knots)
    q, r, h = _reinsch_parts(knots)
    v, c = np.zeros((n, len(points))), np.zeros((n, len(points)))
    for p, x in enumerate(points):
        i = min(max(int(np.searchsorted(knots, x, side="right")) - 1, 0), n - 2)
        a, b = (knots[i + 1] - x) / h[i], (x - knots[i]) / h[i]
        v[i, p], v[i + 1, p] = a, b
        outside = a * b < 0
        c[i, p] = (-a if outside else a**3 - a) * h[i] ** 2 / 6
        c[i + 1, p] = (-b if outside else b**3 - b) * h[i] ** 2 / 6
    if n <= 2:
        return np.abs(v).T
    mu = n * lam
    inverse = np.linalg.inv(r + mu * q.T @ q)
    z = inverse @ (c[1:-1] - mu * q.T @ v)
    residual_terms = (
        np.abs(c[1:-1]) + mu * np.abs(q.T) @ np.abs(v) + (np.abs(r) + mu * np.abs(q.T) @ np.abs(q)) @ np.abs(z)
    )
    return (np.abs(v) + np.abs(q) @ np.abs(z) + np.abs(q) @ np.abs(inverse) @ residual_terms).T


def csaps_reference(knots: np.ndarray, points: np.ndarray, lam: float) -> np.ndarray:
    """``(P, n)`` matrix from csaps with p = 1 / (1 + n lam), for points inside the hull of the knots."""
    from csaps import CubicSmoothingSpline

    n = len(knots)
    spline = CubicSmoothingSpline(knots, np.eye(n), smooth=1.0 / (1.0 + n * lam))
    return np.asarray(spline(points)).T


EPS = 2.0**-53


def spline_error(knots: np.ndarray, points: np.ndarray, lam: float) -> np.ndarray:
    """Bound on the error of a float64 smoothing-spline matrix: ``4 n (1 + log2 n) eps`` times its componentwise
    rounding scale (:func:`reinsch_terms`; the log for the levels of the nested-dissection solve)."""
    n = len(knots)
    levels = 1.0 + float(np.log2(n))  # the nested-dissection solve's levels, each adding its roundings
    return 4 * n * levels * EPS * reinsch_terms(knots, points, lam)


def berrut_error(nodes: np.ndarray, points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Bound on the error of Berrut's weights ``w_j / S``, ``S = sum_j w_j``, on both sides (code and formula): the
    sum's rounding ``n eps sum |w_j| / |S|`` relative to each entry, plus a few roundings of each weight."""
    n = len(nodes)
    with np.errstate(divide="ignore"):
        weights = np.abs(1.0 / (points[:, None] - nodes[None, :]))
    weights[~np.isfinite(weights)] = 0.0  # a point on a node: its row is exact
    signed = np.where(np.arange(n) % 2 == 0, 1.0, -1.0) * weights
    spread = weights.sum(-1, keepdims=True) / np.maximum(np.abs(signed.sum(-1, keepdims=True)), 1e-300)
    return 2 * (n + 4) * EPS * spread * np.abs(matrix)


def exact_lagrange(nodes: np.ndarray, points: np.ndarray) -> np.ndarray:
    """The Lagrange basis ``L_j(x_p)`` in exact rational arithmetic, rounded once to float64."""
    nodes_q, points_q = [Fraction(float(t)) for t in nodes], [Fraction(float(x)) for x in points]
    out = np.empty((len(points_q), len(nodes_q)))
    for p, x in enumerate(points_q):
        for j, t_j in enumerate(nodes_q):
            value = Fraction(1)
            for m, t_m in enumerate(nodes_q):
                if m != j:
                    value *= (x - t_m) / (t_j - t_m)
            out[p, j] = float(value)
    return out


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
