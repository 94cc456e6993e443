"""Manifold-aware encoding: graph geodesics against scipy, routes against brute force, the encoder's curve, and the
ablation's same-groups check."""

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.sparse.csgraph import shortest_path

import torchgcc
from torchgcc.coded_module import group_samples
from torchgcc.manifold import ManifoldEncoder, ManifoldGCC, ReferenceGraph, shortest_hamiltonian_path


def _spiral(n, seed=0, dim=10, noise=0.0):
    """Points on a planar spiral embedded in R^dim by a fixed random orthonormal map, in random order (stratified in
    arc length, so that a kNN graph is connected); ``seed`` draws the points."""
    generator = torch.Generator().manual_seed(seed)
    strata = (torch.arange(n) + torch.rand(n, generator=generator, dtype=torch.float64)) / n
    t = math.pi * (1 + 2 * strata.sqrt())[torch.randperm(n, generator=generator)]
    plane = torch.stack([t * t.cos(), t * t.sin()], dim=1) / 5
    basis, _ = torch.linalg.qr(torch.randn(dim, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    return plane @ basis.T + noise * torch.randn(n, dim, generator=generator, dtype=torch.float64)


def test_graph_geodesics_equal_scipys_dijkstra_on_the_same_knn_graph():
    points = _spiral(120)
    graph = ReferenceGraph(points, neighbours=5)
    d = torch.cdist(points, points).numpy()
    adjacency = np.zeros_like(d)
    nearest = np.argsort(d, axis=1)[:, 1:6]
    for i, row in enumerate(nearest):
        adjacency[i, row] = d[i, row]
    adjacency = np.maximum(adjacency, adjacency.T)
    np.testing.assert_allclose(graph.distances.numpy(), shortest_path(adjacency, method="D"), rtol=1e-12)
    for start, end in ((0, 7), (30, 99), (5, 5)):
        path = graph.path(start, end)
        assert path[0] == start and path[-1] == end
        length = sum(d[a, b] for a, b in zip(path, path[1:]))
        assert length == pytest.approx(float(graph.distances[start, end]), rel=1e-12)
    with pytest.raises(ValueError, match="not connected"):
        ReferenceGraph(torch.cat([points[:10], points[:10] + 100.0]), neighbours=2)


def test_new_points_route_through_their_neighbours():
    """A new point's geodesic to another is the shortest way through its k nearest reference points (brute force
    over every pair of neighbours), or the direct segment when the two are neighbours."""
    reference, new = _spiral(200, seed=1), _spiral(6, seed=2)
    graph = ReferenceGraph(reference, neighbours=6)
    distances, ends = graph.geodesics(new.unsqueeze(0))
    to_reference = torch.cdist(new, reference)
    near = to_reference.topk(6, largest=False)
    for i, j in itertools.permutations(range(6), 2):
        via = min(
            float(to_reference[i, a] + graph.distances[a, b] + to_reference[j, b])
            for a in near.indices[i]
            for b in near.indices[j]
        )
        direct = float((new[i] - new[j]).norm())
        neighbours = direct <= max(float(near.values[i, -1]), float(near.values[j, -1]))
        assert float(distances[0, i, j]) == pytest.approx(direct if neighbours else via, rel=1e-12)
        assert (int(ends[0, i, j, 0]) == -1) == neighbours


def test_route_is_the_shortest_by_brute_force():
    generator = torch.Generator().manual_seed(3)
    for k in (3, 5, 7):
        points = torch.randn(k, 4, generator=generator, dtype=torch.float64)
        d = torch.cdist(points, points)
        route = shortest_hamiltonian_path(d)
        best = min(sum(float(d[a, b]) for a, b in zip(p, p[1:])) for p in itertools.permutations(range(k)))
        assert sorted(route) == list(range(k))
        assert sum(float(d[a, b]) for a, b in zip(route, route[1:])) == pytest.approx(best, rel=1e-12)


def test_encoder_curve_passes_through_the_ordered_inputs_and_the_decoder_restores_the_callers_order():
    reference, x = _spiral(300, seed=4), _spiral(32, seed=5)
    k, n = 8, 24
    code = ManifoldGCC(k, n, reference=reference, lambda_dec=0.0)
    groups = group_samples(x, k)
    coded = code.encoder(groups)
    assert coded.shape == (4, n, 10) and code.encoder.last_path_points.sum() > 0
    at_alpha = code.encoder.curve(groups, code.alpha)
    ordered = groups.gather(1, code.encoder.last_order.unsqueeze(-1).expand_as(groups))
    torch.testing.assert_close(at_alpha, ordered, rtol=0, atol=1e-6 * float(x.abs().max()))
    decoded = code.decoder(coded, torch.ones(4, n, dtype=torch.bool))  # identity computation
    plain = torchgcc.make_code("natural", num_inputs=k, num_workers=n)
    caller_order_error = (decoded - groups).abs().max()
    assert caller_order_error < 0.1 * (plain.decoder(coded, torch.ones(4, n, dtype=torch.bool)) - groups).abs().max()
    with pytest.raises(ValueError, match="last encoded batch \\(4 groups\\), got 2 groups"):
        code.decoder(coded[:2], torch.ones(2, n, dtype=torch.bool))


def test_coded_samples_lie_closer_to_the_data_than_standard_gccs():
    """On a spiral: ordering shortens the curves, the graph pull bends them toward the data."""
    reference, x = _spiral(800, seed=6), _spiral(64, seed=7)
    k, n = 8, 32
    groups = group_samples(x, k)
    graph = ReferenceGraph(reference, neighbours=8)
    standard = torchgcc.make_code("gcc", num_inputs=k, num_workers=n).encoder(groups)
    ordered = ManifoldEncoder(torchgcc.GCC(k, n).alpha, torchgcc.GCC(k, n).beta, graph, follow_paths=False)(groups)
    pulled = ManifoldEncoder(torchgcc.GCC(k, n).alpha, torchgcc.GCC(k, n).beta, graph, bandwidth_ratio=0.1)(groups)

    def distance(coded):
        return float(torch.cdist(coded.flatten(0, 1), reference).min(dim=1).values.mean())

    assert distance(pulled) < distance(ordered) < 0.5 * distance(standard)
    with pytest.raises(ValueError, match="route"):
        ManifoldEncoder(torchgcc.GCC(k, n).alpha, torchgcc.GCC(k, n).beta, graph, route="tsp")


def test_the_ablation_keeps_the_callers_groups_for_the_encode_rows():
    from torchgcc.app.experiments import manifold_study

    config = manifold_study.Config(
        workloads=("swissroll",),
        stragglers=(4,),
        repeats=1,
        samples=64,
        reference_samples=200,
        dense_samples=1000,
        seeds=(0, 1),
    )
    result = manifold_study.run(config, progress=False)
    rows = {r["scheme"]: r for r in result.records}
    assert set(rows) == set(manifold_study.ROWS)
    for row in ("encode_order", "encode", "encode_close"):
        assert rows[row]["same_groups_as_standard"] and rows[row]["group_hash"] == rows["standard"]["group_hash"]
    for row in ("regroup", "both"):
        assert not rows[row]["same_groups_as_standard"]
    for record in rows.values():
        assert record["distance_to_data"] > 0 and record["distance_to_group"] > 0 and "distance_to_manifold" in record
        assert math.isfinite(record["mse_ci"]) and len(record["seeds"]) == 2
    assert rows["standard"]["ratio"] == pytest.approx(1.0)
    assert manifold_study.group_hash(torch.tensor([[2, 1], [0, 3]])) == manifold_study.group_hash(
        torch.tensor([[3, 0], [1, 2]])
    )
