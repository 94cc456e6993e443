"""Exact leave-one-out cross-validation of cubic smoothing splines, many candidates at once.

For a linear smoother with hat matrix ``H`` the fit to all results but ``y_i``, evaluated at knot ``i``, misses
``y_i`` by ``e_i = (y_i - (H y)_i) / (1 - H_ii)`` (exactly: the smoothing spline of the other results is the one
whose value at knot ``i`` replaces ``y_i``; Craven and Wahba, 1979). The leave-one-out score of a candidate is

    V_LOO = (1/n) sum_i ||e_i||^2.

Generalized cross-validation (:mod:`torchgcc.functional.gcv`) replaces every ``1 - H_ii`` by their mean
``1 - tr(H)/n``; the two agree where the leverages are about equal (evenly spaced knots, away from the ends), not
on GCC's: on Chebyshev-Lobatto worker points with random stragglers ``1 - H_ii`` spans orders of magnitude (4e-4 to
0.56 at N = 32, S = 16 and bandwidth ratio 0.1). ``benchmarks/lambda_curves.py`` compares the two choices where the
default smoothing misses.

With the Reinsch form of :mod:`torchgcc.functional.spline` (``M = R + mu Q^T Q``, ``mu = n lam``),
``y - H y = mu Q M^-1 Q^T y`` and ``I - H = mu Q M^-1 Q^T``, so ``mu`` cancels:

    e_i = (Q M^-1 Q^T y)_i / (Q M^-1 Q^T)_ii,

well defined at ``mu = 0`` too (the interpolating spline of the other results). With ``M = L L^T`` and
``W = L^-1 Q^T``, ``(Q M^-1 Q^T)_ii`` is the squared norm of column ``i`` of ``W`` and
``Q M^-1 Q^T y = W^T L^-1 Q^T y``: one dense Cholesky factor per group and candidate, ``O(n^3)`` work (the pooled
choice scores at most about 1024 results, :data:`torchgcc.codes.gcc.GCV_POOL_RESULTS`) and no host reads. The scores
are computed on ``y`` normalised as :func:`~torchgcc.functional.gcv.gcv_scores` does (each group weighs alike;
invariant to the data's scale).
"""

from __future__ import annotations

import torch

from torchgcc.functional.gcv import candidate_systems, dense_systems
from torchgcc.functional.spline import apply_qt

__all__ = ["loo_errors", "loo_scores"]


def loo_errors(knots: torch.Tensor, counts: torch.Tensor, y: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """Each knot's leave-one-out error ``||e_i||^2`` ``(B, L, W)`` for every candidate ``mu`` and knot set.

    Args:
        knots: ``(B, W)`` strictly increasing; the first ``counts[b]`` are set ``b``'s knots, the rest padding.
        counts: ``(B,)`` knots per set.
        y: ``(B, W, d)`` data at the knots (the padding rows are ignored).
        mu: ``(B, L)`` candidates ``n * lam`` per set, ``>= 0``.

    Returns:
        ``(B, L, W)`` float64, zero at the padding and where a knot's left-out error is undefined (fewer than three
        knots: no leverage below one). No host reads.
    """
    width, candidates = knots.shape[1], mu.shape[1]
    plan, r, _, bands, z = candidate_systems(knots, counts, y, mu)
    system = dense_systems(plan, bands)
    valid = torch.arange(width, device=knots.device) < counts.unsqueeze(-1)
    own = torch.nn.functional.pad(valid, (0, plan.width - width))
    identity = torch.diag_embed(own.to(torch.float64))  # the set's knots only
    qt = torch.where(r.rows, apply_qt(r, identity), 0.0)  # (B, size, plan.width): Q^T
    factor = torch.linalg.cholesky_ex(system).L  # (B, L, size, size)
    w = torch.linalg.solve_triangular(factor, qt.unsqueeze(1).expand(-1, candidates, -1, -1), upper=False)
    wz = torch.linalg.solve_triangular(factor, z.unsqueeze(1).expand(-1, candidates, -1, -1), upper=False)
    residual = w.mT @ wz  # (B, L, plan.width, d): (Q M^-1 Q^T y)
    leverage = w.pow(2).sum(-2)  # (B, L, plan.width): (Q M^-1 Q^T)_ii
    usable = own.unsqueeze(1) & (leverage > 0)
    errors = residual.pow(2).sum(-1) / torch.where(usable, leverage, 1.0).square()
    return torch.where(usable, errors, 0.0)[..., :width]


def loo_scores(knots: torch.Tensor, counts: torch.Tensor, y: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """Leave-one-out scores ``(B, L)`` of every candidate ``mu`` for every knot set: the mean over each set's knots of
    :func:`loo_errors` (same arguments).

    Returns:
        ``(B, L)`` float64; a set whose scores do not depend on ``mu`` (fewer than four knots, or data on a line)
        gets a constant row. No host reads.
    """
    return loo_errors(knots, counts, y, mu).sum(-1) / counts.unsqueeze(-1).clamp_min(1)
