"""Manifold-aware encoding: graph geodesics against scipy, routes against brute force, the encoder's curve, and the
ablation's same-groups check."""

import itertools
import math

import numpy as np
import pytest
import torch
from references import natural_spline_reference
from scipy.sparse.csgraph import shortest_path

import torchgcc
from torchgcc.coded_module import group_samples
from torchgcc.manifold import ReferenceGraph, RouteEncoder, RouteGCC, shortest_hamiltonian_path
from torchgcc.manifold.encoding import MIN_STEP, centripetal_points


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


@pytest.mark.parametrize("points", ["code", "centripetal"])
def test_encoder_curve_passes_through_the_ordered_inputs_and_the_decoder_restores_the_callers_order(points):
    reference, x = _spiral(300, seed=4), _spiral(32, seed=5)
    k, n = 8, 24
    code = RouteGCC(k, n, reference=reference, order="geodesic", points=points, follow_paths=True, lambda_dec=0.0)
    groups = group_samples(x, k)
    coded = code.encoder(groups)
    assert coded.shape == (4, n, 10) and code.encoder.last_path_points.sum() > 0
    alpha = code.encoder.last_alpha
    assert (alpha is None) == (points == "code")
    ordered = groups.gather(1, code.encoder.last_order.unsqueeze(-1).expand_as(groups))
    for group in range(4):
        at = code.alpha if alpha is None else alpha[group]
        at_alpha = code.encoder.curve(groups[group : group + 1], at)[0]
        torch.testing.assert_close(at_alpha, ordered[group], rtol=0, atol=1e-6 * float(x.abs().max()))
    code.encoder(groups)  # curve() above re-ran the encoder on one group: encode the batch again
    decoded = code.decoder(coded, torch.ones(4, n, dtype=torch.bool))  # identity computation
    plain = torchgcc.make_code("natural", num_inputs=k, num_workers=n)
    caller_order_error = (decoded - groups).abs().max()
    assert caller_order_error < 0.1 * (plain.decoder(coded, torch.ones(4, n, dtype=torch.bool)) - groups).abs().max()
    with pytest.raises(ValueError, match="last encoded batch \\(4 groups\\), got 2 groups"):
        code.decoder(coded[:2], torch.ones(2, n, dtype=torch.bool))


def test_centripetal_points_are_chebyshevs_for_equal_steps_and_follow_the_square_root_of_the_distances():
    k = 6
    chebyshev = np.sort(np.cos((2 * np.arange(1, k + 1) - 1) * np.pi / (2 * k)))
    torch.testing.assert_close(centripetal_points(torch.full((1, k - 1), 0.3)), torch.from_numpy(chebyshev)[None])
    distances = torch.tensor([[4.0, 1.0, 0.0, 9.0, 1.0]], dtype=torch.float64)
    steps = np.array([2.0, 1.0, 1e-3 * 7 / 5, 3.0, 1.0])  # sqrt, the zero raised to MIN_STEP of the mean step
    s = np.concatenate([[0], np.cumsum(steps)]) / steps.sum()
    expected = -np.cos(np.pi * (0.5 + (k - 1) * s) / k)
    torch.testing.assert_close(centripetal_points(distances), torch.from_numpy(expected)[None], rtol=1e-12, atol=0)
    assert MIN_STEP == 1e-3


def test_pc1_order_sorts_by_numpys_first_principal_component():
    generator = torch.Generator().manual_seed(8)
    x = torch.randn(1, 7, 5, generator=generator, dtype=torch.float64) * torch.tensor([3.0, 1, 0.5, 0.2, 0.1])
    encoder = RouteEncoder(torchgcc.GCC(7, 14).alpha, torchgcc.GCC(7, 14).beta, _spiral(40, dim=5), order="pc1")
    encoder(x)
    centred = x[0].numpy() - x[0].numpy().mean(axis=0)
    _, _, vh = np.linalg.svd(centred)
    expected = np.argsort(centred @ vh[0])
    order = encoder.last_order[0].numpy()
    assert (order == expected).all() or (order == expected[::-1]).all()


