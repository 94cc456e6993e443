"""GCV scores of cubic smoothing splines in O(n) per candidate, without forming hat matrices.

For knots ``t`` (``n`` points), data ``y`` ``(n, d)`` and ``mu = n * lam`` (Reinsch form of
:mod:`torchgcc.functional.spline`, ``M = R + mu Q^T Q`` pentadiagonal), the fitted values are
``g = y - mu Q M^-1 Q^T y`` and the hat matrix is ``H = I - mu Q M^-1 Q^T``, so

    tr(H) = n - mu sum_r (Q M^-1 Q^T)_rr,

and every ``(Q M^-1 Q^T)_rr`` needs only the central band (|i - j| <= 2) of ``M^-1``, which the LDL^T factors give by
the backward recursion of Hutchinson and de Hoog (1985):

    S_ij = delta_ij / d_i - sum_{k = i+1}^{i+2} L_ki S_kj   (j >= i).

The GCV score is ``(1/n) ||y - g||^2 / (1 - tr(H)/n)^2``, the criterion of :func:`torchgcc.functional.gcv_scores`.
"""

from __future__ import annotations

import torch

from torchgcc.functional.banded import pentadiagonal_ldl, pentadiagonal_solve

__all__ = ["spline_gcv_scores"]


def spline_gcv_scores(knots: torch.Tensor, y: torch.Tensor, lams: torch.Tensor) -> torch.Tensor:
    """GCV scores ``(G, L)`` for knots ``(G, n)`` (increasing, ``n >= 4``), data ``(G, n, d)`` and candidate
    smoothing parameters ``lams`` ``(L,)`` (mean-normalised, ``> 0``)."""
    knots, y = knots.to(torch.float64), y.to(torch.float64)
    n = knots.shape[-1]
    if n < 4:
        raise ValueError(f"spline GCV needs at least 4 knots, got {n}")
    mu = (n * lams.to(torch.float64)).view(1, -1, 1)  # (1, L, 1)
    h = knots.diff(dim=-1).unsqueeze(1)  # (G, 1, n - 1)
    inv_h = 1.0 / h
    q_lo, q_mid, q_hi = inv_h[..., :-1], -(inv_h[..., :-1] + inv_h[..., 1:]), inv_h[..., 1:]  # (G, 1, m)
    diag = (h[..., :-1] + h[..., 1:]) / 3 + mu * (q_lo**2 + q_mid**2 + q_hi**2)
    off1 = h[..., 1:-1] / 6 + mu * (q_mid[..., :-1] * q_lo[..., 1:] + q_hi[..., :-1] * q_mid[..., 1:])
    off2 = mu * (q_hi[..., :-2] * q_lo[..., 2:])
    factors = pentadiagonal_ldl(diag, off1.expand(diag.shape[:-1] + off1.shape[-1:]),
                                off2.expand(diag.shape[:-1] + off2.shape[-1:]))  # (G, L, m) bands
    # Residuals y - g = mu Q gamma with M gamma = Q^T y.
    qty = (q_lo.squeeze(1).unsqueeze(-1) * y[:, :-2] + q_mid.squeeze(1).unsqueeze(-1) * y[:, 1:-1]
           + q_hi.squeeze(1).unsqueeze(-1) * y[:, 2:])  # (G, m, d)
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
    quad = (c_hi**2 * S(b0, -2) + c_mid**2 * S(b0, -1) + c_lo**2 * S(b0, 0)
            + 2 * c_hi * c_mid * S(b1, -2) + 2 * c_mid * c_lo * S(b1, -1) + 2 * c_hi * c_lo * S(b2, -2))
    trace = n - mu.squeeze(-1) * quad.sum(dim=-1)  # (G, L)
    return rss / (1 - trace / n) ** 2
