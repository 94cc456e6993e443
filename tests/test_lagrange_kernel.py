"""LCC's Lagrange matrices against an exact product-formula reference, and the kernel smoother's CPU solves at
n >= 256 against scipy (torch's batched CPU LU fails there once torch.set_num_threads has been called)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import scipy.linalg
import torch

import torchgcc
from torchgcc.functional import cubic_spline_kernel, kernel_smoother_matrix, lagrange_matrix
from torchgcc.functional.lagrange import chebyshev_vandermonde, lagrange_basis


def product_formula_reference(nodes: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """``L_j(x) = prod_{m != j} (x - t_m) / (t_j - t_m)`` in 60-digit arithmetic (mpmath), rounded to float64."""
    with mpmath.workdps(60):
        t = [mpmath.mpf(float(value)) for value in nodes]
        rows = [
            [
                float(mpmath.fprod((mpmath.mpf(float(x)) - t_m) / (t_j - t_m) for m, t_m in enumerate(t) if m != j))
                for j, t_j in enumerate(t)
            ]
            for x in points
        ]
    return torch.tensor(rows, dtype=torch.float64)


def test_lcc_decode_matrix_on_clustered_survivors_is_the_product_formula():
    """K = 8, N = 40, degree 2: 15 survivors (the threshold), clustered at the start."""
    survivors = [0, 1, 2, 3, 4, 7, 8, 9, 12, 17, 18, 21, 29, 30, 32]
    code = torchgcc.LCC(8, 40, degree=2)
    mask = torch.zeros(1, 40, dtype=torch.bool)
    mask[0, survivors] = True
    decode = code.decoder.decode_matrix(mask)[0]  # (K, N), zero in straggler columns
    reference = product_formula_reference(code.beta[survivors], code.alpha)
    assert decode[:, [i for i in range(40) if i not in survivors]].abs().max() == 0
    relative = (decode[:, survivors] - reference).abs().max() / reference.abs().max()
    assert relative < 1e-12
    assert (
        (decode[:, survivors] - reference).abs() / reference.abs()
    ).max() < 1e-12  # every entry, not just the largest


@pytest.mark.parametrize("n", [2, 5, 16])
def test_lagrange_basis_interpolates_and_matches_the_reference(n):
    generator = torch.Generator().manual_seed(n)
    nodes = torch.rand(2, n, generator=generator, dtype=torch.float64) * 2 - 1
    points = torch.cat([torch.rand(2, 6, generator=generator, dtype=torch.float64) * 2 - 1, nodes[:, :2]], dim=1)
    basis = lagrange_basis(nodes, points)  # batched, with points ON nodes: unit rows there
    assert basis.shape == (2, 8, n)
    for b in range(2):
        torch.testing.assert_close(basis[b], product_formula_reference(nodes[b], points[b]), rtol=1e-12, atol=0)
    torch.testing.assert_close(basis[:, 6:], torch.eye(n, dtype=torch.float64)[:2].expand(2, 2, n))
    torch.testing.assert_close(lagrange_matrix(nodes, points), basis, rtol=0, atol=0)


def test_lagrange_basis_neither_overflows_nor_underflows():
    """60 equispaced nodes on [-1e-6, 1e-6]: the weights' products prod_m (t_j - t_m) underflow float64, the entries
    (scale-free) do not."""
    nodes = 1e-6 * torch.linspace(-1, 1, 60, dtype=torch.float64)
    points = 1e-6 * torch.tensor([0.0012, -0.9901], dtype=torch.float64)
    assert torch.prod(torch.cat([nodes[30] - nodes[:30], nodes[31:] - nodes[30]])) == 0  # a naive weight underflows
    basis = lagrange_basis(nodes, points)
    assert torch.isfinite(basis).all()
    torch.testing.assert_close(basis, product_formula_reference(nodes, points), rtol=1e-12, atol=0)


def test_lagrange_basis_of_padded_node_sets_ignores_the_padding():
    """Sets of 3 and 5 valid nodes padded to 6, with a point on a valid node (its unit row) and one on a padding
    node's value (an ordinary row: padding is not a node)."""
    nodes = torch.tensor([[-0.9, -0.2, 0.4, 0.0, 0.0, 0.0], [-1.0, -0.5, 0.1, 0.6, 0.95, 0.3]], dtype=torch.float64)
    valid = torch.arange(6) < torch.tensor([[3], [5]])
    points = torch.tensor([[-0.2, 0.0, 0.77], [0.3, 0.6, -0.33]], dtype=torch.float64)
    basis = lagrange_basis(nodes, points, valid)
    for b, count in enumerate((3, 5)):
        reference = product_formula_reference(nodes[b, :count], points[b])
        torch.testing.assert_close(basis[b, :, :count], reference, rtol=1e-12, atol=0)
        assert (basis[b, :, count:] == 0).all()
    assert basis[0, 0].tolist() == [0.0, 1.0, 0.0, 0.0, 0.0, 0.0] and basis[1, 1].tolist() == [0, 0, 0, 1, 0, 0]


