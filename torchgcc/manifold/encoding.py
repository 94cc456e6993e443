"""Route encoding: each group's coded samples along a short path through its own inputs, for the caller's groups.

Our reconstruction of the encoder of "Manifold-Aware General Coded Computing" (Moradi and Maddah-Ali, arXiv
2609.00552), of which only the abstract is public ("coded samples that follow the natural manifold of the data",
"inspired by graph-based manifold learning"), and what the ablation (``torchgcc reproduce manifold``, docs/family.md)
kept of it. Standard GCC's encoder is the natural cubic spline through ``(alpha_k, x_k)`` in the caller's order:
between arbitrary inputs it cuts straight across the data space, so the decoder interpolates a long, bent curve.
:class:`RouteEncoder` keeps the code's worker points and the group's inputs and changes three things, each an option:

1. **order** (:data:`INPUT_ORDERS`): which input sits at which regression point: ``"route"`` (default) takes the
   shortest route through the inputs by straight-line distance; ``"pc1"`` sorts the group by its first principal
   component; ``"geodesic"`` takes the shortest route by geodesics of a reference set's kNN graph
   (:class:`~torchgcc.manifold.graph.ReferenceGraph`, as in Isomap). Both routes are exact for K <= 12. The decoder
   puts its estimates back in the caller's order (``last_order``);
2. **regression points** (:data:`REGRESSION_POINTS`): ``"centripetal"`` (default) places them by the distances
   between consecutive inputs of the order (straight-line, or geodesic for ``order="geodesic"``):
   ``alpha_k = -cos(pi (1/2 + (K - 1) s_k) / K)`` with ``s_k`` the fraction of ``sum_i sqrt(d_i)`` before input k
   (:func:`centripetal_points`). Equal distances give the code's Chebyshev points; otherwise a long step gets a longer
   interval of worker points. The square root is the centripetal parametrisation of curve fitting (E. T. Y. Lee,
   "Choosing nodes in parametric curve interpolation", 1989): the chord length (``d_i`` itself) bunches the points of
   short steps and makes the spline overshoot between them (measured worse on the ablation's synthetic workloads).
   ``"code"`` keeps the code's points. ``last_alpha`` ``(B, K)`` holds the points; the decoder evaluates there;
3. **graph pull** (``follow_paths``, off by default): between consecutive inputs the curve is pulled toward the
   reference points on the graph's shortest path, placed at parameters proportional to arc length within
   ``[alpha_k, alpha_{k+1}]``: the weighted cubic smoothing spline through the inputs (weight
   :data:`INPUT_WEIGHT`, so it passes through them to ~1e-8) and the path points (weight 1), with
   ``lambda = (bandwidth_ratio * 2 / K)^4``: it bends toward the data within a fraction of a regression interval.

The defaults are what the ablation found to carry the gain: the straight-line route and centripetal points, which
need no reference set. The graph (geodesic order, geodesic distances for the points, the pull) needs one and did not
improve on them there (docs/family.md, section 4). The encoder depends on the inputs through the order and the
points, so it is not differentiable in them (it runs without gradients) and is not a fixed matrix.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import torch
from torch import nn

from torchgcc.checks import check_finite
from torchgcc.functional import smoothing_spline_matrix
from torchgcc.functional.weighted_spline import weighted_smoothing_spline
from torchgcc.manifold.graph import ReferenceGraph, shortest_hamiltonian_path

__all__ = ["INPUT_ORDERS", "INPUT_WEIGHT", "MIN_STEP", "REGRESSION_POINTS", "RouteEncoder", "centripetal_points"]

#: How a group's inputs are ordered along the regression points.
INPUT_ORDERS = ("route", "pc1", "geodesic")

#: Where the regression points are: the code's, or by the distance travelled along the order.
REGRESSION_POINTS = ("centripetal", "code")

#: Weight of the group's inputs against 1 for the graph's path points in the curve's fit.
INPUT_WEIGHT = 1e8

#: The shortest step of :func:`centripetal_points`, as a fraction of the mean step: repeated inputs (the padding of a
#: last group) still get distinct regression points.
MIN_STEP = 1e-3


def centripetal_points(distances: torch.Tensor) -> torch.Tensor:
    """Regression points ``(B, K)`` ascending in ``(-1, 1)`` from the ``(B, K - 1)`` distances between consecutive
    inputs: ``-cos(pi (1/2 + (K - 1) s_k) / K)``, ``s_k`` the fraction of the total step before input ``k``, a step
    being the square root of a distance (raised to :data:`MIN_STEP` of the mean step). Equal distances give the
    Chebyshev points of the first kind, the codes' default."""
    steps = distances.to(torch.float64).clamp_min(0).sqrt()
    k = steps.shape[-1] + 1
    mean = steps.mean(dim=-1, keepdim=True)
    steps = torch.where(mean > 0, steps.clamp_min(MIN_STEP * mean), torch.ones_like(steps))
    s = torch.nn.functional.pad(steps.cumsum(dim=-1), (1, 0)) / steps.sum(dim=-1, keepdim=True)
    return -torch.cos(math.pi * (0.5 + (k - 1) * s) / k)


