"""GCV scores of cubic smoothing splines for many candidate lambdas, in O(m) per candidate after one O(m^3 + m^2 d)
transform per group, without forming hat matrices.

For knots ``t`` (``n`` points, ``m = n - 2`` interior), data ``y`` ``(n, d)`` and ``mu = n * lam`` (Reinsch form of
:mod:`torchgcc.functional.spline`: ``R`` tridiagonal, ``Q`` the ``(n, m)`` second-difference matrix,
``M = R + mu Q^T Q``), the fitted values are ``g = y - mu Q M^-1 Q^T y`` and the hat matrix is
``H = I - mu Q M^-1 Q^T``. With the Cholesky factor ``R = L L^T`` and the eigendecomposition
``L^-1 Q^T Q L^-T = U diag(kappa) U^T`` (Demmler-Reinsch), ``M = L U (I + mu kappa) U^T L^T``, so with
``w = U^T L^-1 Q^T y`` (one ``(m, m) x (m, d)`` product per group) every candidate costs O(m):

    ||y - g||^2 = mu^2 sum_i kappa_i ||w_i||^2 / (1 + mu kappa_i)^2,
    tr(H)       = n - mu sum_i kappa_i / (1 + mu kappa_i).

The GCV score is ``(1/n) ||y - g||^2 / (1 - tr(H)/n)^2``, the criterion of :func:`torchgcc.functional.gcv_scores`.
Everything runs in float64.
"""

from __future__ import annotations

import torch

__all__ = ["spline_gcv_scores"]


def spline_gcv_scores(knots: torch.Tensor, y: torch.Tensor, lams: torch.Tensor) -> torch.Tensor:
    """GCV scores ``(G, L)`` for knots ``(G, n)`` (increasing, ``n >= 4``), data ``(G, n, d)`` and candidate
    smoothing parameters ``lams`` ``(L,)`` (mean-normalised, ``> 0``)."""
    knots, y = knots.to(torch.float64), y.to(torch.float64)
    n = knots.shape[-1]
    if n < 4:
        raise ValueError(f"spline GCV needs at least 4 knots, got {n}")
    m = n - 2
    h = knots.diff(dim=-1)  # (G, n - 1)
    inv_h = 1.0 / h
    q_lo, q_mid, q_hi = inv_h[:, :-1], -(inv_h[:, :-1] + inv_h[:, 1:]), inv_h[:, 1:]  # (G, m): column r of Q
    cols = torch.arange(m, device=knots.device)
    Q = knots.new_zeros(knots.shape[0], n, m)
    Q[:, cols, cols], Q[:, cols + 1, cols], Q[:, cols + 2, cols] = q_lo, q_mid, q_hi
    R = torch.diag_embed((h[:, :-1] + h[:, 1:]) / 3) + torch.diag_embed(h[:, 1:-1] / 6, 1) \
        + torch.diag_embed(h[:, 1:-1] / 6, -1)
    chol = torch.linalg.cholesky(R)  # R is strictly diagonally dominant: positive definite
    half = torch.linalg.solve_triangular(chol, Q.mT, upper=False)  # L^-1 Q^T  (G, m, n)
    kappa, U = torch.linalg.eigh(half @ half.mT)  # L^-1 Q^T Q L^-T
    kappa = kappa.clamp_min(0)
    transform = torch.linalg.solve_triangular(chol.mT, U, upper=True).mT  # U^T L^-1  (G, m, m)
    w2 = (transform @ (Q.mT @ y)).pow(2).sum(dim=-1)  # (G, m): ||w_i||^2
    mu = (n * lams.to(torch.float64)).view(1, -1, 1)  # (1, L, 1)
    kappa = kappa.unsqueeze(1)  # (G, 1, m)
    rss = (mu.pow(2) * kappa * w2.unsqueeze(1) / (1 + mu * kappa).pow(2)).sum(dim=-1) / n  # (G, L)
    trace = n - (mu * kappa / (1 + mu * kappa)).sum(dim=-1)
    return rss / (1 - trace / n) ** 2
