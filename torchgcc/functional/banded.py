"""Batched solves with symmetric positive-definite pentadiagonal matrices.

The smoothing-spline systems of :mod:`torchgcc.functional.spline` are pentadiagonal (tridiagonal when the smoothing
parameter is zero), so an LDL^T factorisation costs O(m) per matrix and O(m r) per solve with r right-hand sides,
where a dense solve would cost O(m^3). The recurrences run along the band in Python and are vectorised over every
batch dimension, so they run on any device and are differentiable by autograd.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["PentadiagonalLDL", "pentadiagonal_ldl", "pentadiagonal_solve"]


class PentadiagonalLDL(NamedTuple):
    """Factors of ``A = L diag(d) L^T`` with unit lower-triangular ``L`` of bandwidth two.

    ``d`` has shape ``(..., m)``; ``e`` ``(..., m - 1)`` holds ``L[i + 1, i]`` and ``f`` ``(..., m - 2)`` holds
    ``L[i + 2, i]``.
    """

    d: torch.Tensor
    e: torch.Tensor
    f: torch.Tensor


def pentadiagonal_ldl(diag: torch.Tensor, off1: torch.Tensor, off2: torch.Tensor) -> PentadiagonalLDL:
    """Factor symmetric pentadiagonal matrices given by their bands.

    Args:
        diag: ``(..., m)`` main diagonal.
        off1: ``(..., m - 1)`` first super-diagonal ``A[i, i + 1]``.
        off2: ``(..., m - 2)`` second super-diagonal ``A[i, i + 2]``.

    Returns:
        The :class:`PentadiagonalLDL` factors. No pivoting: the matrix must be positive definite.
    """
    m = diag.shape[-1]
    if off1.shape[-1] != max(m - 1, 0) or off2.shape[-1] != max(m - 2, 0):
        raise ValueError(f"band lengths {off1.shape[-1]}, {off2.shape[-1]} do not fit a diagonal of length {m}")
    a0, a1, a2 = diag.unbind(-1), off1.unbind(-1), off2.unbind(-1)
    d: list[torch.Tensor] = []
    e: list[torch.Tensor] = []
    f: list[torch.Tensor] = []
    for i in range(m):
        di = a0[i]
        if i >= 1:
            di = torch.addcmul(di, e[i - 1] * e[i - 1], d[i - 1], value=-1)
        if i >= 2:
            di = torch.addcmul(di, f[i - 2] * f[i - 2], d[i - 2], value=-1)
        d.append(di)
        if i + 1 < m:
            ei = torch.addcmul(a1[i], f[i - 1] * e[i - 1], d[i - 1], value=-1) if i >= 1 else a1[i]
            e.append(ei / di)
        if i + 2 < m:
            f.append(a2[i] / di)
    return PentadiagonalLDL(_stack(d, diag), _stack(e, diag), _stack(f, diag))


def pentadiagonal_solve(factors: PentadiagonalLDL, rhs: torch.Tensor) -> torch.Tensor:
    """Solve ``A x = rhs`` for every column of ``rhs`` ``(..., m, r)`` given the factors of ``A``; returns ``(..., m,
    r)``."""
    m = factors.d.shape[-1]
    if rhs.shape[-2] != m:
        raise ValueError(f"right-hand side has {rhs.shape[-2]} rows, the matrix has {m}")
    inv_d = factors.d.reciprocal().unsqueeze(-1).unbind(-2)
    e = factors.e.unsqueeze(-1).unbind(-2)
    f = factors.f.unsqueeze(-1).unbind(-2)
    b = rhs.unbind(-2)
    z: list[torch.Tensor] = []
    for i in range(m):  # L z = b
        zi = b[i]
        if i >= 1:
            zi = torch.addcmul(zi, e[i - 1], z[i - 1], value=-1)
        if i >= 2:
            zi = torch.addcmul(zi, f[i - 2], z[i - 2], value=-1)
        z.append(zi)
    x: list[torch.Tensor] = [rhs[..., 0, :]] * m
    for i in reversed(range(m)):  # D L^T x = z
        xi = z[i] * inv_d[i]
        if i + 1 < m:
            xi = torch.addcmul(xi, e[i], x[i + 1], value=-1)
        if i + 2 < m:
            xi = torch.addcmul(xi, f[i], x[i + 2], value=-1)
        x[i] = xi
    return torch.stack(x, dim=-2) if m else rhs.clone()


def _stack(values: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    if values:
        return torch.stack(values, dim=-1)
    return like.new_zeros(like.shape[:-1] + (0,))
