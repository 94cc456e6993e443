"""Manifold-aware GCC (our reconstruction of arXiv 2609.00552), and what its ablation kept: two separate steps.

- :mod:`~torchgcc.manifold.encoding` and :mod:`~torchgcc.manifold.code`: :class:`RouteEncoder` and :class:`RouteGCC`
  keep the caller's groups and draw each group's coded samples along a short path through its own inputs (the
  shortest straight-line route, regression points from the distances along it). The graph-based options (geodesic
  order, the pull toward a reference set's kNN-graph paths) are kept for the ablation; they did not improve on the
  route there (docs/family.md, section 4);
- :mod:`~torchgcc.manifold.grouping`: :class:`ManifoldGrouping` chooses which inputs are coded together, along the
  data (optional; a caller who hands in its own groups cannot use it);
- :mod:`~torchgcc.manifold.graph`: the kNN graph, its shortest paths and the shortest route through a group.
"""

from torchgcc.manifold.code import RouteDecoder, RouteGCC
from torchgcc.manifold.encoding import RouteEncoder
from torchgcc.manifold.graph import ReferenceGraph, shortest_hamiltonian_path
from torchgcc.manifold.grouping import ORDERS, ManifoldGrouping, manifold_order

__all__ = [
    "ORDERS",
    "ManifoldGrouping",
    "ReferenceGraph",
    "RouteDecoder",
    "RouteEncoder",
    "RouteGCC",
    "manifold_order",
    "shortest_hamiltonian_path",
]
