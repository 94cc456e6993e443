"""Graph geodesics over a reference set of data: the kNN graph, its shortest paths, and the shortest route through a
group of inputs.

A :class:`ReferenceGraph` holds ``M`` reference points (samples of the data distribution, e.g. training inputs) and
their symmetrised k-nearest-neighbour graph with Euclidean edge lengths; all-pairs shortest paths (Floyd-Warshall,
``M`` vectorised relaxations of an ``(M, M)`` matrix, float64) approximate geodesic distances on the data manifold
(the construction of Isomap). A new point joins the graph through its ``k`` nearest reference points, so the geodesic
between two new points ``x``, ``y`` is ``min_{a, b} |x - a| + G[a, b] + |b - y|`` over their neighbours ``a``, ``b``,
or ``|x - y|`` when the two are graph neighbours themselves (closer than either one's ``k``-th nearest reference
point).
"""

from __future__ import annotations

import math

import torch

from torchgcc.checks import check_finite, check_integer, real_tensor

__all__ = ["ReferenceGraph", "shortest_hamiltonian_path", "EXACT_ROUTE_MAX"]

#: Largest group routed exactly (Held-Karp, ``O(2^K K^2)``); larger groups get a greedy route.
EXACT_ROUTE_MAX = 12


class ReferenceGraph:
    """The kNN graph of ``reference`` ``(M, D)`` and its all-pairs shortest paths.

    Args:
        reference: ``(M, D)`` finite points (flattened inputs), ``M >= 2``.
        neighbours: ``k`` of the kNN graph (each point's ``k`` nearest, symmetrised) and of a new point's links.

    Raises ``ValueError`` when the graph is not connected (raise ``neighbours``).
    """

    def __init__(self, reference: torch.Tensor, *, neighbours: int = 10) -> None:
        points = check_finite(reference, "reference").detach()  # a NaN would cut the graph
        if points.dim() != 2 or len(points) < 2:
            raise ValueError(f"reference must be (M, D) with M >= 2, got {tuple(points.shape)}")
        neighbours = check_integer("neighbours (at most M - 1)", neighbours, minimum=1, maximum=len(points) - 1)
        self.points = points
        self.neighbours = neighbours
        m = len(self.points)
        distances = torch.cdist(self.points, self.points)
        nearest = distances.topk(neighbours + 1, largest=False).indices[:, 1:]
        weights = torch.full_like(distances, math.inf)
        weights.scatter_(1, nearest, distances.gather(1, nearest))
        weights = torch.minimum(weights, weights.T)
        weights.fill_diagonal_(0.0)
        self.distances, self.next_hop = all_pairs_shortest_paths(weights)
        if torch.isinf(self.distances).any():
            raise ValueError(f"the {neighbours}-nearest-neighbour graph of the {m} reference points is not connected")

    def path(self, start: int, end: int) -> list[int]:
        """The reference points on the shortest path from ``start`` to ``end``, both included."""
        nodes = [start]
        while nodes[-1] != end:
            nodes.append(int(self.next_hop[nodes[-1], end]))
        return nodes

    def geodesics(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Geodesic distances between the new points of every group and the reference points that route them.

        Args:
            x: ``(B, K, D)`` groups of points, ``D`` the reference's (else a ``ValueError`` naming ``x``; the values
                are not read: non-finite ones give non-finite distances).

        Returns:
            ``(B, K, K)`` float64 distances and ``(B, K, K, 2)`` int64 ``(a, b)``: the reference points where the
            route from point ``i`` to ``j`` enters and leaves the graph (``-1`` where the two are neighbours and the
            direct segment is the route).
        """
        x = real_tensor(x, "x").detach()
        if x.dim() != 3 or x.shape[-1] != self.points.shape[1]:
            raise ValueError(f"x must have shape (B, K, D={self.points.shape[1]}), got {tuple(x.shape)}")
        b, k, _ = x.shape
        links = torch.cdist(x, self.points.expand(b, -1, -1)).topk(self.neighbours, largest=False)  # (B, K, k)
        flat = links.indices.reshape(b, k * self.neighbours)
        between = self.distances[flat.unsqueeze(2), flat.unsqueeze(1)].view(b, k, self.neighbours, k, self.neighbours)
        total = links.values.view(b, k, -1, 1, 1) + between + links.values.view(b, 1, 1, k, -1)
        best, index = total.transpose(2, 3).reshape(b, k, k, -1).min(dim=-1)  # (B, K, K)
        via = torch.stack([index // self.neighbours, index % self.neighbours], dim=-1)
        enter = links.indices.gather(2, via[..., 0])  # (B, K, K): reference point after i
        leave = links.indices.unsqueeze(1).expand(b, k, k, -1).gather(3, via[..., 1:]).squeeze(-1)  # before j
        direct = torch.cdist(x, x)
        radius = links.values[..., -1]  # (B, K): each point's k-th nearest reference distance
        shorter = direct <= torch.maximum(radius.unsqueeze(2), radius.unsqueeze(1))  # neighbours: the direct edge
        distances = torch.where(shorter, direct, best)
        ends = torch.stack([enter, leave], dim=-1).masked_fill(shorter.unsqueeze(-1), -1)
        return distances, ends


def all_pairs_shortest_paths(weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Floyd-Warshall on an ``(M, M)`` matrix of edge lengths (``inf``: no edge, 0 on the diagonal).

    Returns the ``(M, M)`` shortest-path lengths and the ``(M, M)`` int64 next hop: the node after ``i`` on a
    shortest path from ``i`` to ``j`` (``j`` itself for an edge).
    """
    distances = weights.to(torch.float64).clone()
    m = len(distances)
    next_hop = torch.arange(m).expand(m, m).clone()
    for via in range(m):
        candidate = distances[:, via : via + 1] + distances[via : via + 1, :]
        better = candidate < distances
        distances = torch.where(better, candidate, distances)
        next_hop = torch.where(better, next_hop[:, via : via + 1].expand(m, m), next_hop)
    return distances, next_hop


