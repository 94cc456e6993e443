"""Generalized cross-validation (Craven and Wahba, 1979) of cubic smoothing splines, many candidates at once.

For a smoother with hat matrix ``H`` (fitted values ``H y`` at the ``n`` knots) the GCV score of data ``y``
``(n, d)`` is

    V = (1/n) ||y - H y||_F^2 / (1 - tr(H) / n)^2,

the criterion of ``scipy.interpolate.make_smoothing_spline(lam=None)``; the smoothing with the smallest score is
chosen. For the cubic smoothing spline with ``mu = n * lam`` (the Reinsch form of :mod:`torchgcc.functional.spline`,
``M = R + mu Q^T Q``), ``y - H y = mu Q M^-1 Q^T y`` and ``n - tr(H) = mu tr(M^-1 Q^T Q)``, so

    V(mu) = n ||Q M^-1 Q^T y||^2 / tr(M^-1 Q^T Q)^2,

well defined at ``mu = 0`` too (the limit of interpolation). Two exact routes:

- knot sets up to :data:`DEMMLER_REINSCH_MAX_WIDTH` wide: with ``R = L L^T`` and the Demmler-Reinsch basis
  ``L^-1 Q^T Q L^-T = U diag(kappa) U^T``, ``w_i = ||(U^T L^-1 Q^T y)_i||^2``,
  ``V(mu) = n sum_i kappa_i w_i / (1 + mu kappa_i)^2 / (sum_i kappa_i / (1 + mu kappa_i))^2``: one
  eigendecomposition per set (O(n^3), accurate to about 1e-10 relative at n = 128 on Chebyshev points), then O(n)
  per candidate;
- wider sets: every candidate's ``M`` factored by nested dissection (:mod:`torchgcc.functional.banded`), the
  numerator from one solve, the trace from the entries of ``M^-1`` within the band only (selected inversion).

The scores are computed on ``y`` divided by its norm, so the choice is invariant to the scale of the data (from
1e-300 to 1e300 alike).
"""

from __future__ import annotations

import torch

from torchgcc.functional.banded import (
    pentadiagonal_plan,
    solve_pentadiagonal,
)
from torchgcc.functional.spline import apply_q, apply_qt, reinsch_bands

__all__ = ["DEMMLER_REINSCH_MAX_WIDTH", "gcv_scores"]


#: Widest knot sets scored through the Demmler-Reinsch eigendecomposition (O(n^3) per set); wider ones go through the
#: nested-dissection factorisation of every candidate's system, O(n) per candidate (exact trace by selected inversion).
DEMMLER_REINSCH_MAX_WIDTH = 160


def gcv_scores(knots: torch.Tensor, counts: torch.Tensor, y: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """GCV scores ``(B, L)`` of every candidate ``mu`` for every knot set.

    Args:
        knots: ``(B, W)`` strictly increasing; the first ``counts[b]`` are set ``b``'s knots, the rest padding
            (:func:`torchgcc.functional.survivors.compact_survivors`).
        counts: ``(B,)`` knots per set.
        y: ``(B, W, d)`` data at the knots (the padding rows are ignored).
        mu: ``(B, L)`` candidates ``n * lam`` per set, ``>= 0``.

    Returns:
        ``(B, L)`` float64; a set whose scores do not depend on ``mu`` (fewer than four knots, or data on a line)
        gets a constant row.
    """
    batch, width = knots.shape
    valid = torch.arange(width, device=knots.device) < counts.unsqueeze(-1)
    y = torch.where(valid.unsqueeze(-1), y.to(torch.float64), 0.0)
    scale = y.abs().amax(dim=(1, 2), keepdim=True)  # two steps: the norm of 1e300 data would overflow
    y = y / torch.where(scale > 0, scale, 1.0)
    y = y / torch.linalg.vector_norm(y, dim=(1, 2), keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    mu = mu.to(torch.float64)
    if width <= DEMMLER_REINSCH_MAX_WIDTH:
        numerator, denominator = _demmler_reinsch(knots, counts, y, mu)
    else:
        numerator, denominator = _nested_dissection(knots, counts, y, mu)
    scores = counts.unsqueeze(-1) * numerator / denominator.square()
    return torch.where(denominator > 0, scores, 0.0)


def _demmler_reinsch(knots, counts, y, mu) -> tuple[torch.Tensor, torch.Tensor]:
    """``||Q M^-1 Q^T y||^2`` and ``tr(M^-1 Q^T Q)`` over ``mu^0``: the sums of the module docstring."""
    batch, width = knots.shape
    size = max(width - 2, 1)
    bands = reinsch_bands(knots, counts, mu.new_zeros(batch), size)  # mu = 0: the bands of R
    rows = torch.arange(size, device=knots.device)
    r_dense = (
        torch.diag_embed(bands.diag)
        + torch.diag_embed(bands.off1[:, :-1], 1)
        + torch.diag_embed(bands.off1[:, :-1], -1)
    )
    identity = torch.where(bands.rows.unsqueeze(1) & (rows.unsqueeze(-1) == rows), 1.0, 0.0)  # Q's own columns
    q_dense = apply_q(bands.inv_h, identity, width)  # (B, W, size)
    chol = torch.linalg.cholesky_ex(r_dense).L
    half = torch.linalg.solve_triangular(chol, q_dense.mT, upper=False)  # L^-1 Q^T  (B, size, W)
    kappa, basis = torch.linalg.eigh(half @ half.mT)
    kappa = kappa.clamp_min(0).unsqueeze(1)  # (B, 1, size)
    w = (basis.mT @ (half @ y)).pow(2).sum(-1).unsqueeze(1)  # (B, 1, size)
    shrink = 1 / (1 + mu.unsqueeze(-1) * kappa)  # (B, L, size)
    return (kappa * w * shrink * shrink).sum(-1), (kappa * shrink).sum(-1)


def _nested_dissection(knots, counts, y, mu) -> tuple[torch.Tensor, torch.Tensor]:
    """The same sums, every candidate's ``M = R + mu Q^T Q`` solved (with ``tr(M^-1 Q^T Q)``) by
    :func:`solve_pentadiagonal`."""
    batch, width = knots.shape
    plan = pentadiagonal_plan(width - 2, knots.device)
    r = reinsch_bands(knots, counts, mu.new_zeros(batch), plan.size)
    with_q = reinsch_bands(knots, counts, mu.new_ones(batch), plan.size)
    qq = [b - a for a, b in zip((r.diag, r.off1, r.off2), (with_q.diag, with_q.off1, with_q.off2))]  # Q^T Q
    candidates = mu.shape[1]
    system = [
        (a.unsqueeze(1) + mu.unsqueeze(-1) * q.unsqueeze(1)).flatten(0, 1) for a, q in zip((r.diag, r.off1, r.off2), qq)
    ]
    qty = apply_qt(r, y).repeat_interleave(candidates, 0)  # (B L, size, d)
    gamma, trace = solve_pentadiagonal(
        *system, qty, plan, trace_with=tuple(q.repeat_interleave(candidates, 0) for q in qq)
    )
    residual = apply_q(r.inv_h.repeat_interleave(candidates, 0), gamma, width).pow(2).sum((1, 2))
    return residual.view(batch, candidates), trace.view(batch, candidates)
