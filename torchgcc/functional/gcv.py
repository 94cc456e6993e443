"""Generalized cross-validation (Craven and Wahba, 1979) of cubic smoothing splines, many candidates at once.

For a smoother with hat matrix ``H`` (fitted values ``H y`` at the ``n`` knots) the GCV score of data ``y``
``(n, d)`` is

    V = (1/n) ||y - H y||_F^2 / (1 - tr(H) / n)^2,

the criterion of ``scipy.interpolate.make_smoothing_spline(lam=None)``; the smoothing with the smallest score is
chosen. For the cubic smoothing spline with ``mu = n * lam`` (the Reinsch form of :mod:`torchgcc.functional.spline`,
``M = R + mu Q^T Q``), ``y - H y = mu Q M^-1 Q^T y`` and ``n - tr(H) = mu tr(M^-1 Q^T Q)``, so

    V(mu) = n ||Q M^-1 Q^T y||^2 / tr(M^-1 Q^T Q)^2,

well defined at ``mu = 0`` too (the limit of interpolation). Every candidate's ``M`` is solved by nested
dissection (:mod:`torchgcc.functional.banded`), the trace from the entries of ``M^-1`` within the band only
(selected inversion). Only ``Z Z^T`` of ``Z = Q^T y`` enters the numerator, so when ``d`` exceeds the ``n - 2`` rows
of ``Z`` the solves take the Cholesky factor ``F`` of ``Z Z^T`` (``n - 2`` columns) in place of ``Z``: the work per
candidate is ``O(n min(d, n))`` after one ``O(n^2 d)`` Gram product, and nothing is read back to the host (an
eigendecomposition, the Demmler-Reinsch route, would be O(n) per candidate but ``torch.linalg.eigh`` reads its
error flag).

The scores are computed on ``y`` divided by its norm, so the choice is invariant to the scale of the data (from
1e-300 to 1e300 alike).
"""

from __future__ import annotations

import torch

from torchgcc.functional.banded import solve_pentadiagonal
from torchgcc.functional.spline import ReinschBands, SplinePlan, apply_q, apply_qt, reinsch_bands, spline_plan

__all__ = ["candidate_systems", "dense_systems", "gcv_scores", "gram_factor", "normalised"]

#: Relative jitter ``delta tr(Z Z^T) / (n - 2)`` on the diagonal of the Gram ``Z Z^T`` before its Cholesky factor is
#: taken (the Gram is only positive semi-definite, and its rounding errors are about ``sqrt(d) eps tr``): it moves
#: the numerator by at most ``delta`` times the condition number of ``M^-1 Q^T Q M^-1`` relative.
GRAM_JITTER = 1e-12


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
        gets a constant row. No host reads; the same launches for any batch.
    """
    batch, candidates = mu.shape
    plan, r, qq, bands, z = candidate_systems(knots, counts, y, mu)
    system = bands.flatten(0, 1)
    gamma, trace = solve_pentadiagonal(
        system, z.repeat_interleave(candidates, 0), plan.solve, trace_with=qq.repeat_interleave(candidates, 0)
    )
    fitted = gamma.new_zeros(batch * candidates, plan.width, z.shape[-1])
    fitted = apply_q(r, gamma, fitted)  # Q gamma
    numerator, denominator = fitted.pow(2).sum((1, 2)).view(batch, candidates), trace.view(batch, candidates)
    scores = counts.unsqueeze(-1) * numerator / denominator.square()
    return torch.where(denominator > 0, scores, 0.0)


def candidate_systems(
    knots: torch.Tensor, counts: torch.Tensor, y: torch.Tensor, mu: torch.Tensor
) -> tuple[SplinePlan, ReinschBands, torch.Tensor, torch.Tensor, torch.Tensor]:
    """What a cross-validation score of the candidates ``mu`` ``(B, L)`` solves, for knots and data as
    :func:`gcv_scores` takes them: the plan; the Reinsch bands ``r`` of ``R`` (``mu = 0``); ``Q^T Q``'s bands
    ``(B, size, 3)`` (zero in the padding); every candidate's ``M = R + mu Q^T Q`` bands ``(B, L, size, 3)``; and
    ``Z = Q^T y`` ``(B, size, d)`` of the :func:`normalised` data, zero past each set's system (its
    :func:`gram_factor` where ``d`` exceeds the system's size: only ``Z Z^T`` enters the scores). float64."""
    batch, width = knots.shape
    valid = torch.arange(width, device=knots.device) < counts.unsqueeze(-1)
    y = normalised(torch.where(valid.unsqueeze(-1), y.to(torch.float64), 0.0))
    mu = mu.to(torch.float64)
    plan = spline_plan(width, knots.device)
    y = torch.nn.functional.pad(y, (0, 0, 0, plan.width - width))
    r = reinsch_bands(knots, counts, mu.new_zeros(batch), plan)
    qq = reinsch_bands(knots, counts, mu.new_ones(batch), plan).bands - r.bands
    bands = r.bands.unsqueeze(1) + mu.view(batch, mu.shape[1], 1, 1) * qq.unsqueeze(1)
    z = torch.where(r.rows, apply_qt(r, y), 0.0)
    if z.shape[-1] > plan.size:
        z = gram_factor(z, r.rows[..., 0])
    return plan, r, qq, bands, z


def dense_systems(plan: SplinePlan, bands: torch.Tensor) -> torch.Tensor:
    """The symmetric pentadiagonal ``M`` of every candidate as dense matrices ``(B, L, size, size)``, from the bands
    ``(B, L, size, 3)`` :func:`candidate_systems` returns (for the dense factorisations of a few hundred knots at
    most that :mod:`torchgcc.functional.loo` and the benchmarks' scores need)."""
    system = torch.diag_embed(bands[..., 0])
    for offset in (1, 2):
        upper = torch.diag_embed(bands[..., : plan.size - offset, offset], offset=offset)
        system = system + upper + upper.mT
    return system


def normalised(y: torch.Tensor) -> torch.Tensor:
    """``y`` ``(B, W, d)`` float64 divided by its Frobenius norm per set (0 stays 0), in two steps: the norm of 1e300
    data would overflow."""
    scale = y.abs().amax(dim=(1, 2), keepdim=True)
    y = y / torch.where(scale > 0, scale, 1.0)
    return y / torch.linalg.vector_norm(y, dim=(1, 2), keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)


def gram_factor(z: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``F`` ``(B, size, size)`` with ``F F^T = Z Z^T`` (up to :data:`GRAM_JITTER`), zero in the rows past each set's
    system as ``z`` ``(B, size, d)`` is."""
    gram = z @ z.mT
    trace = gram.diagonal(dim1=1, dim2=2).sum(-1, keepdim=True)
    scale = torch.where(trace > 0, GRAM_JITTER * trace / rows.sum(-1, keepdim=True).clamp_min(1), 1.0)
    factor = torch.linalg.cholesky_ex(gram + torch.diag_embed(torch.where(rows, scale, 1.0))).L  # 1 in the padding
    return torch.where(rows.unsqueeze(-1) & (trace > 0).unsqueeze(-1), factor, 0.0)
