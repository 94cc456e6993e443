"""The pure matrix builders against scipy, csaps, textbook formulas and each other."""

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from references import berrut_reference, csaps_reference, natural_spline_reference

from torchgcc.functional import (
    berrut_matrix,
    kernel_smoother_matrix,
    lagrange_matrix,
    pentadiagonal_ldl,
    pentadiagonal_solve,
    smoothing_spline_matrix,
)
from torchgcc.points import chebyshev_first_kind, chebyshev_second_kind


def test_pentadiagonal_solve_matches_dense_solve():
    generator = torch.Generator().manual_seed(0)
    m = 9
    diag = 4 + torch.rand(3, m, generator=generator, dtype=torch.float64)
    off1 = torch.rand(3, m - 1, generator=generator, dtype=torch.float64)
    off2 = 0.5 * torch.rand(3, m - 2, generator=generator, dtype=torch.float64)
    dense = torch.diag_embed(diag) + torch.diag_embed(off1, 1) + torch.diag_embed(off1, -1)
    dense = dense + torch.diag_embed(off2, 2) + torch.diag_embed(off2, -2)
    rhs = torch.randn(3, m, 4, generator=generator, dtype=torch.float64)
    x = pentadiagonal_solve(pentadiagonal_ldl(diag, off1, off2), rhs)
    torch.testing.assert_close(x, torch.linalg.solve(dense, rhs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [3, 5, 17, 64, 512])
def test_natural_interpolating_spline_matches_scipy_cubic_spline(n):
    knots = chebyshev_second_kind(n)
    points = torch.linspace(-1.3, 1.3, 41, dtype=torch.float64)  # inside and beyond the knots
    matrix = smoothing_spline_matrix(knots, points, 0.0)
    expected = natural_spline_reference(knots.numpy(), points.numpy(), 0.0)
    np.testing.assert_allclose(matrix.numpy(), expected, atol=1e-8)


# scipy's B-spline normal equations lose digits as n * lam grows (about 1e-7 at n = 512, lam = 1e-4); csaps,
# below, covers the large-lam range to 1e-8.
@pytest.mark.parametrize(
    "n, lam", [(5, 1e-2), (5, 1e-4), (12, 1e-2), (12, 1e-7), (64, 1e-4), (64, 1e-7), (512, 1e-7), (512, 1e-9)]
)
def test_smoothing_spline_matches_scipy_make_smoothing_spline(n, lam):
    knots = chebyshev_second_kind(n)
    points = chebyshev_first_kind(16)
    matrix = smoothing_spline_matrix(knots, points, lam)
    np.testing.assert_allclose(matrix.numpy(), natural_spline_reference(knots.numpy(), points.numpy(), lam), atol=1e-8)


@pytest.mark.parametrize("n", [2, 3, 6, 40, 512])
@pytest.mark.parametrize("lam", [0.0, 1e-6, 1e-2, 10.0, 1e4])
def test_smoothing_spline_matches_csaps(n, lam):
    knots = chebyshev_second_kind(n)
    points = chebyshev_first_kind(10) * 0.999  # strictly inside the hull, where csaps agrees
    matrix = smoothing_spline_matrix(knots, points, lam)
    np.testing.assert_allclose(matrix.numpy(), csaps_reference(knots.numpy(), points.numpy(), lam), atol=1e-8)


def test_extrapolation_is_linear_beyond_the_outermost_knots():
    generator = torch.Generator().manual_seed(3)
    knots = torch.sort(torch.rand(9, generator=generator, dtype=torch.float64) - 0.5).values
    y = torch.randn(9, generator=generator, dtype=torch.float64)
    left = torch.linspace(-1.0, knots[0].item(), 7, dtype=torch.float64)
    values = smoothing_spline_matrix(knots, left, 1e-3) @ y
    second_differences = values.diff().diff()
    assert second_differences.abs().max() < 1e-12


@pytest.mark.parametrize("lam", [0.0, 1e-5, 1e-2])
def test_kernel_form_equals_spline_form(lam):
    knots = chebyshev_second_kind(14)
    points = torch.linspace(-1, 1, 23, dtype=torch.float64)
    torch.testing.assert_close(
        kernel_smoother_matrix(knots, points, lam), smoothing_spline_matrix(knots, points, lam), atol=1e-9, rtol=0
    )


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(min_value=2, max_value=30),
    lam=st.sampled_from([0.0, 1e-8, 1e-4, 1e-1, 100.0]),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_rows_sum_to_one_and_lines_are_reproduced(n, lam, seed):
    generator = torch.Generator().manual_seed(seed)
    knots = torch.sort(2 * torch.rand(n, generator=generator, dtype=torch.float64) - 1).values
    assume(bool((knots.diff() >= 1e-3).all()))  # nearly coincident knots: a different (ill-conditioned) question
    points = 2.4 * torch.rand(13, generator=generator, dtype=torch.float64) - 1.2
    matrix = smoothing_spline_matrix(knots, points, lam)
    torch.testing.assert_close(matrix.sum(-1), torch.ones(13, dtype=torch.float64), atol=1e-9, rtol=0)
    line = 0.3 - 1.7 * knots
    torch.testing.assert_close(matrix @ line, 0.3 - 1.7 * points, atol=1e-9, rtol=0)


def test_mirror_symmetric_points_give_mirror_symmetric_matrices():
    knots, points = chebyshev_second_kind(11), chebyshev_first_kind(6)
    matrix = smoothing_spline_matrix(knots, points, 1e-4)
    torch.testing.assert_close(matrix, matrix.flip(0).flip(1), atol=1e-12, rtol=0)


def test_batched_matches_one_by_one_and_lam_broadcasts():
    knots = torch.stack([chebyshev_second_kind(8), torch.linspace(-1, 1, 8, dtype=torch.float64)])
    points = chebyshev_first_kind(5)
    lams = torch.tensor([0.0, 1e-3], dtype=torch.float64)
    batched = smoothing_spline_matrix(knots, points, lams)
    for i in range(2):
        torch.testing.assert_close(batched[i], smoothing_spline_matrix(knots[i], points, lams[i].item()))


def test_gradcheck_with_respect_to_knots_points_and_lam():
    knots = torch.tensor([-1.0, -0.4, 0.1, 0.5, 1.0], dtype=torch.float64, requires_grad=True)
    points = torch.tensor([-1.2, -0.3, 0.7], dtype=torch.float64, requires_grad=True)
    lam = torch.tensor(1e-2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(smoothing_spline_matrix, (knots, points, lam))


@pytest.mark.parametrize("bad", [torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.0, 1.0, 0.5])])
def test_spline_rejects_unsorted_or_duplicate_knots(bad):
    with pytest.raises(ValueError, match="strictly increasing"):
        smoothing_spline_matrix(bad, torch.zeros(2), 0.0)


