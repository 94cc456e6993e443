"""The pure matrix builders against scipy, csaps, textbook formulas and each other."""

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from references import berrut_reference, csaps_reference, natural_spline_reference

from torchgcc.functional import (
    berrut_matrix,
    compact_survivors,
    kernel_smoother_matrix,
    lagrange_matrix,
    padded_spline_matrices,
    pentadiagonal_plan,
    smoothing_spline_matrix,
    solve_pentadiagonal,
    survivor_layout,
)
from torchgcc.functional.berrut import padded_berrut_matrices
from torchgcc.functional.lagrange import padded_lagrange_matrices
from torchgcc.points import chebyshev_first_kind, chebyshev_second_kind


@pytest.mark.parametrize("m", [1, 2, 3, 5, 9, 22, 23, 46, 47, 62, 100, 300, 1100])
def test_pentadiagonal_solve_matches_a_dense_solve_in_the_padded_layout(m):
    """Systems of every size up to m in one batch, identity rows past each one's own size: each solution equals
    torch.linalg.solve of its own dense matrix, and is zero in the padding."""
    generator = torch.Generator().manual_seed(m)
    plan = pentadiagonal_plan(m)
    sizes = torch.tensor([m, max(m - 1, 1), max(m // 2, 1)])
    row = torch.arange(plan.size)
    draw = lambda *shape: torch.rand(*shape, generator=generator, dtype=torch.float64)  # noqa: E731
    diag = torch.where(row < sizes[:, None], 4 + draw(3, plan.size), 1.0)
    off1 = torch.where(row < sizes[:, None] - 1, draw(3, plan.size), 0.0)
    off2 = torch.where(row < sizes[:, None] - 2, 0.5 * draw(3, plan.size), 0.0)
    rhs = torch.where(
        (row < sizes[:, None]).unsqueeze(-1),
        torch.randn(3, plan.size, 4, generator=generator, dtype=torch.float64),
        0.0,
    )
    x = solve_pentadiagonal(torch.stack([diag, off1, off2], -1), rhs, plan)
    transposed = solve_pentadiagonal(torch.stack([diag, off1, off2]).permute(1, 2, 0), rhs.mT.contiguous().mT, plan)
    assert torch.equal(transposed, x)  # non-contiguous inputs give the same solution
    for b, n in enumerate(sizes.tolist()):
        dense = torch.diag(diag[b, :n])
        for k, band in ((1, off1), (2, off2)):
            index = torch.arange(max(n - k, 0))
            dense[index, index + k] = dense[index + k, index] = band[b, : len(index)]
        cond = torch.linalg.cond(dense).item()
        # a backward-stable solve: error of order cond * eps * |x|
        torch.testing.assert_close(x[b, :n], torch.linalg.solve(dense, rhs[b, :n]), rtol=0, atol=50 * cond * 2.2e-16)
        assert (x[b, n:] == 0).all()


@pytest.mark.parametrize("m", [1, 4, 47, 130, 300, 2000])
def test_pentadiagonal_solve_with_trace_matches_dense_inverse(m):
    """trace_with gives tr(A^-1 T) of the dense inverse (selected inversion reads only band entries of A^-1), and
    the solution is unchanged."""
    generator = torch.Generator().manual_seed(m)
    plan = pentadiagonal_plan(m)
    row = torch.arange(plan.size)

    def bands(base: float):
        draw = lambda: torch.rand(2, plan.size, generator=generator, dtype=torch.float64)  # noqa: E731
        return torch.stack(
            [
                torch.where(row < m, base + draw(), 0.0 if base == 0 else 1.0),
                torch.where(row < m - 1, draw(), 0.0),
                torch.where(row < m - 2, 0.5 * draw(), 0.0),
            ],
            -1,
        )

    def dense(bands):
        diag, off1, off2 = bands.unbind(-1)
        matrix = torch.diag_embed(diag[:, :m])
        for k, band in ((1, off1), (2, off2)):
            index = torch.arange(max(m - k, 0))
            matrix[:, index, index + k] = matrix[:, index + k, index] = band[:, : len(index)]
        return matrix

    system, other = bands(4.0), bands(0.0)
    rhs = torch.where(
        (row < m).view(1, -1, 1), torch.randn(2, plan.size, 3, generator=generator, dtype=torch.float64), 0
    )
    x, trace = solve_pentadiagonal(system, rhs, plan, trace_with=other)
    # numpy's LAPACK, one matrix at a time: torch's batched CPU LU (MKL) spins forever in a process that has called
    # torch.set_num_threads(n > 1) before (conftest's restore and helpers.profiled do; torchgcc/functional/kernel.py)
    inverse = torch.from_numpy(np.linalg.inv(dense(system).numpy()))
    expected = (inverse @ dense(other)).diagonal(dim1=1, dim2=2).sum(-1)
    torch.testing.assert_close(trace, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x[:, :m], inverse @ rhs[:, :m], rtol=1e-12, atol=1e-12)
    assert (x[:, m:] == 0).all()


@settings(max_examples=30, deadline=None)
@given(n=st.integers(min_value=2, max_value=40), seed=st.integers(min_value=0, max_value=2**16))
def test_padded_spline_matrices_equal_each_sets_own_matrix(n, seed):
    """Knot sets of different sizes (the survivors of random masks) padded to one width give, set by set, the
    matrix of smoothing_spline_matrix on that set's knots alone, zero in the padding."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(5, n, generator=generator) < 0.7
    mask[:, :2] = True  # at least two knots per set
    points = torch.linspace(-1.2, 1.2, 9, dtype=torch.float64)
    survivors = compact_survivors(mask, survivor_layout(chebyshev_second_kind(n)))
    lam = torch.tensor([0.0, 1e-6, 1e-3, 1e-1, 10.0], dtype=torch.float64)
    matrices = padded_spline_matrices(survivors.knots, survivors.counts, points, survivors.counts * lam)
    for b in range(5):
        count = int(survivors.counts[b])
        own = smoothing_spline_matrix(chebyshev_second_kind(n)[mask[b]], points, lam[b].item())
        torch.testing.assert_close(matrices[b, :, :count], own, rtol=0, atol=1e-10)
        assert (matrices[b, :, count:] == 0).all()
    berrut = padded_berrut_matrices(survivors.knots, survivors.valid, points)
    lagrange = padded_lagrange_matrices(survivors.knots, survivors.counts, survivors.valid, points, 3)
    for b in range(5):
        nodes, count = chebyshev_second_kind(n)[mask[b]], int(survivors.counts[b])
        torch.testing.assert_close(berrut[b, :, :count], berrut_matrix(nodes, points), rtol=0, atol=1e-12)
        expected = lagrange_matrix(nodes, points, min(3, count - 1))
        torch.testing.assert_close(lagrange[b, :, :count], expected, rtol=0, atol=1e-8)
        assert (berrut[b, :, count:] == 0).all() and (lagrange[b, :, count:] == 0).all()


def test_compacted_survivors_are_sorted_with_padding_knots_beyond_the_points():
    """Survivors first in ascending order, then the stragglers (their points shifted past PAD_START), then the slots
    past N of a wider layout; the order is the permutation back to the slots."""
    mask = torch.tensor([[True, False, True, True], [False, False, True, False]])
    survivors = compact_survivors(mask, survivor_layout(torch.tensor([-1.0, -0.5, 0.5, 1.0]), width=6))
    assert survivors.order.tolist() == [[0, 2, 3, 1, 4, 5], [2, 0, 1, 3, 4, 5]]
    assert survivors.counts.tolist() == [3, 1]
    assert survivors.knots.tolist() == [[-1.0, 0.5, 1.0, 3.5, 7.0, 8.0], [0.5, 3.0, 3.5, 5.0, 7.0, 8.0]]
    assert survivors.valid.tolist() == [[True] * 3 + [False] * 3, [True] + [False] * 5]


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


NAN, INF = float("nan"), float("inf")
KNOTS = torch.linspace(-1, 1, 6, dtype=torch.float64)
POINTS = torch.tensor([-0.5, 0.3, 0.9], dtype=torch.float64)


@pytest.mark.parametrize(
    "call, error, name",
    [
        (lambda: lagrange_matrix(KNOTS, POINTS, degree=2.5), ValueError, "degree"),  # was silently degree 3
        (lambda: lagrange_matrix(KNOTS, POINTS, degree=True), TypeError, "degree"),  # was silently degree 1
        (lambda: lagrange_matrix(KNOTS, POINTS, degree="2"), TypeError, "degree"),
        (lambda: lagrange_matrix(KNOTS, POINTS, degree=6), ValueError, "degree=6"),
        (lambda: lagrange_matrix(torch.tensor([0.0, NAN, 1.0]), POINTS), ValueError, "nodes"),  # was all NaN
        (lambda: lagrange_matrix(KNOTS, torch.tensor([0.0, INF])), ValueError, "points"),
        (lambda: lagrange_matrix(torch.tensor(0.5), POINTS), ValueError, "nodes"),
        (lambda: lagrange_matrix(torch.zeros(0), POINTS), ValueError, "nodes"),
        (lambda: kernel_smoother_matrix(KNOTS, POINTS, -1.0), ValueError, "lam"),  # was an indefinite "smoother"
        (lambda: kernel_smoother_matrix(KNOTS, POINTS, NAN), ValueError, "lam"),  # was all NaN
        (lambda: kernel_smoother_matrix(KNOTS, POINTS, torch.tensor([0.0, -1e-3])), ValueError, "lam"),
        (lambda: kernel_smoother_matrix(torch.tensor([0.0, NAN, 1.0]), POINTS), ValueError, "knots"),  # was NaN
        (lambda: kernel_smoother_matrix(torch.tensor([0.0, 0.0, 1.0]), POINTS), ValueError, "knots"),
        (lambda: kernel_smoother_matrix(torch.tensor([0.5]), POINTS), ValueError, "knots"),
        (lambda: kernel_smoother_matrix(KNOTS, POINTS, "1e-3"), TypeError, "lam"),
        (lambda: kernel_smoother_matrix(KNOTS, POINTS, null_space_degree=1.5), ValueError, "null_space_degree"),
        (lambda: berrut_matrix(KNOTS, torch.tensor([INF])), ValueError, "points"),  # was a row of NaN
        (lambda: berrut_matrix(KNOTS.to(torch.complex128) + 1j, POINTS), TypeError, "nodes"),  # was the real part
        (lambda: berrut_matrix(KNOTS, POINTS.to(torch.complex128)), TypeError, "points"),
        (lambda: berrut_matrix(torch.tensor(0.5), POINTS), ValueError, "nodes"),
        (lambda: berrut_matrix(KNOTS.tolist(), POINTS), TypeError, "nodes"),
        (lambda: berrut_matrix(KNOTS.expand(2, 6), POINTS.expand(3, 3)), ValueError, "nodes \\(2,\\), points \\(3,\\)"),
        (lambda: smoothing_spline_matrix(KNOTS, torch.tensor([NAN])), ValueError, "points"),  # was a row of NaN
        (lambda: smoothing_spline_matrix(KNOTS, torch.tensor(0.5)), ValueError, "points"),
        (lambda: smoothing_spline_matrix(torch.tensor([-INF, 0.0, 1.0]), POINTS), ValueError, "knots"),
        (lambda: smoothing_spline_matrix(KNOTS, POINTS.to(torch.complex64)), TypeError, "points"),
        (lambda: smoothing_spline_matrix(KNOTS, POINTS, "0.1"), TypeError, "lam"),
        (lambda: smoothing_spline_matrix(KNOTS.expand(2, 6), POINTS, torch.zeros(3)), ValueError, "lam \\(3,\\)"),
    ],
)
def test_functional_builders_refuse_bad_arguments_naming_them(call, error, name):
    with pytest.raises(error, match=name) as raised:
        call()
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("degree", [np.int64(2), 2])
def test_lagrange_matrix_takes_integer_degrees_and_matches_numpys_least_squares(degree):
    nodes, points = KNOTS.numpy(), POINTS.numpy()
    design = np.polynomial.chebyshev.chebvander(nodes, 2)
    reference = np.polynomial.chebyshev.chebvander(points, 2) @ np.linalg.pinv(design)
    np.testing.assert_allclose(lagrange_matrix(KNOTS, POINTS, degree).numpy(), reference, rtol=0, atol=1e-14)


def test_no_evaluation_points_give_an_empty_matrix():
    for build in (berrut_matrix, lagrange_matrix, smoothing_spline_matrix, kernel_smoother_matrix):
        assert build(KNOTS, torch.zeros(0)).shape == (0, 6)


def test_kernel_smoother_at_its_fewest_knots_is_the_line_through_them():
    """Two knots (the fewest with lines unpenalised): the line through the data, whatever lam."""
    knots = torch.tensor([-0.5, 0.5], dtype=torch.float64)
    line = torch.stack([(0.5 - POINTS), (POINTS + 0.5)], dim=-1)  # the Lagrange weights of a line
    for lam in (0.0, 1e-2):
        torch.testing.assert_close(kernel_smoother_matrix(knots, POINTS, lam), line, rtol=0, atol=1e-14)
