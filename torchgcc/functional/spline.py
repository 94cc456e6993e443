"""Cubic smoothing splines as linear maps, batched over knot sets of different sizes, in the Reinsch form.

For knots ``t_1 < ... < t_n`` and data ``y_i`` the cubic smoothing spline is

    u = argmin (1/n) sum_i (y_i - u(t_i))^2 + lam * int u''(t)^2 dt,

a natural cubic spline with knots ``t`` (linear beyond the outermost knots). ``lam = 0`` gives the natural
interpolating spline. ``u`` is linear in ``y``, so its values at any points are ``D @ y`` for a matrix ``D`` that
depends only on the knots, the points and ``lam``; :func:`smoothing_spline_matrix` returns that matrix.

Following Green and Silverman (1994), with ``h_i = t_{i+1} - t_i``, the tridiagonal ``Q`` (n x n-2) of second
divided differences, the tridiagonal ``R`` (n-2 x n-2) and ``mu = n * lam``:

    (R + mu Q^T Q) gamma = Q^T y,      g = y - mu Q gamma,

where ``g`` are the fitted values and ``gamma`` the second derivatives at the interior knots. Between knots ``u`` is
the cubic in ``(g, gamma)``; outside it continues linearly. The row of ``D`` for a point ``x`` is
``v + Q M^-1 (c - mu Q^T v)``, ``M = R + mu Q^T Q``, where ``v`` and ``c`` hold the weights of the knot values and of
the interior second derivatives in the cubic at ``x`` (at most two entries each), so the solve has one right-hand
side per point.

:func:`padded_spline_matrices` is the batched core behind every spline code: knot sets of ``n_b`` knots padded to a
common width, their systems in one padded layout (:func:`reinsch_bands`, :mod:`torchgcc.functional.banded`), one
solve for the whole batch. Everything is float64.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

import torch

from torchgcc.functional.banded import PentadiagonalPlan, pentadiagonal_plan, solve_pentadiagonal

__all__ = [
    "ReinschBands",
    "apply_q",
    "apply_qt",
    "padded_spline_matrices",
    "reinsch_bands",
    "smoothing_spline_matrix",
]

Lam = Union[float, torch.Tensor]


class ReinschBands(NamedTuple):
    """The Reinsch system ``M = R + mu Q^T Q`` of padded knot sets in a padded layout of ``size`` interior rows.

    Attributes:
        h: ``(B, size + 2)`` knot spacings ``h_j = t_{j+1} - t_j`` (1 past the knots given).
        inv_h: ``(B, size + 2)`` their inverses; column ``j`` of ``Q`` (interior knot ``j + 1``) holds
            ``inv_h[j]``, ``-(inv_h[j] + inv_h[j + 1])``, ``inv_h[j + 1]`` in rows ``j``, ``j + 1``, ``j + 2``.
        diag, off1, off2: ``(B, size)`` bands of ``M`` (identity in the rows ``j >= n - 2`` of each set, the format
            of :func:`torchgcc.functional.banded.solve_pentadiagonal`).
        rows: ``(B, size)`` bool, the rows of each set's own system, ``j < n - 2``.
    """

    h: torch.Tensor
    inv_h: torch.Tensor
    diag: torch.Tensor
    off1: torch.Tensor
    off2: torch.Tensor
    rows: torch.Tensor


def reinsch_bands(
    knots: torch.Tensor,
    counts: torch.Tensor,
    mu: torch.Tensor,
    size: int,
    inverse_weights: Optional[torch.Tensor] = None,
) -> ReinschBands:
    """:class:`ReinschBands` of ``(B, W)`` strictly increasing knots whose first ``counts`` ``(B,)`` are each set's
    (the rest padding), for ``mu`` ``(B,)`` and a layout of ``size >= W - 2`` rows.

    With ``inverse_weights`` ``(B, W)`` (``1 / w_i`` of the weighted objective ``(1/n) sum_i w_i (y_i - u(t_i))^2``),
    the system is ``R + mu Q^T W^-1 Q`` (Green and Silverman 1994, sec. 3.5)."""
    h = torch.nn.functional.pad(knots.diff(dim=-1), (0, size + 3 - knots.shape[-1]), value=1.0)
    inv_h = 1.0 / h
    lo, hi, after = inv_h[:, :size], inv_h[:, 1 : size + 1], inv_h[:, 2:]
    mid, mid_next = -(lo + hi), -(hi + after)
    if inverse_weights is None:
        s0 = s1 = s2 = 1.0
    else:  # Q's column j has rows j, j + 1, j + 2
        s = torch.nn.functional.pad(inverse_weights.to(torch.float64), (0, size + 2 - knots.shape[-1]), value=1.0)
        s0, s1, s2 = s[:, :size], s[:, 1 : size + 1], s[:, 2 : size + 2]
    mu = mu.unsqueeze(-1)
    row = torch.arange(size, device=knots.device)
    last = counts.unsqueeze(-1) - 2  # the set's system has rows 0 .. n - 3
    rows = row < last
    diag = (h[:, :size] + h[:, 1 : size + 1]) / 3 + mu * (lo * lo * s0 + mid * mid * s1 + hi * hi * s2)
    diag = torch.where(rows, diag, 1.0)
    off1 = torch.where(row < last - 1, h[:, 1 : size + 1] / 6 + mu * (mid * hi * s1 + hi * mid_next * s2), 0.0)
    off2 = torch.where(row < last - 2, mu * hi * after * s2, 0.0)
    return ReinschBands(h, inv_h, diag, off1, off2, rows)


def apply_q(inv_h: torch.Tensor, z: torch.Tensor, width: int) -> torch.Tensor:
    """``Q z`` ``(B, width, r)`` for ``z`` ``(B, size, r)`` (zero past each set's system): row ``r`` of ``Q z`` is
    ``lo[r] z[r] + mid[r - 1] z[r - 1] + hi[r - 2] z[r - 2]`` with ``lo = inv_h[:size]``, ``hi = inv_h[1:size + 1]``
    and ``mid = -(lo + hi)`` (:class:`ReinschBands`)."""
    size = z.shape[1]
    lo, hi = inv_h[:, :size], inv_h[:, 1 : size + 1]

    def shifted(values: torch.Tensor, by: int) -> torch.Tensor:  # values[r - by] at row r, rows 0 .. width - 1
        return torch.nn.functional.pad(values, (by, max(width - size - by, 0)))[:, :width, None]

    z = torch.nn.functional.pad(z, (0, 0, 2, max(width - size, 0)))  # z[r - 2] at row r
    return (
        (shifted(lo, 0) * z[:, 2 : width + 2])
        .addcmul_(shifted(-(lo + hi), 1), z[:, 1 : width + 1])
        .addcmul_(shifted(hi, 2), z[:, :width])
    )


def apply_qt(bands: ReinschBands, y: torch.Tensor) -> torch.Tensor:
    """``Q^T y`` ``(B, size, r)`` for data ``y`` ``(B, W, r)`` at the knots, zero past each set's system."""
    size = bands.diag.shape[1]
    y = torch.nn.functional.pad(y, (0, 0, 0, size + 2 - y.shape[1]))
    lo, hi = bands.inv_h[:, :size].unsqueeze(-1), bands.inv_h[:, 1 : size + 1].unsqueeze(-1)
    product = lo * y[:, :size] - (lo + hi) * y[:, 1 : size + 1] + hi * y[:, 2 : size + 2]
    return torch.where(bands.rows.unsqueeze(-1), product, 0.0)


def padded_spline_matrices(
    knots: torch.Tensor,
    counts: torch.Tensor,
    points: torch.Tensor,
    mu: torch.Tensor,
    plan: Optional[PentadiagonalPlan] = None,
) -> torch.Tensor:
    """Matrices mapping data at each set's knots to its smoothing spline's values at ``points``.

    Args:
        knots: ``(B, W)`` float64, strictly increasing; the first ``counts[b]`` of row ``b`` are its knots, the
            rest padding beyond every point (:func:`torchgcc.functional.survivors.compact_survivors` makes them).
        counts: ``(B,)`` knots per set, ``n >= 2`` (no check: fewer give meaningless values, never an error).
        points: ``(P,)`` or ``(B, P)`` evaluation points (inside or outside the knots).
        mu: ``(B,)`` ``n * lam`` per set.
        plan: the :func:`~torchgcc.functional.banded.pentadiagonal_plan` of ``W - 2`` unknowns (built here when
            None; callers decoding many batches keep it).

    Returns:
        ``(B, P, W)`` float64, zero in the padding columns. No host reads, the same launches for any batch.
    """
    batch, width = knots.shape
    plan = pentadiagonal_plan(max(width - 2, 1), knots.device) if plan is None else plan
    size = plan.size
    bands = reinsch_bands(knots, counts, mu, size)
    # interval of each point, knots[idx] <= x < knots[idx + 1], clamped to the set's end intervals
    x = points.to(torch.float64).expand(batch, -1).contiguous()
    idx = torch.searchsorted(knots, x, right=True) - 1
    idx = torch.minimum(idx.clamp(min=0), (counts.unsqueeze(-1) - 2).clamp(min=0))
    t_left = knots.gather(-1, idx)
    h_at = bands.h.gather(-1, idx)
    a = (t_left + h_at - x) / h_at  # weight of the fitted value at knot idx
    b = (x - t_left) / h_at  # ... at knot idx + 1
    outside = (a < 0) | (b < 0)  # beyond the knots the natural spline is the chord plus the end slope: a line
    c_a = torch.where(outside, -a, a * a * a - a) * h_at * h_at / 6  # weight of gamma at knot idx
    c_b = torch.where(outside, -b, b * b * b - b) * h_at * h_at / 6  # weight of gamma at knot idx + 1
    # right-hand sides c - mu Q^T v: entries in interior rows idx - 2 .. idx + 1, from inv_h[idx - 1 .. idx + 1]
    near = bands.inv_h.gather(-1, torch.stack([(idx - 1).clamp(min=0), idx, idx + 1], -1).flatten(1))
    before, at, after = near.view(batch, -1, 3).unbind(-1)
    mu_ = mu.unsqueeze(-1)
    entries = torch.stack(
        [
            -mu_ * before * a,
            c_a + mu_ * ((before + at) * a - at * b),
            c_b - mu_ * (at * a - (at + after) * b),
            -mu_ * after * b,
        ],
        1,
    )  # (B, 4, P)
    row = idx.unsqueeze(1) + torch.arange(-2, 2, device=idx.device).view(1, 4, 1)
    inside = (row >= 0) & torch.gather(bands.rows, 1, row.clamp(0, size - 1).flatten(1)).view_as(row)
    rhs = knots.new_zeros(batch, size, x.shape[-1]).scatter_add_(  # add: clamped rows may repeat, with zeros
        1, row.clamp(0, size - 1), torch.where(inside, entries, 0.0)
    )
    z = solve_pentadiagonal(bands.diag, bands.off1, bands.off2, rhs, plan)  # (B, size, P), zero in the padding
    # D^T = Q z + (a, b) at rows idx, idx + 1
    columns = apply_q(bands.inv_h, z, width)
    columns.scatter_add_(1, idx.unsqueeze(1), a.unsqueeze(1)).scatter_add_(1, idx.unsqueeze(1) + 1, b.unsqueeze(1))
    return columns.transpose(1, 2)


def smoothing_spline_matrix(knots: torch.Tensor, points: torch.Tensor, lam: Lam = 0.0) -> torch.Tensor:
    """Matrix mapping data at ``knots`` to the smoothing spline's values at ``points``.

    Args:
        knots: ``(..., n)`` strictly increasing knots, ``n >= 2``.
        points: ``(..., P)`` evaluation points (any order, inside or outside the knots).
        lam: smoothing parameter ``>= 0`` of the mean-normalised objective above; a float or a tensor that
            broadcasts against the batch shape ``...``.

    Returns:
        ``(..., P, n)`` float64 matrix ``D`` with ``u(points) = D @ y``. Rows sum to one and straight lines are
        reproduced exactly. Equals ``scipy.interpolate.make_smoothing_spline(knots, I, lam=n * lam)(points)``
        between the outermost knots.
    """
    knots = knots.to(torch.float64)
    points = points.to(torch.float64)
    lam = torch.as_tensor(lam, dtype=torch.float64, device=knots.device)
    n = knots.shape[-1]
    if n < 2:
        raise ValueError(f"a cubic smoothing spline needs at least 2 knots, got {n}")
    if (lam < 0).any() or not torch.isfinite(lam).all():
        raise ValueError("lam must be finite and >= 0")
    if not (knots.diff(dim=-1) > 0).all():
        raise ValueError("knots must be strictly increasing (distinct and sorted)")
    batch = torch.broadcast_shapes(knots.shape[:-1], points.shape[:-1], lam.shape)
    flat_knots = knots.expand(batch + (n,)).reshape(-1, n)
    flat_points = points.expand(batch + points.shape[-1:]).reshape(-1, points.shape[-1])
    mu = (n * lam).expand(batch).reshape(-1)
    counts = torch.full((flat_knots.shape[0],), n, device=knots.device)
    matrix = padded_spline_matrices(flat_knots, counts, flat_points, mu)
    return matrix.reshape(batch + (points.shape[-1], n))
