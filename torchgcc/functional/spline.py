"""Cubic smoothing splines as linear maps, batched, in the Reinsch form.

For knots ``t_1 < ... < t_n`` and data ``y_i`` the cubic smoothing spline is

    u = argmin (1/n) sum_i (y_i - u(t_i))^2 + lam * int u''(t)^2 dt,

a natural cubic spline with knots ``t`` (linear beyond the outermost knots). ``lam = 0`` gives the natural
interpolating spline. ``u`` is linear in ``y``, so its values at any points are ``D @ y`` for a matrix ``D`` that
depends only on the knots, the points and ``lam``; :func:`smoothing_spline_matrix` returns that matrix.

Following Green and Silverman (1994), with ``h_i = t_{i+1} - t_i``, the tridiagonal ``Q`` (n x n-2) of second
divided differences, the tridiagonal ``R`` (n-2 x n-2) and ``mu = n * lam``:

    (R + mu Q^T Q) gamma = Q^T y,      g = y - mu Q gamma,

where ``g`` are the fitted values and ``gamma`` the second derivatives at the interior knots. Between knots ``u`` is
the cubic in ``(g, gamma)``; outside it continues linearly. Everything is float64 and O(n * P) for P points.
"""

from __future__ import annotations

from typing import Union

import torch

from torchgcc.functional.banded import pentadiagonal_ldl, pentadiagonal_solve

__all__ = ["smoothing_spline_matrix"]

Lam = Union[float, torch.Tensor]


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
    batch = torch.broadcast_shapes(knots.shape[:-1], points.shape[:-1], lam.shape)
    knots = knots.expand(batch + (n,)).contiguous()
    points = points.expand(batch + points.shape[-1:]).contiguous()
    mu = (n * lam).expand(batch)

    h = knots.diff(dim=-1)
    if not (h > 0).all():
        raise ValueError("knots must be strictly increasing (distinct and sorted)")

    # Interval of each point: knots[idx] <= x < knots[idx + 1], clamped to the end intervals.
    idx = (torch.searchsorted(knots, points, right=True) - 1).clamp(0, n - 2)
    t_left = knots.gather(-1, idx)
    h_at = h.gather(-1, idx)
    a = (t_left + h_at - points) / h_at  # weight of g[idx]
    b = (points - t_left) / h_at  # weight of g[idx + 1]
    # Cubic terms vanish outside the knots, where the natural spline is the chord line plus the end slope term.
    outside = (a < 0) | (b < 0)
    c_a = torch.where(outside, -a, a**3 - a) * h_at**2 / 6
    c_b = torch.where(outside, -b, b**3 - b) * h_at**2 / 6

    shape = batch + (points.shape[-1], n)
    col = idx.unsqueeze(-1)
    values = knots.new_zeros(shape).scatter(-1, col, a.unsqueeze(-1)).scatter(-1, col + 1, b.unsqueeze(-1))
    if n == 2:
        return values
    curvature = knots.new_zeros(shape).scatter(-1, col, c_a.unsqueeze(-1)).scatter(-1, col + 1, c_b.unsqueeze(-1))
    curvature = curvature[..., 1:-1]

    # Bands of Q (column j holds rows j, j + 1, j + 2) and of R + mu Q^T Q.
    inv_h = 1.0 / h
    q_lo, q_mid, q_hi = inv_h[..., :-1], -(inv_h[..., :-1] + inv_h[..., 1:]), inv_h[..., 1:]
    mu_ = mu.unsqueeze(-1)
    diag = (h[..., :-1] + h[..., 1:]) / 3 + mu_ * (q_lo**2 + q_mid**2 + q_hi**2)
    off1 = h[..., 1:-1] / 6 + mu_ * (q_mid[..., :-1] * q_lo[..., 1:] + q_hi[..., :-1] * q_mid[..., 1:])
    off2 = mu_ * (q_hi[..., :-2] * q_lo[..., 2:])

    # Row of D for point x: d = a_x + Q M^{-1} (c_x - mu Q^T a_x), M = R + mu Q^T Q.
    qt_values = values[..., :-2] * q_lo.unsqueeze(-2) + values[..., 1:-1] * q_mid.unsqueeze(-2) + values[..., 2:] * q_hi.unsqueeze(-2)
    rhs = (curvature - mu_.unsqueeze(-1) * qt_values).transpose(-1, -2)
    z = pentadiagonal_solve(pentadiagonal_ldl(diag, off1, off2), rhs).transpose(-1, -2)  # (..., P, n - 2)
    zero = z.new_zeros(z.shape[:-1] + (2,))
    correction = (
        torch.cat([z * q_lo.unsqueeze(-2), zero], dim=-1)
        + torch.cat([zero[..., :1], z * q_mid.unsqueeze(-2), zero[..., :1]], dim=-1)
        + torch.cat([zero, z * q_hi.unsqueeze(-2)], dim=-1)
    )
    return values + correction