def test_spline_rejects_negative_lambda_and_single_knot():
    with pytest.raises(ValueError, match="lam"):
        smoothing_spline_matrix(chebyshev_second_kind(4), torch.zeros(1), -1.0)
    with pytest.raises(ValueError, match="at least 2"):
        smoothing_spline_matrix(torch.zeros(1), torch.zeros(1), 0.0)


@pytest.mark.parametrize("n", [1, 2, 7, 30])
def test_berrut_matches_definition_and_interpolates(n):
    nodes = chebyshev_second_kind(n) if n > 1 else torch.zeros(1, dtype=torch.float64)
    points = torch.cat([chebyshev_first_kind(9), nodes[: min(n, 3)]])  # includes exact node hits
    matrix = berrut_matrix(nodes, points)
    np.testing.assert_allclose(matrix.numpy(), berrut_reference(nodes.numpy(), points.numpy()), atol=1e-12)
    torch.testing.assert_close(matrix.sum(-1), torch.ones(len(points), dtype=torch.float64))


@pytest.mark.parametrize("degree", [0, 1, 3, 6])
def test_lagrange_reproduces_polynomials_exactly(degree):
    nodes = chebyshev_second_kind(degree + 1 + 4)  # more nodes than needed: least squares, still exact
    points = torch.linspace(-1, 1, 11, dtype=torch.float64)
    coefficients = torch.arange(1, degree + 2, dtype=torch.float64)
    poly = lambda t: sum(c * t**k for k, c in enumerate(coefficients))  # noqa: E731
    torch.testing.assert_close(lagrange_matrix(nodes, points, degree) @ poly(nodes), poly(points), atol=1e-10, rtol=0)
    exact = lagrange_matrix(nodes[: degree + 1], points)
    np.testing.assert_allclose(
        (exact @ poly(nodes[: degree + 1])).numpy(),
        np.polynomial.polynomial.polyval(points.numpy(), coefficients.numpy()),
        atol=1e-10,
    )


def test_lagrange_needs_enough_nodes():
    with pytest.raises(ValueError, match="at least 4 nodes"):
        lagrange_matrix(chebyshev_second_kind(3), torch.zeros(1), degree=3)
