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
    # The row of D for a point x is d = v + Q M^{-1} (c - mu Q^T v), M = R + mu Q^T Q, where v holds the weights of
    # the knot values (a, b) and c those of the interior second derivatives. v, c and Q^T v are sparse (at most four
    # entries near idx), so the right-hand side is scattered directly; only the solve's output is dense.
    if n == 2:
        return _add_pair_(knots.new_zeros(batch + (n, points.shape[-1])), idx, a, b).transpose(-1, -2)
    m = n - 2
    # Cubic terms vanish outside the knots, where the natural spline is the chord line plus the end slope term.
    outside = (a < 0) | (b < 0)
    c_a = torch.where(outside, -a, a**3 - a) * h_at**2 / 6  # weight of gamma at knot idx
    c_b = torch.where(outside, -b, b**3 - b) * h_at**2 / 6  # weight of gamma at knot idx + 1

    # Column j of Q (interior knot j + 1) holds q_lo[j], q_mid[j], q_hi[j] in rows j, j + 1, j + 2.
    inv_h = 1.0 / h
    q_lo, q_mid, q_hi = inv_h[..., :-1], -(inv_h[..., :-1] + inv_h[..., 1:]), inv_h[..., 1:]
    mu_ = mu.unsqueeze(-1)
    diag = (h[..., :-1] + h[..., 1:]) / 3 + mu_ * (q_lo**2 + q_mid**2 + q_hi**2)
    off1 = h[..., 1:-1] / 6 + mu_ * (q_mid[..., :-1] * q_lo[..., 1:] + q_hi[..., :-1] * q_mid[..., 1:])
    off2 = mu_ * (q_hi[..., :-2] * q_lo[..., 2:])

    # Right-hand side entries at interior columns j = idx - 2 .. idx + 1, written into a copy padded by two
    # columns on each side so that out-of-range entries fall into the padding.
    pad = torch.nn.functional.pad
    lo, mid, hi = (pad(band, (2, 2)) for band in (q_lo, q_mid, q_hi))

    def at(band: torch.Tensor, shift: int) -> torch.Tensor:  # band[idx + shift] of the padded band
        return band.gather(-1, idx + 2 + shift)

    entries = torch.stack(
        [
            -mu_ * at(hi, -2) * a,
            c_a - mu_ * (at(mid, -1) * a + at(hi, -1) * b),
            c_b - mu_ * (at(lo, 0) * a + at(mid, 0) * b),
            -mu_ * at(lo, 1) * b,
        ],
        dim=-2,
    )  # (..., 4, P)
    columns = idx.unsqueeze(-2) + torch.arange(4, device=idx.device).unsqueeze(-1)  # padded column index
    rhs = knots.new_zeros(batch + (m + 4, points.shape[-1])).scatter(-2, columns, entries)[..., 2 : m + 2, :]
    z = pentadiagonal_solve(pentadiagonal_ldl(diag, off1, off2), rhs)  # (..., m, P)

    # D^T = Q z + (a, b) scattered at rows idx, idx + 1: row r of Q z is q_lo[r] z[r] + q_mid[r-1] z[r-1] + q_hi[r-2]
    # z[r-2].
    rows = z.new_zeros(batch + (n, points.shape[-1]))
    rows[..., :m, :].addcmul_(q_lo.unsqueeze(-1), z)
    rows[..., 1 : m + 1, :].addcmul_(q_mid.unsqueeze(-1), z)
    rows[..., 2:, :].addcmul_(q_hi.unsqueeze(-1), z)
    return _add_pair_(rows, idx, a, b).transpose(-1, -2)


def _add_pair_(matrix: torch.Tensor, idx: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Add ``a`` at row ``idx`` and ``b`` at row ``idx + 1`` of every column of ``matrix`` ``(..., n, P)``, in place."""
    row = idx.unsqueeze(-2)
    return matrix.scatter_add_(-2, row, a.unsqueeze(-2)).scatter_add_(-2, row + 1, b.unsqueeze(-2))
