"""GCV scores of cubic smoothing splines for many candidate lambdas, without forming hat matrices.

For knots ``t`` (``n`` points, ``m = n - 2`` interior), data ``y`` ``(n, d)`` and ``mu = n * lam`` (Reinsch form of
:mod:`torchgcc.functional.spline`: ``R`` tridiagonal, ``Q`` the ``(n, m)`` second-difference matrix,
``M = R + mu Q^T Q`` pentadiagonal), the fitted values are ``g = y - mu Q M^-1 Q^T y`` and the hat matrix is
``H = I - mu Q M^-1 Q^T``. The GCV score is ``(1/n) ||y - g||^2 / (1 - tr(H)/n)^2``, the criterion of
:func:`torchgcc.functional.gcv_scores`. Two exact routes, chosen by ``n`` (everything in float64):

- ``n <= DEMMLER_REINSCH_MAX_KNOTS``: with ``R = L L^T`` and ``L^-1 Q^T Q L^-T = U diag(kappa) U^T``
  (Demmler-Reinsch), ``M = L U (I + mu kappa) U^T L^T``; with ``w = U^T L^-1 Q^T y`` (one ``(m, m) x (m, d)``
  product per group) every candidate costs O(m):
  ``||y - g||^2 = mu^2 sum_i kappa_i ||w_i||^2 / (1 + mu kappa_i)^2`` and ``tr(H) = n - mu sum_i kappa_i / (1 + mu
  kappa_i)``.
  Cheap for many outputs ``d``; the eigendecomposition costs O(m^3) and loses accuracy as the spread of ``kappa``
  grows with ``n`` (about 1e-10 relative at n = 128 on Chebyshev points, 5e-4 at n = 520), hence the limit.
- larger ``n``: a banded LDL^T of ``M`` per candidate, O(n d) per candidate for the residuals, and the central band
  (|i - j| <= 2) of ``M^-1`` by the backward recursion of Hutchinson and de Hoog (1985),
  ``S_ij = delta_ij / d_i - sum_{k = i+1}^{i+2} L_ki S_kj`` (j >= i), for ``tr(H) = n - mu sum_r (Q M^-1 Q^T)_rr``.
"""

from __future__ import annotations

import torch

from torchgcc.functional.banded import pentadiagonal_ldl, pentadiagonal_solve

__all__ = ["DEMMLER_REINSCH_MAX_KNOTS", "spline_gcv_scores"]

#: Largest number of knots scored through the Demmler-Reinsch eigendecomposition (above it: the banded recursion).
DEMMLER_REINSCH_MAX_KNOTS = 128


def spline_gcv_scores(knots: torch.Tensor, y: torch.Tensor, lams: torch.Tensor) -> torch.Tensor:
    """GCV scores ``(G, L)`` for knots ``(G, n)`` (increasing, ``n >= 4``), data ``(G, n, d)`` and candidate
    smoothing parameters ``lams`` ``(L,)`` (mean-normalised, ``> 0``)."""
    knots, y, lams = knots.to(torch.float64), y.to(torch.float64), lams.to(torch.float64)
    n = knots.shape[-1]
    if n < 4:
        raise ValueError(f"spline GCV needs at least 4 knots, got {n}")
    if n <= DEMMLER_REINSCH_MAX_KNOTS:
        return _scores_demmler_reinsch(knots, y, lams)
    return _scores_banded(knots, y, lams)


def _scores_demmler_reinsch(knots: torch.Tensor, y: torch.Tensor, lams: torch.Tensor) -> torch.Tensor:
    n = knots.shape[-1]
    m = n - 2
    h = knots.diff(dim=-1)  # (G, n - 1)
    inv_h = 1.0 / h
    q_lo, q_mid, q_hi = inv_h[:, :-1], -(inv_h[:, :-1] + inv_h[:, 1:]), inv_h[:, 1:]  # (G, m): column r of Q
    cols = torch.arange(m, device=knots.device)
    Q = knots.new_zeros(knots.shape[0], n, m)
    Q[:, cols, cols], Q[:, cols + 1, cols], Q[:, cols + 2, cols] = q_lo, q_mid, q_hi
    R = (
        torch.diag_embed((h[:, :-1] + h[:, 1:]) / 3)
        + torch.diag_embed(h[:, 1:-1] / 6, 1)
        + torch.diag_embed(h[:, 1:-1] / 6, -1)
    )
    chol = torch.linalg.cholesky(R)  # R is strictly diagonally dominant: positive definite
    half = torch.linalg.solve_triangular(chol, Q.mT, upper=False)  # L^-1 Q^T  (G, m, n)
    kappa, U = torch.linalg.eigh(half @ half.mT)  # L^-1 Q^T Q L^-T
    kappa = kappa.clamp_min(0)
    transform = torch.linalg.solve_triangular(chol.mT, U, upper=True).mT  # U^T L^-1  (G, m, m)
    w2 = (transform @ (Q.mT @ y)).pow(2).sum(dim=-1)  # (G, m): ||w_i||^2
    mu = (n * lams).view(1, -1, 1)  # (1, L, 1)
    kappa = kappa.unsqueeze(1)  # (G, 1, m)
    rss = (mu.pow(2) * kappa * w2.unsqueeze(1) / (1 + mu * kappa).pow(2)).sum(dim=-1) / n  # (G, L)
    trace = n - (mu * kappa / (1 + mu * kappa)).sum(dim=-1)
    return rss / (1 - trace / n) ** 2


