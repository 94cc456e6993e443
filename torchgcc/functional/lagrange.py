"""Polynomial interpolation and least-squares fits as linear maps (the LCC baseline).

The polynomial of degree ``r`` that fits data at ``n >= r + 1`` nodes in the least-squares sense (exactly, when
``n = r + 1`` or the data are a polynomial of degree <= r) is evaluated at other points. The fit uses the Chebyshev
basis, which is well conditioned on [-1, 1], and an SVD-based pseudo-inverse in float64.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["chebyshev_vandermonde", "lagrange_matrix"]


def chebyshev_vandermonde(x: torch.Tensor, degree: int) -> torch.Tensor:
    """``(..., P, degree + 1)`` matrix of Chebyshev polynomials ``T_0 .. T_degree`` at ``x`` ``(..., P)``."""
    columns = [torch.ones_like(x), x]
    for _ in range(2, degree + 1):
        columns.append(2 * x * columns[-1] - columns[-2])
    return torch.stack(columns[: degree + 1], dim=-1)


def lagrange_matrix(nodes: torch.Tensor, points: torch.Tensor, degree: Optional[int] = None) -> torch.Tensor:
    """Matrix mapping data at ``nodes`` to the degree-``degree`` polynomial fit evaluated at ``points``.

    Args:
        nodes: ``(..., n)`` distinct nodes.
        points: ``(..., P)`` evaluation points.
        degree: polynomial degree ``r <= n - 1``; ``None`` means ``n - 1`` (Lagrange interpolation).

    Returns:
        ``(..., P, n)`` float64 matrix. It reproduces every polynomial of degree <= ``degree`` exactly.
    """
    nodes = nodes.to(torch.float64)
    points = points.to(torch.float64)
    n = nodes.shape[-1]
    degree = n - 1 if degree is None else degree
    if not 0 <= degree <= n - 1:
        raise ValueError(f"a degree-{degree} polynomial fit needs at least {degree + 1} nodes, got {n}")
    if (nodes.sort(dim=-1).values.diff(dim=-1) == 0).any():
        raise ValueError("nodes must be distinct")
    fit = torch.linalg.pinv(chebyshev_vandermonde(nodes, degree))  # (..., r + 1, n)
    return chebyshev_vandermonde(points, degree) @ fit