def shortest_hamiltonian_path(distances: torch.Tensor) -> list[int]:
    """An order of the ``K`` points visiting each once with the smallest total distance (an open path, any ends).

    Exact (Held-Karp dynamic programming over subsets) for ``K <= EXACT_ROUTE_MAX``; beyond, the best greedy
    nearest-neighbour chain over every start. ``distances`` ``(K, K)``, symmetric, real and not NaN (else a
    ``TypeError`` / ``ValueError`` naming it); an infinite distance is an edge of infinite length: the route still
    visits all ``K`` points, avoiding such edges where it can.
    """
    distances = real_tensor(distances, "distances")
    if distances.dim() != 2 or distances.shape[0] != distances.shape[1]:
        raise ValueError(f"distances must be a square (K, K) matrix, got shape {tuple(distances.shape)}")
    d = distances.tolist()
    k = len(d)
    if any(math.isnan(value) for row in d for value in row):
        raise ValueError("distances must not be NaN")
    if k <= 2:
        return list(range(k))
    if k > EXACT_ROUTE_MAX:
        return min((_greedy_route(d, start) for start in range(k)), key=lambda route: _length(d, route))
    full = (1 << k) - 1
    cost = [[math.inf] * k for _ in range(1 << k)]  # the shortest path through subset ending at last
    parent = [[-1] * k for _ in range(1 << k)]  # -1: no such path yet, unless subset is {last} (inf is a length)
    for i in range(k):
        cost[1 << i][i] = 0.0
    for subset in range(1, 1 << k):
        for last in range(k):
            if not subset >> last & 1 or (parent[subset][last] == -1 and subset != 1 << last):
                continue
            here = cost[subset][last]
            for nxt in range(k):
                if subset >> nxt & 1:
                    continue
                grown = subset | 1 << nxt
                if parent[grown][nxt] == -1 or here + d[last][nxt] < cost[grown][nxt]:
                    cost[grown][nxt], parent[grown][nxt] = here + d[last][nxt], last
    last = min(range(k), key=lambda j: cost[full][j])
    route, subset = [], full
    while last != -1:
        route.append(last)
        subset, last = subset ^ 1 << last, parent[subset][last]
    return route[::-1]


def _greedy_route(d: list[list[float]], start: int) -> list[int]:
    route, left = [start], set(range(len(d))) - {start}
    while left:
        route.append(min(left, key=lambda j: d[route[-1]][j]))
        left.remove(route[-1])
    return route


def _length(d: list[list[float]], route: list[int]) -> float:
    return sum(d[i][j] for i, j in zip(route, route[1:]))
