"""Manifold-aware encoding: coded samples along the data manifold, for the caller's own groups.

OUR RECONSTRUCTION of the encoder of "Manifold-Aware General Coded Computing" (Moradi and Maddah-Ali, arXiv
2609.00552), of which only the abstract is public ("coded samples that follow the natural manifold of the data",
"inspired by graph-based manifold learning"). Standard GCC's encoder is the natural cubic spline through
``(alpha_k, x_k)`` in the caller's order: between arbitrary inputs it cuts straight across the data space, so the
coded samples at ``beta_n`` lie off the data. :class:`ManifoldEncoder` keeps the code's points and the group's
inputs and changes the curve, using a reference set of data (e.g. training inputs) and its kNN graph
(:class:`~torchgcc.manifold.graph.ReferenceGraph`, geodesics as in Isomap):

1. **order**: the group's inputs are placed on ``alpha_1 < ... < alpha_K`` along the shortest route through them
   (straight-line or geodesic distances; exact for K <= 12); the decoder's estimates are put back in the caller's
   order (``last_order``);
2. **follow the graph** (``follow_paths``): between consecutive inputs the curve is pulled toward the reference
   points on the graph's shortest path, placed at parameters proportional to arc length within
   ``[alpha_k, alpha_{k+1}]``: the curve is the weighted cubic smoothing spline through the inputs (weight
   :data:`INPUT_WEIGHT`, so it passes through them to ~1e-8) and the path points (weight 1), with
   ``lambda = (bandwidth_ratio * 2 / K)^4``: it bends toward the data within a fraction of a regression interval.

The pull is a trade-off, measured by ``torchgcc reproduce manifold``: a curve that hugs the discrete graph path
lies closer to the data but is rougher, and the decoder interpolates ``f`` along it; ``follow_paths=False`` keeps
only the ordering. The encoder depends on the inputs through the route, so it is not differentiable in them (it runs
without gradients) and is not a fixed matrix.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
from torch import nn

from torchgcc.functional import smoothing_spline_matrix
from torchgcc.functional.weighted_spline import weighted_smoothing_spline
from torchgcc.manifold.graph import ReferenceGraph, shortest_hamiltonian_path

__all__ = ["INPUT_WEIGHT", "ROUTES", "ManifoldEncoder"]

#: How the inputs are ordered: the shortest route by geodesic (graph) or by straight-line distance.
ROUTES = ("geodesic", "euclidean")

#: Weight of the group's inputs against 1 for the graph's path points in the curve's fit.
INPUT_WEIGHT = 1e8


class ManifoldEncoder(nn.Module):
    """Encoder ``(B, K, *feat) -> (B, N, *feat)`` whose coded samples follow the data manifold (module docstring).

    Args:
        alpha: ``(K,)`` regression points of the code (ascending).
        beta: ``(N,)`` worker points of the code (ascending).
        reference: ``(M, *feat)`` samples of the data distribution (the graph's nodes), or a prebuilt
            :class:`ReferenceGraph` of flattened samples (its Floyd-Warshall costs ``O(M^3)``: share it).
        neighbours: ``k`` of the kNN graph (when ``reference`` is a tensor).
        follow_paths: pull the curve toward the graph's shortest paths (else only reorder the inputs).
        bandwidth_ratio: the pull's smoothing length as a fraction of the mean regression spacing ``2 / K``.
        route: how the inputs are ordered (:data:`ROUTES`): the shortest route by straight-line distance (default:
            the spline between consecutive inputs is then short; measured better than the geodesic route on every
            workload of ``reproduce manifold``) or by graph geodesics.

    After each call, ``last_order`` ``(B, K)`` int64 holds the input placed at ``alpha_k`` in every group and
    ``last_path_points`` ``(B,)`` how many reference points each curve was pulled toward.
    """

    alpha: torch.Tensor
    beta: torch.Tensor

    def __init__(
        self,
        alpha: torch.Tensor,
        beta: torch.Tensor,
        reference: Union[torch.Tensor, ReferenceGraph],
        *,
        neighbours: int = 10,
        follow_paths: bool = True,
        bandwidth_ratio: float = 0.5,
        route: str = "euclidean",
    ) -> None:
        super().__init__()
        if route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
        self.route = route
        if not bandwidth_ratio > 0:
            raise ValueError(f"bandwidth_ratio must be > 0, got {bandwidth_ratio!r}")
        self.register_buffer("alpha", alpha.detach().to(torch.float64))
        self.register_buffer("beta", beta.detach().to(torch.float64))
        if isinstance(reference, ReferenceGraph):
            self.graph = reference
        else:
            self.graph = ReferenceGraph(reference.reshape(len(reference), -1), neighbours=neighbours)
        self.follow_paths, self.bandwidth_ratio = follow_paths, bandwidth_ratio
        self.last_order: Optional[torch.Tensor] = None
        self.last_path_points: Optional[torch.Tensor] = None

    @property
    def num_inputs(self) -> int:
        return self.alpha.shape[0]

    @property
    def num_workers(self) -> int:
        return self.beta.shape[0]

    @property
    def lam(self) -> float:
        """The smoothing parameter of the pull: ``(bandwidth_ratio * 2 / K)^4``."""
        return (self.bandwidth_ratio * 2 / self.num_inputs) ** 4

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.curve(x, self.beta)

    @torch.no_grad()
    def curve(self, x: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
        """The encoding curve of every group of ``x`` ``(B, K, *feat)`` at ``points`` ``(P,)``: ``(B, P, *feat)``
        (``points = beta`` gives the coded samples; at ``alpha`` it returns the ordered inputs)."""
        size = self.graph.points.shape[1]
        if x.dim() < 3 or x.shape[1] != self.num_inputs or x[0, 0].numel() != size:
            raise ValueError(
                f"encoder expects (B, K={self.num_inputs}, *feat) inputs of {size} features (the reference's), "
                f"got {tuple(x.shape)}"
            )
        b, k = x.shape[:2]
        flat = x.reshape(b, k, -1).to(torch.float64)
        distances, ends = self.graph.geodesics(flat)
        euclidean = torch.cdist(flat, flat)
        orders, curves, counts = [], [], []
        points = points.to(torch.float64)
        for group in range(b):
            order = shortest_hamiltonian_path(distances[group] if self.route == "geodesic" else euclidean[group])
            ordered = flat[group, order]
            if not self.follow_paths:
                curves.append(smoothing_spline_matrix(self.alpha, points, 0.0) @ ordered)
                counts.append(0)
            else:
                knots, data, weights = self._nodes(ordered, ends[group][order][:, order])
                _, values = weighted_smoothing_spline(knots[None], data[None], weights[None], points, self.lam)
                curves.append(values[0])
                counts.append(int((weights == 1).sum()))
            orders.append(order)
        self.last_order = torch.tensor(orders, device=x.device)
        self.last_path_points = torch.tensor(counts, device=x.device)
        return torch.stack(curves).to(x.dtype).reshape((b, len(points)) + tuple(x.shape[2:]))

    def _nodes(self, ordered: torch.Tensor, ends: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Knots, points and weights of the curve through the ordered inputs and their connecting graph paths."""
        knots, data, weights = [self.alpha[:1]], [ordered[:1]], [torch.full((1,), INPUT_WEIGHT, dtype=torch.float64)]
        for k in range(self.num_inputs - 1):
            enter, leave = (int(v) for v in ends[k, k + 1])
            middle = self.graph.points[self.graph.path(enter, leave)] if enter >= 0 else ordered[:0]
            segment = torch.cat([ordered[k : k + 1], middle, ordered[k + 1 : k + 2]])
            length = torch.cat([segment.new_zeros(1), segment.diff(dim=0).norm(dim=1).cumsum(0)])
            fraction = length[1:] / length[-1] if length[-1] > 0 else torch.zeros_like(length[1:])
            fraction[-1] = 1.0  # the next input sits at alpha_{k+1}, even when it repeats this one (padding)
            at = self.alpha[k] + (self.alpha[k + 1] - self.alpha[k]) * fraction
            strictly_inside = (at[:-1].diff(prepend=self.alpha[k : k + 1]) > 0) & (at[:-1] < self.alpha[k + 1])
            keep = torch.cat([strictly_inside, torch.ones(1, dtype=torch.bool)])
            knots.append(at[keep])
            data.append(segment[1:][keep])
            weight = torch.ones(len(segment) - 1, dtype=torch.float64)
            weight[-1] = INPUT_WEIGHT
            weights.append(weight[keep])
        return torch.cat(knots), torch.cat(data), torch.cat(weights)

    def extra_repr(self) -> str:
        return (
            f"num_inputs={self.num_inputs}, num_workers={self.num_workers}, reference={len(self.graph.points)}, "
            f"neighbours={self.graph.neighbours}, route={self.route!r}, follow_paths={self.follow_paths}, "
            f"bandwidth_ratio={self.bandwidth_ratio:g}"
        )