class RouteEncoder(nn.Module):
    """Encoder ``(B, K, *feat) -> (B, N, *feat)``: each group's coded samples along a short path through its inputs
    (module docstring).

    Args:
        alpha: ``(K,)`` regression points of the code (ascending; used with ``points="code"``).
        beta: ``(N,)`` worker points of the code (ascending).
        reference: ``(M, *feat)`` samples of the data distribution (the graph's nodes), or a prebuilt
            :class:`ReferenceGraph` of flattened samples (its Floyd-Warshall costs ``O(M^3)``: share it); needed
            only by ``order="geodesic"`` and ``follow_paths``.
        order: one of :data:`INPUT_ORDERS`.
        points: one of :data:`REGRESSION_POINTS`.
        follow_paths: pull the curve toward the graph's shortest paths.
        neighbours: ``k`` of the kNN graph (when ``reference`` is a tensor).
        bandwidth_ratio: the pull's smoothing length as a fraction of the mean regression spacing ``2 / K``.

    After each call, ``last_order`` ``(B, K)`` int64 holds the input placed at the k-th regression point of every
    group, ``last_alpha`` ``(B, K)`` float64 the regression points (``points="centripetal"``; None with the code's) and
    ``last_path_points`` ``(B,)`` how many reference points each curve was pulled toward.
    """

    alpha: torch.Tensor
    beta: torch.Tensor

    def __init__(
        self,
        alpha: torch.Tensor,
        beta: torch.Tensor,
        reference: Union[torch.Tensor, ReferenceGraph, None] = None,
        *,
        order: str = "route",
        points: str = "centripetal",
        follow_paths: bool = False,
        neighbours: int = 10,
        bandwidth_ratio: float = 0.5,
    ) -> None:
        super().__init__()
        if order not in INPUT_ORDERS:
            raise ValueError(f"order must be one of {INPUT_ORDERS}, got {order!r}")
        if points not in REGRESSION_POINTS:
            raise ValueError(f"points must be one of {REGRESSION_POINTS}, got {points!r}")
        if not bandwidth_ratio > 0:
            raise ValueError(f"bandwidth_ratio must be > 0, got {bandwidth_ratio!r}")
        if reference is None and (order == "geodesic" or follow_paths):
            raise ValueError("order='geodesic' and follow_paths=True need a reference set of data (reference=...)")
        self.order, self.points, self.follow_paths, self.bandwidth_ratio = order, points, follow_paths, bandwidth_ratio
        self.register_buffer("alpha", alpha.detach().to(torch.float64))
        self.register_buffer("beta", beta.detach().to(torch.float64))
        self.graph: Optional[ReferenceGraph]
        if reference is None or isinstance(reference, ReferenceGraph):
            self.graph = reference
        else:
            self.graph = ReferenceGraph(reference.reshape(len(reference), -1), neighbours=neighbours)
        self.last_order: Optional[torch.Tensor] = None
        self.last_alpha: Optional[torch.Tensor] = None
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
        (``points = beta`` gives the coded samples; at the regression points it returns the ordered inputs).
        ``x`` must be finite with distances between a group's inputs that fit in float64, else a ``ValueError``
        naming ``x`` (one host read per call)."""
        size = None if self.graph is None else self.graph.points.shape[1]
        if x.dim() < 3 or x.shape[1] != self.num_inputs or (size is not None and x[0, 0].numel() != size):
            features = "" if size is None else f" of {size} features (the reference's)"
            raise ValueError(f"encoder expects (B, K={self.num_inputs}, *feat) inputs{features}, got {tuple(x.shape)}")
        b, k = x.shape[:2]
        flat = x.reshape(b, k, -1).to(torch.float64)
        metric = torch.cdist(flat, flat)
        if not bool(torch.isfinite(metric).all()):  # the one read of the checks: then a route through every input
            check_finite(flat, "x")  # raises for a non-finite input
            raise ValueError(
                "x: the distances between a group's inputs overflow float64 (inputs near 1e154 or larger); scale x"
            )
        if self.graph is not None and (self.order == "geodesic" or self.follow_paths):
            geodesic, ends = self.graph.geodesics(flat)
            metric = geodesic if self.order == "geodesic" else metric
        orders = torch.tensor([self._order(flat[g], metric[g]) for g in range(b)], dtype=torch.int64)
        alpha = self.alpha.expand(b, k)
        if self.points == "centripetal":  # from the distances between consecutive inputs of the order
            alpha = centripetal_points(metric[torch.arange(b).unsqueeze(1), orders[:, :-1], orders[:, 1:]])
        points = points.to(torch.float64)
        curves, counts = [], []
        for group in range(b):
            ordered = flat[group, orders[group]]
            if self.graph is not None and self.follow_paths:  # the constructor made sure there is a graph
                path_ends = ends[group][orders[group]][:, orders[group]]
                knots, data, weights = self._nodes(self.graph, alpha[group], ordered, path_ends)
                _, values = weighted_smoothing_spline(knots[None], data[None], weights[None], points, self.lam)
                curves.append(values[0])
                counts.append(int((weights == 1).sum()))
            else:
                curves.append(smoothing_spline_matrix(alpha[group], points, 0.0) @ ordered)
                counts.append(0)
        self.last_order = orders.to(x.device)
        self.last_alpha = alpha.to(x.device) if self.points == "centripetal" else None
        self.last_path_points = torch.tensor(counts, device=x.device)
        return torch.stack(curves).to(x.dtype).reshape((b, len(points)) + tuple(x.shape[2:]))

    def _order(self, flat: torch.Tensor, metric: torch.Tensor) -> list[int]:
        """The order of one group's ``(K, D)`` inputs (``metric`` ``(K, K)``: the distances the route minimises)."""
        if self.order == "pc1":
            centred = flat - flat.mean(dim=0)
            _, _, vh = torch.linalg.svd(centred, full_matrices=False)
            return (centred @ vh[0]).argsort().tolist()
        return shortest_hamiltonian_path(metric)

    def _nodes(
        self, graph: ReferenceGraph, alpha: torch.Tensor, ordered: torch.Tensor, ends: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Knots, points and weights of the curve through the ordered inputs (at ``alpha``) and their connecting
        paths in ``graph``."""
        knots, data, weights = [alpha[:1]], [ordered[:1]], [torch.full((1,), INPUT_WEIGHT, dtype=torch.float64)]
        for k in range(self.num_inputs - 1):
            enter, leave = (int(v) for v in ends[k, k + 1])
            middle = graph.points[graph.path(enter, leave)] if enter >= 0 else ordered[:0]
            segment = torch.cat([ordered[k : k + 1], middle, ordered[k + 1 : k + 2]])
            length = torch.cat([segment.new_zeros(1), segment.diff(dim=0).norm(dim=1).cumsum(0)])
            fraction = length[1:] / length[-1] if length[-1] > 0 else torch.zeros_like(length[1:])
            fraction[-1] = 1.0  # the next input sits at alpha_{k+1}, even when it repeats this one (padding)
            at = alpha[k] + (alpha[k + 1] - alpha[k]) * fraction
            strictly_inside = (at[:-1].diff(prepend=alpha[k : k + 1]) > 0) & (at[:-1] < alpha[k + 1])
            keep = torch.cat([strictly_inside, torch.ones(1, dtype=torch.bool)])
            knots.append(at[keep])
            data.append(segment[1:][keep])
            weight = torch.ones(len(segment) - 1, dtype=torch.float64)
            weight[-1] = INPUT_WEIGHT
            weights.append(weight[keep])
        return torch.cat(knots), torch.cat(data), torch.cat(weights)

    def extra_repr(self) -> str:
        graph = "none" if self.graph is None else f"{len(self.graph.points)} points, {self.graph.neighbours} neighbours"
        return (
            f"num_inputs={self.num_inputs}, num_workers={self.num_workers}, reference={graph}, order={self.order!r}, "
            f"points={self.points!r}, follow_paths={self.follow_paths}, bandwidth_ratio={self.bandwidth_ratio:g}"
        )
