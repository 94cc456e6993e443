"""Manifold-aware grouping: choose which inputs are coded together (a batch permutation), in their order along the
data. A separate, optional step from manifold-aware encoding (:mod:`torchgcc.manifold.encoding`), which keeps the
caller's groups.

OUR RECONSTRUCTION of the idea of "Manifold-Aware General Coded Computing" (Moradi and Maddah-Ali, arXiv 2609.00552),
of which only the abstract is public ("coded samples that follow the natural manifold of the data", "inspired by
graph-based manifold learning"). Standard GCC codes K arbitrary consecutive samples of the batch, so the encoder's
curve through them jumps across the data space and the coded inputs between them are off the data. Here the batch is
ordered along a path through the data first:

- ``order="greedy"``: a nearest-neighbour chain over the (flattened, or embedded) inputs, started at the input
  farthest from the batch mean: consecutive samples are near neighbours, so each run of K is a short path;
- ``order="spectral"``: the samples sorted by the Fiedler vector of the Laplacian of their symmetrised kNN graph
  (Gaussian weights at the median kNN distance), the spectral ordering of graph-based manifold learning. Repeated
  samples (duplicated images, a padded batch) can make that median 0 and every weight undefined; the scale is then
  the median of the nonzero kNN distances, the distances that separate distinct samples (copies keep weight
  ``exp(0) = 1`` between them at any scale), or 1 where there are none (every edge joins copies: weight 1 at any
  scale).

Consecutive runs of K samples of that order are the groups, coded along the path. :func:`manifold_order` returns the
permutation; :class:`torchgcc.CodedModule` applies it with ``grouping=ManifoldGrouping(...)`` and returns outputs in
the caller's order. Regression points stay the code's (no per-group arc-length points in this version).
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from torchgcc.checks import check_finite, check_integer

__all__ = ["ManifoldGrouping", "manifold_order", "ORDERS"]

ORDERS = ("greedy", "spectral")


def manifold_order(features: torch.Tensor, *, order: str = "greedy", neighbours: int = 8) -> torch.Tensor:
    """A permutation ``(M,)`` of the ``M`` rows of ``features`` ``(M, D)`` along a path through them (see module).

    ``features`` must be a real, finite tensor and ``neighbours`` (``k`` of the spectral order's kNN graph) an
    integer ``>= 1``, else a one-line ``TypeError`` / ``ValueError`` naming them. One host read checks the features.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    neighbours = check_integer("neighbours", neighbours, minimum=1)
    x = check_finite(features, "features").detach()
    if x.ndim != 2:
        raise ValueError(f"features must have shape (M, D), got {tuple(x.shape)}")
    m = x.shape[0]
    if m <= 2:
        return torch.arange(m)
    distances = torch.cdist(x, x)
    if order == "greedy":
        start = int((x - x.mean(dim=0)).norm(dim=1).argmax())
        visited = torch.zeros(m, dtype=torch.bool)
        path = [start]
        visited[start] = True
        for _ in range(m - 1):
            row = distances[path[-1]].masked_fill(visited, float("inf"))
            nxt = int(row.argmin())
            path.append(nxt)
            visited[nxt] = True
        return torch.tensor(path)
    k = min(neighbours, m - 1)
    knn = distances.topk(k + 1, largest=False).indices[:, 1:]  # (M, k), without self
    adjacency = torch.zeros(m, m, dtype=torch.bool)
    adjacency.scatter_(1, knn, True)
    adjacency |= adjacency.T.clone()
    near = distances.gather(1, knn)
    scale = near.median()
    if scale == 0:  # repeated samples (see module): the nonzero kNN distances set the scale
        nonzero = near[near > 0]
        scale = nonzero.median() if len(nonzero) else torch.ones_like(scale)
    weights = torch.where(adjacency, torch.exp(-((distances / scale) ** 2)), torch.zeros(()).double())
    laplacian = torch.diag(weights.sum(dim=1)) - weights
    _, vectors = torch.linalg.eigh(laplacian)
    return vectors[:, 1].argsort()


class ManifoldGrouping:
    """``grouping(x) -> permutation (M,)`` for :class:`torchgcc.CodedModule`.

    Args:
        order: ``"greedy"`` or ``"spectral"`` (see :func:`manifold_order`).
        embedding: optional map ``(M, *in) -> (M, D)`` (e.g. a cheap feature extractor); default: flattened inputs.
        neighbours: k of the kNN graph (spectral order), an integer >= 1.
    """

    def __init__(
        self,
        order: str = "greedy",
        *,
        embedding: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        neighbours: int = 8,
    ) -> None:
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
        self.order, self.embedding = order, embedding
        self.neighbours = check_integer("neighbours", neighbours, minimum=1)

    @torch.no_grad()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        features = self.embedding(x) if self.embedding is not None else x.reshape(x.shape[0], -1)
        return manifold_order(features, order=self.order, neighbours=self.neighbours).to(x.device)

    def __repr__(self) -> str:
        return f"ManifoldGrouping(order={self.order!r})"