@pytest.mark.parametrize("degree", [0, 1, 6, 7, 21, 60])
def test_chebyshev_vandermonde_matches_mpmath(degree):
    """``T_k`` on [-1, 1] (ends, points near them, zero) to ``(3 pi k + 1) u`` absolute: ``cos(k arccos x)`` with
    ``arccos`` good to an ulp of its angle (at most ``2 pi u``), the product ``k theta`` rounded once and ``cos``
    once; ``|T_k| <= 1``, and the recurrence used for ``k <= 6`` errs by less."""
    x = torch.cat(
        [
            torch.linspace(-1, 1, 41, dtype=torch.float64),
            torch.tensor([1 - 2**-40, -1 + 1e-9, 0.9999999, 1e-17], dtype=torch.float64),
        ]
    )
    matrix = chebyshev_vandermonde(x, degree)
    with mpmath.workdps(50):
        reference = [[float(mpmath.chebyt(k, mpmath.mpf(float(v)))) for k in range(degree + 1)] for v in x]
    error = (matrix - torch.tensor(reference, dtype=torch.float64)).abs()
    unit = torch.finfo(torch.float64).eps / 2
    assert matrix.shape == (len(x), degree + 1)
    assert (error <= (3 * math.pi * torch.arange(degree + 1) + 1) * unit).all(), error.max()


def scipy_kernel_smoother(knots: np.ndarray, points: np.ndarray, lam: float) -> np.ndarray:
    """The same saddle-point system, assembled in numpy and solved by scipy (LAPACK gesv), one matrix."""
    n = len(knots)
    gram = np.abs(knots[:, None] - knots[None, :]) ** 3 / 12 + n * lam * np.eye(n)
    poly = np.stack([np.ones(n), knots], axis=1)
    system = np.block([[gram, poly], [poly.T, np.zeros((2, 2))]])
    coefficients = scipy.linalg.solve(system, np.vstack([np.eye(n), np.zeros((2, n))]))
    basis = np.hstack([np.abs(points[:, None] - knots[None, :]) ** 3 / 12, np.stack([np.ones(len(points)), points], 1)])
    return basis @ coefficients


@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_smoother_batched_on_cpu_at_n_256_and_more_matches_scipy(threads):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        generator = torch.Generator().manual_seed(0)
        knots = (torch.rand(3, 300, generator=generator, dtype=torch.float64) * 2 - 1).sort(dim=-1).values
        points = torch.linspace(-0.9, 0.9, 7, dtype=torch.float64).expand(3, 7)
        matrices = kernel_smoother_matrix(knots, points, torch.tensor([1e-6, 1e-4, 1e-2], dtype=torch.float64))
    finally:
        torch.set_num_threads(previous)
    assert matrices.shape == (3, 7, 300)
    for b, lam in enumerate((1e-6, 1e-4, 1e-2)):
        expected = scipy_kernel_smoother(knots[b].numpy(), points[b].numpy(), lam)
        np.testing.assert_allclose(matrices[b].numpy(), expected, rtol=0, atol=1e-8 * np.abs(expected).max())
    assert cubic_spline_kernel(knots, knots).shape == (3, 300, 300)


@pytest.mark.parametrize("degree, error", [(-1, ValueError), (2.5, ValueError), (True, TypeError), ("3", TypeError)])
def test_chebyshev_vandermonde_refuses_a_degree_that_is_not_a_nonnegative_integer(degree, error):
    """-1 gave an empty (P, 0) matrix and 2.5 four columns (degree 3) before."""
    with pytest.raises(error, match="degree must be an integer >= 0"):
        chebyshev_vandermonde(torch.linspace(-1, 1, 6, dtype=torch.float64), degree)
