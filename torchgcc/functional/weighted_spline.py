"""Weighted cubic smoothing splines and per-worker robust weights (Huber with a MAD scale), batched.

The weighted smoothing spline minimises

    (1/n) sum_i w_i (y_i - u(t_i))^2 + lam * int u''(t)^2 dt,     w_i > 0,

and in the Reinsch form of :mod:`torchgcc.functional.spline` (Green and Silverman 1994, sec. 3.5), with
``mu = n * lam`` and ``W = diag(w)``:

    (R + mu Q^T W^-1 Q) gamma = Q^T y,      g = y - mu W^-1 Q gamma,

a pentadiagonal solve per group and output batch (two knots: the straight line through both). Unlike the unweighted
maps, the fit depends on the data through the weights, so it is computed as values rather than cached as a matrix.
"""

from __future__ import annotations

from typing import Union

import torch

from torchgcc.functional.banded import solve_pentadiagonal
from torchgcc.functional.spline import reinsch_bands, spline_plan

__all__ = ["weighted_smoothing_spline", "huber_weights"]

#: Consistency factor of the median absolute deviation for a normal distribution.
MAD_FACTOR = 1.4826


def weighted_smoothing_spline(
    knots: torch.Tensor, y: torch.Tensor, weights: torch.Tensor, points: torch.Tensor, lam: Union[float, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fit the weighted smoothing spline and evaluate it.

    Args:
        knots: ``(G, n)`` strictly increasing, ``n >= 2``.
        y: ``(G, n, d)`` data.
        weights: ``(G, n)`` positive weights.
        points: ``(P,)`` or ``(G, P)`` evaluation points (linear continuation beyond the outermost knots).
        lam: smoothing parameter ``>= 0`` (mean-normalised), a float or ``(G,)``.

    Returns:
        fitted values at the knots ``(G, n, d)`` and values at ``points`` ``(G, P, d)``, float64. Equals
        ``scipy.interpolate.make_smoothing_spline(knots, y, w=weights, lam=n * lam)`` inside the knots.
    """
    knots, y, weights = knots.to(torch.float64), y.to(torch.float64), weights.to(torch.float64)
    g_count, n = knots.shape
    if n < 2:
        raise ValueError(f"a weighted smoothing spline needs at least 2 knots, got {n}")
    if not (weights > 0).all():
        raise ValueError("weights must be positive (drop a point by leaving it out of the knots)")
    points = points.to(torch.float64).expand(g_count, -1).contiguous()
    if n == 2:  # no interior knot: the line through both points, whatever the weights and lambda
        b = ((points - knots[:, :1]) / (knots[:, 1:] - knots[:, :1])).unsqueeze(-1)
        return y, (1 - b) * y[:, :1] + b * y[:, 1:]
    mu = (n * torch.as_tensor(lam, dtype=torch.float64, device=knots.device)).expand(g_count)
    counts = torch.full((g_count,), n, device=knots.device)
    plan = spline_plan(n, knots.device)
    s = 1.0 / weights
    bands = reinsch_bands(knots, counts, mu, plan, inverse_weights=s)
    inv_h = bands.inv_h[:, : n - 1, 0]
    q_lo, q_mid, q_hi = inv_h[:, :-1], -(inv_h[:, :-1] + inv_h[:, 1:]), inv_h[:, 1:]  # column j: rows j, j+1, j+2
    qty = q_lo.unsqueeze(-1) * y[:, :-2] + q_mid.unsqueeze(-1) * y[:, 1:-1] + q_hi.unsqueeze(-1) * y[:, 2:]
    rhs = torch.nn.functional.pad(qty, (0, 0, 0, plan.size - (n - 2)))
    gamma = solve_pentadiagonal(bands.bands, rhs, plan.solve)[:, : n - 2]  # (G, n - 2, d)
    q_gamma = torch.zeros_like(y)
    q_gamma[:, :-2] += q_lo.unsqueeze(-1) * gamma
    q_gamma[:, 1:-1] += q_mid.unsqueeze(-1) * gamma
    q_gamma[:, 2:] += q_hi.unsqueeze(-1) * gamma
    fitted = y - mu.view(-1, 1, 1) * s.unsqueeze(-1) * q_gamma
    second = torch.nn.functional.pad(gamma, (0, 0, 1, 1))  # zero second derivative at the end knots

    h = bands.h[:, : n - 1, 0]
    idx = (torch.searchsorted(knots, points, right=True) - 1).clamp(0, n - 2)
    t_left, h_at = knots.gather(-1, idx), h.gather(-1, idx)
    a = (t_left + h_at - points) / h_at
    b = (points - t_left) / h_at
    outside = (a < 0) | (b < 0)  # beyond the knots: the chord plus the end-slope term, i.e. a straight line
    c_a = torch.where(outside, -a, a**3 - a) * h_at**2 / 6
    c_b = torch.where(outside, -b, b**3 - b) * h_at**2 / 6

    def take(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return values.gather(1, index.unsqueeze(-1).expand(-1, -1, values.shape[-1]))

    out = (
        a.unsqueeze(-1) * take(fitted, idx)
        + b.unsqueeze(-1) * take(fitted, idx + 1)
        + c_a.unsqueeze(-1) * take(second, idx)
        + c_b.unsqueeze(-1) * take(second, idx + 1)
    )
    return fitted, out


def huber_weights(residual_norms: torch.Tensor, *, tuning: float = 1.345, floor: float = 1e-8) -> torch.Tensor:
    """IRLS weights ``min(1, c * s / r_i)`` for residual norms ``(G, n)``, with ``s = 1.4826 * median_i r_i``.

    The residual norm of a worker combines all its outputs (one weight per worker). ``s`` is the MAD scale of
    residuals centred at zero; weights are floored at ``floor`` so that the weighted fit stays well posed.
    """
    scale = MAD_FACTOR * residual_norms.median(dim=-1, keepdim=True).values
    weights = (tuning * scale / residual_norms.clamp_min(torch.finfo(residual_norms.dtype).tiny)).clamp(max=1.0)
    return torch.where(residual_norms > 0, weights, torch.ones_like(weights)).clamp_min(floor)