def test_decoder_at_per_group_points_equals_scipys_natural_spline_per_group():
    """lambda_dec = 0 with centripetal points: each group's estimates are scipy's natural cubic spline through its
    surviving results, evaluated at that group's points, put back in the caller's order."""
    reference, x = _spiral(300, seed=9), _spiral(24, seed=10)
    k, n = 6, 16
    code = RouteGCC(k, n, reference=reference, order="route", follow_paths=False, lambda_dec=0.0)
    groups = group_samples(x, k)
    coded = code.encoder(groups)
    results = torch.tanh(coded) @ torch.randn(10, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mask = torch.ones(len(groups), n, dtype=torch.bool)
    mask[:, 5:8] = False
    decoded = code.decoder(results, mask)
    beta = code.beta.numpy()
    for group in range(len(groups)):
        arrived = mask[group].numpy()
        matrix = natural_spline_reference(beta[arrived], code.encoder.last_alpha[group].numpy(), 0.0)
        estimates = matrix @ results[group, arrived].numpy()
        inverse = np.argsort(code.encoder.last_order[group].numpy())
        np.testing.assert_allclose(decoded[group].numpy(), estimates[inverse], rtol=1e-9, atol=1e-12)


def test_coded_samples_lie_closer_to_the_data_than_standard_gccs():
    """On a spiral: ordering shortens the curves, the graph pull bends them toward the data."""
    reference, x = _spiral(800, seed=6), _spiral(64, seed=7)
    k, n = 8, 32
    groups = group_samples(x, k)
    graph = ReferenceGraph(reference, neighbours=8)
    alpha, beta = torchgcc.GCC(k, n).alpha, torchgcc.GCC(k, n).beta
    standard = torchgcc.make_code("gcc", num_inputs=k, num_workers=n).encoder(groups)
    ordered = RouteEncoder(alpha, beta, graph, follow_paths=False)(groups)
    pulled = RouteEncoder(alpha, beta, graph, follow_paths=True, bandwidth_ratio=0.1)(groups)

    def distance(coded):
        return float(torch.cdist(coded.flatten(0, 1), reference).min(dim=1).values.mean())

    assert distance(pulled) < distance(ordered) < 0.5 * distance(standard)
    with pytest.raises(ValueError, match="order must be one of"):
        RouteEncoder(alpha, beta, graph, order="tsp")
    with pytest.raises(ValueError, match="points must be one of"):
        RouteEncoder(alpha, beta, graph, points="chord")
    with pytest.raises(ValueError, match="need a reference set"):
        RouteEncoder(alpha, beta, order="geodesic")


def test_the_default_route_encoder_needs_no_reference_and_equals_one_built_with_a_graph():
    """Straight-line route and centripetal points use only the group's own distances: a reference set changes
    nothing."""
    x = _spiral(32, seed=11)
    code = torchgcc.GCC(8, 24)
    groups = group_samples(x, 8)
    plain = RouteEncoder(code.alpha, code.beta)
    with_graph = RouteEncoder(code.alpha, code.beta, _spiral(200, seed=12))
    torch.testing.assert_close(plain(groups), with_graph(groups), rtol=0, atol=0)
    assert plain.order == "route" and plain.points == "centripetal" and not plain.follow_paths
    with pytest.raises(ValueError, match="inputs of 10 features"):
        with_graph(torch.zeros(2, 8, 3, dtype=torch.float64))


def test_the_ablation_keeps_the_callers_groups_for_the_encoder_rows():
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
    for row in manifold_study.ENCODERS:
        assert rows[row]["same_groups_as_standard"] and rows[row]["group_hash"] == rows["standard"]["group_hash"]
    assert not rows["regroup"]["same_groups_as_standard"]
    for record in rows.values():
        assert record["distance_to_data"] > 0 and record["distance_to_group"] > 0 and "distance_to_manifold" in record
        low, middle, high = record["distance_to_data_quantiles"]
        assert 0 < low <= middle <= high
        assert math.isfinite(record["mse_ci"]) and len(record["seeds"]) == 2
    assert rows["standard"]["ratio"] == pytest.approx(1.0)
    per_seed = {(r["scheme"], r["seed"]): r["mse"] for r in result.extra["per_seed"]}
    effects = {e["component"]: e for e in manifold_study.component_effects(result.extra)}
    pull = effects["graph pull (geodesic, centripetal)"]
    expected = [per_seed["full", seed] / per_seed["geodesic_centripetal", seed] for seed in (0, 1)]
    assert pull["ratio"] == pytest.approx(sum(expected) / 2) and pull["S"] == 4
    table = manifold_study.docs_table(result.extra, table="components")
    assert table.count("\n") == 1 + len(manifold_study.CONTRASTS) and "S=4: " in table
    assert manifold_study.group_hash(torch.tensor([[2, 1], [0, 3]])) == manifold_study.group_hash(
        torch.tensor([[3, 0], [1, 2]])
    )


def _brute_force_length(d: list[list[float]]) -> float:
    return min(sum(d[a][b] for a, b in zip(p, p[1:])) for p in itertools.permutations(range(len(d))))


def test_route_with_infinite_distances_visits_every_point_and_is_the_shortest_by_brute_force():
    """An infinite distance is an edge of infinite length: Held-Karp never relaxed through it, and returned [0] for
    three points."""
    inf = math.inf
    assert sorted(shortest_hamiltonian_path(torch.tensor([[0, inf, inf], [inf, 0, 1], [inf, 1, 0.0]]))) == [0, 1, 2]
    generator = torch.Generator().manual_seed(5)
    for k in (3, 4, 5, 6, 7, 14):  # 14: the greedy route beyond EXACT_ROUTE_MAX
        for _ in range(4):
            d = torch.rand(k, k, generator=generator, dtype=torch.float64)
            d = torch.where(torch.rand(k, k, generator=generator) < 0.4, inf, d)
            d = torch.minimum(d, d.T).fill_diagonal_(0.0)
            route = shortest_hamiltonian_path(d)
            assert sorted(route) == list(range(k))
            if k <= 7:
                length = sum(float(d[a, b]) for a, b in zip(route, route[1:]))
                assert length == pytest.approx(_brute_force_length(d.tolist()), rel=1e-12)


@pytest.mark.parametrize(
    "distances, error, message",
    [
        (torch.rand(3, 4), ValueError, "distances must be a square"),  # was routed: [2, 1, 0]
        (torch.tensor([[0.0, math.nan], [math.nan, 0.0]]).repeat(2, 2), ValueError, "distances must not be NaN"),
        (torch.zeros(3, 3, dtype=torch.complex64), TypeError, "distances must hold real numbers"),
    ],
)
def test_route_refuses_distances_that_are_not_a_real_square_matrix(distances, error, message):
    with pytest.raises(error, match=message):
        shortest_hamiltonian_path(distances)


def test_route_encoder_names_x_for_non_finite_or_overflowing_inputs():
    """These failed deep inside with 'needs at least 2 knots', 'expected sequence of length 1' and an IndexError."""
    x = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with_nan = x.clone()
    with_nan[0, 0, 0] = math.nan
    graph = RouteGCC(4, 12, reference=_spiral(50, dim=3), follow_paths=True, neighbours=5)
    for code, inputs, message in [
        (RouteGCC(4, 12, lambda_dec=1e-4), x * 1e200, "x: the distances .* overflow float64"),
        (RouteGCC(4, 12, lambda_dec=1e-4), with_nan, "x must be finite, got nan at index \\(0, 0, 0\\)"),
        (graph, x * 1e200, "x: the distances .* overflow float64"),
    ]:
        with pytest.raises(ValueError, match=message):
            code.encoder(inputs)


def test_reference_graph_names_the_argument_for_bad_shapes_and_nan():
    graph = ReferenceGraph(_spiral(30, dim=3), neighbours=5)
    for x in (torch.rand(4, 3), torch.rand(2, 4, 2)):
        with pytest.raises(ValueError, match="x must have shape \\(B, K, D=3\\)"):
            graph.geodesics(x)
    reference = _spiral(30, dim=3)
    reference[7, 1] = math.nan  # was reported as a graph that is not connected
    with pytest.raises(ValueError, match="reference must be finite, got nan at index \\(7, 1\\)"):
        ReferenceGraph(reference, neighbours=5)
