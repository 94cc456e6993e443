"""Berrut's rational interpolant as a linear map (the BACC baseline).

For sorted nodes ``t_0 < ... < t_{n-1}`` Berrut's first interpolant is

    r(x) = sum_j [(-1)^j / (x - t_j)] y_j  /  sum_j [(-1)^j / (x - t_j)],

pole-free on the real line and interpolating (``r(t_j) = y_j``). The sign alternates over the position in the
sorted node list, so when nodes are a subset (the surviving workers) the signs follow the subset's order.
"""

from __future__ import annotations

import torch

__all__ = ["berrut_matrix"]


def berrut_matrix(nodes: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Matrix mapping data at ``nodes`` to Berrut's interpolant at ``points``.

    Args:
        nodes: ``(..., n)`` strictly increasing nodes, ``n >= 1``.
        points: ``(..., P)`` evaluation points.

    Returns:
        ``(..., P, n)`` float64 matrix with rows summing to one; a point equal to a node gets that node's unit row.
    """
    nodes = nodes.to(torch.float64)
    points = points.to(torch.float64)
    n = nodes.shape[-1]
    if n < 1:
        raise ValueError("Berrut interpolation needs at least one node")
    if not (nodes.diff(dim=-1) > 0).all():
        raise ValueError("nodes must be strictly increasing (distinct and sorted)")
    diff = points.unsqueeze(-1) - nodes.unsqueeze(-2)
    hit = diff == 0
    signs = 1.0 - 2.0 * (torch.arange(n, device=nodes.device) % 2).to(torch.float64)
    weights = torch.where(hit, 0.0, signs / torch.where(hit, 1.0, diff))
    rows = weights / weights.sum(dim=-1, keepdim=True)
    return torch.where(hit.any(dim=-1, keepdim=True), hit.to(torch.float64), rows)