def _scores_banded(knots: torch.Tensor, y: torch.Tensor, lams: torch.Tensor) -> torch.Tensor:
    n = knots.shape[-1]
    mu = (n * lams).view(1, -1, 1)  # (1, L, 1)
    h = knots.diff(dim=-1).unsqueeze(1)  # (G, 1, n - 1)
    inv_h = 1.0 / h
    q_lo, q_mid, q_hi = inv_h[..., :-1], -(inv_h[..., :-1] + inv_h[..., 1:]), inv_h[..., 1:]  # (G, 1, m)
    diag = (h[..., :-1] + h[..., 1:]) / 3 + mu * (q_lo**2 + q_mid**2 + q_hi**2)
    off1 = h[..., 1:-1] / 6 + mu * (q_mid[..., :-1] * q_lo[..., 1:] + q_hi[..., :-1] * q_mid[..., 1:])
    off2 = mu * (q_hi[..., :-2] * q_lo[..., 2:])
    factors = pentadiagonal_ldl(
        diag, off1.expand(diag.shape[:-1] + off1.shape[-1:]), off2.expand(diag.shape[:-1] + off2.shape[-1:])
    )  # (G, L, m) bands
    # Residuals y - g = mu Q gamma with M gamma = Q^T y.
    qty = (
        q_lo.squeeze(1).unsqueeze(-1) * y[:, :-2]
        + q_mid.squeeze(1).unsqueeze(-1) * y[:, 1:-1]
        + q_hi.squeeze(1).unsqueeze(-1) * y[:, 2:]
    )  # (G, m, d)
    gamma = pentadiagonal_solve(factors, qty.unsqueeze(1).expand(-1, mu.shape[1], -1, -1))  # (G, L, m, d)
    q_gamma = torch.zeros(gamma.shape[:2] + (n, gamma.shape[-1]), dtype=torch.float64, device=gamma.device)
    q_gamma[..., :-2, :] += q_lo.unsqueeze(-1) * gamma
    q_gamma[..., 1:-1, :] += q_mid.unsqueeze(-1) * gamma
    q_gamma[..., 2:, :] += q_hi.unsqueeze(-1) * gamma
    rss = (mu.unsqueeze(-1) * q_gamma).pow(2).sum(dim=(-2, -1)) / n  # (G, L)

    # Central band of M^-1: s0[i] = S_ii, s1[i] = S_i,i+1, s2[i] = S_i,i+2.
    d, e, f = factors.d.unbind(-1), factors.e.unbind(-1), factors.f.unbind(-1)
    m = len(d)
    zero = torch.zeros_like(d[0])
    s0, s1, s2 = [zero] * m, [zero] * m, [zero] * m
    for i in reversed(range(m)):
        e_i = e[i] if i + 1 < m else zero
        f_i = f[i] if i + 2 < m else zero
        next0 = s0[i + 1] if i + 1 < m else zero
        next1 = s1[i + 1] if i + 1 < m else zero
        next2 = s0[i + 2] if i + 2 < m else zero
        s2[i] = -(e_i * next1 + f_i * next2)
        s1[i] = -(e_i * next0 + f_i * next1)
        s0[i] = 1.0 / d[i] - e_i * s1[i] - f_i * s2[i]
    band0, band1, band2 = (torch.stack(s, dim=-1) for s in (s0, s1, s2))  # (G, L, m)
    # Row r of Q has q_hi[r-2] (column r-2), q_mid[r-1] (column r-1), q_lo[r] (column r), where they exist.
    pad = torch.nn.functional.pad
    c_hi, c_mid, c_lo = pad(q_hi, (2, 0)), pad(pad(q_mid, (1, 0)), (0, 1)), pad(q_lo, (0, 2))  # (G, 1, n)
    b0 = pad(band0, (2, 2))  # b0[r + 2 + k] = S_{r+k, r+k}
    b1 = pad(band1, (2, 2))
    b2 = pad(band2, (2, 2))
    idx = torch.arange(n, device=knots.device)
    S = lambda band, k: band[..., idx + 2 + k]  # noqa: E731  band value at column r + k
    quad = (
        c_hi**2 * S(b0, -2)
        + c_mid**2 * S(b0, -1)
        + c_lo**2 * S(b0, 0)
        + 2 * c_hi * c_mid * S(b1, -2)
        + 2 * c_mid * c_lo * S(b1, -1)
        + 2 * c_hi * c_lo * S(b2, -2)
    )
    trace = n - mu.squeeze(-1) * quad.sum(dim=-1)  # (G, L)
    return rss / (1 - trace / n) ** 2
