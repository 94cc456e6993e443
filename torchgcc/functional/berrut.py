"""Berrut's rational interpolant as a linear map (the BACC baseline).

For sorted nodes ``t_0 < ... < t_{n-1}`` Berrut's first interpolant is

    r(x) = sum_j [(-1)^j / (x - t_j)] y_j  /  sum_j [(-1)^j / (x - t_j)],

pole-free on the real line and interpolating (``r(t_j) = y_j``). The sign alternates over the position in the
sorted node list, so when nodes are a subset (the surviving workers) the signs follow the subset's order.
"""

from __future__ import annotations

import torch

from torchgcc.checks import batch_shape, check_nodes

__all__ = ["berrut_matrix", "padded_berrut_matrices"]


def berrut_matrix(nodes: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Matrix mapping data at ``nodes`` to Berrut's interpolant at ``points``.

    Args:
        nodes: ``(..., n)`` finite, strictly increasing nodes, ``n >= 1``.
        points: ``(..., P)`` finite evaluation points.

    Returns:
        ``(..., P, n)`` float64 matrix with rows summing to one; a point equal to a node gets that node's unit row.

    Raises ``TypeError`` / ``ValueError`` naming the argument otherwise (tensors of real numbers only; batch shapes
    that broadcast).
    """
    nodes = check_nodes(nodes, "nodes", order="increasing")
    points = check_nodes(points, "points")
    if nodes.shape[-1] < 1:
        raise ValueError("nodes must hold at least one node for Berrut interpolation, got nodes of shape (..., 0)")
    batch_shape(nodes=nodes.shape[:-1], points=points.shape[:-1])
    return padded_berrut_matrices(nodes, torch.ones_like(nodes, dtype=torch.bool), points)


def padded_berrut_matrices(knots: torch.Tensor, valid: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Berrut matrices ``(..., P, W)`` of node sets given as the ``valid`` entries of ``knots`` ``(..., W)`` (each
    set's nodes ascending at the front, as :func:`torchgcc.functional.survivors.compact_survivors` makes them), at
    ``points`` ``(..., P)``; zero in the padding columns. The signs alternate over each set's own nodes."""
    diff = points.to(torch.float64).unsqueeze(-1) - knots.unsqueeze(-2)
    hit = (diff == 0) & valid.unsqueeze(-2)
    signs = 1.0 - 2.0 * (torch.arange(knots.shape[-1], device=knots.device) % 2).to(torch.float64)
    weights = torch.where(valid.unsqueeze(-2) & ~hit, signs / torch.where(hit | (diff == 0), 1.0, diff), 0.0)
    rows = weights / weights.sum(dim=-1, keepdim=True)
    return torch.where(hit.any(dim=-1, keepdim=True), hit.to(torch.float64), rows)
