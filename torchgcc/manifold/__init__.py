"""Manifold-aware GCC (our reconstruction of arXiv 2609.00552): two separate steps.

- :mod:`~torchgcc.manifold.encoding`: :class:`ManifoldEncoder` and :class:`ManifoldGCC` keep the caller's groups and
  draw each group's coded samples along the data (its inputs ordered along geodesics of a reference set's kNN graph,
  the curve pulled toward the graph's paths);
- :mod:`~torchgcc.manifold.grouping`: :class:`ManifoldGrouping` chooses which inputs are coded together (optional;
  a caller who hands in its own groups cannot use it);
- :mod:`~torchgcc.manifold.graph`: the kNN graph, its shortest paths and the shortest route through a group.
"""

from torchgcc.manifold.code import ManifoldDecoder, ManifoldGCC
from torchgcc.manifold.encoding import ManifoldEncoder
from torchgcc.manifold.graph import ReferenceGraph, shortest_hamiltonian_path
from torchgcc.manifold.grouping import ORDERS, ManifoldGrouping, manifold_order

__all__ = [
    "ORDERS",
    "ManifoldDecoder",
    "ManifoldEncoder",
    "ManifoldGCC",
    "ManifoldGrouping",
    "ReferenceGraph",
    "manifold_order",
    "shortest_hamiltonian_path",
]
