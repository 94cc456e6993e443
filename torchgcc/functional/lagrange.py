"""Polynomial interpolation and least-squares fits as linear maps (the LCC baseline).

The polynomial of degree ``r`` that fits data at ``n >= r + 1`` nodes in the least-squares sense (exactly, when
``n = r + 1`` or the data are a polynomial of degree <= r) is evaluated at other points.

- Interpolation (``r = n - 1``, LCC at its recovery threshold) uses the Lagrange basis by its product formula,
  ``L_j(x) = prod_{m != j} (x - t_m) / (t_j - t_m)``: every entry is a product of ``n - 1`` correctly rounded
  ratios, so its relative error is at most about ``3 n`` units in the last place however the nodes cluster
  (a pseudo-inverse of a Vandermonde matrix loses digits with its condition number: 1.3e-7 relative on clustered
  survivors where the product formula is 1e-16).
- A least-squares fit (``r < n - 1``) uses the Chebyshev basis, well conditioned on [-1, 1] for spread nodes, and a
  Householder QR in float64 (backward stable, as an SVD-based pseudo-inverse is, and with no host read: torch's SVD
  checks its convergence on the host, a synchronisation on CUDA).
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = [
    "chebyshev_vandermonde",
    "lagrange_basis",
    "lagrange_matrix",
    "least_squares_map",
    "padded_lagrange_matrices",
]


def chebyshev_vandermonde(x: torch.Tensor, degree: int) -> torch.Tensor:
    """``(..., P, degree + 1)`` matrix of Chebyshev polynomials ``T_0 .. T_degree`` at ``x`` ``(..., P)``."""
    columns = [torch.ones_like(x), x]
    for _ in range(2, degree + 1):
        columns.append(2 * x * columns[-1] - columns[-2])
    return torch.stack(columns[: degree + 1], dim=-1)


def least_squares_map(basis_at_nodes: torch.Tensor, basis_at_points: torch.Tensor) -> torch.Tensor:
    """``basis_at_points @ pinv(basis_at_nodes)``: ``(..., P, n)``, the least-squares fit's values at the points as a
    map of the data at the nodes, for ``basis_at_nodes`` ``(..., n, r + 1)`` of full column rank and
    ``basis_at_points`` ``(..., P, r + 1)`` (broadcast). Zero rows of ``basis_at_nodes`` (padding) give zero columns;
    a rank-deficient one gives non-finite entries (no error, no host read)."""
    q, r = torch.linalg.qr(basis_at_nodes)  # reduced: (..., n, r + 1), (..., r + 1, r + 1)
    return torch.linalg.solve_triangular(r, basis_at_points, upper=True, left=False) @ q.mT


def lagrange_basis(nodes: torch.Tensor, points: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``(..., P, n)`` matrix ``L_j(x_p) = prod_{m != j} (x_p - t_m) / (t_j - t_m)`` of the Lagrange basis of the
    distinct float64 ``nodes`` ``(..., n)`` at ``points`` ``(..., P)``: the interpolating polynomial's values are
    ``L @ y``. With ``valid`` ``(..., n)`` bool, only the valid nodes form the basis (the product skips the others,
    whose columns are zero): node sets of different sizes padded to one width.

    The product runs over ``m`` with the running value kept as mantissa and binary exponent (``torch.frexp``, exact),
    so no intermediate product overflows or underflows when the entry itself is representable. O(P n^2) work,
    O(P n) memory, ``n`` steps. The exponent is kept in float64 (integer values, exact): ``frexp``'s int32 exponent
    converted to float64 in the same kernel is C++ that torch.compile's CPU code generator fails to compile.
    """
    n = nodes.shape[-1]
    x = points.unsqueeze(-1)  # (..., P, 1)
    t = nodes.unsqueeze(-2)  # (..., 1, n)
    shape = torch.broadcast_shapes(x.shape, t.shape)
    mantissa = torch.ones(shape, dtype=torch.float64, device=nodes.device)
    exponent = torch.zeros(shape, dtype=torch.float64, device=nodes.device)
    columns = torch.arange(n, device=nodes.device)
    for m in range(n):
        t_m = nodes[..., m : m + 1].unsqueeze(-2)  # (..., 1, 1)
        skip = columns == m  # column m divides by zero: replaced by 1
        if valid is not None:
            skip = skip | ~valid[..., m : m + 1].unsqueeze(-2)
        factor = torch.where(skip, 1.0, (x - t_m) / torch.where(skip, 1.0, t - t_m))
        product = mantissa * factor
        mantissa = torch.frexp(product).mantissa
        # product / mantissa is the power of two frexp took out (exactly): its log2, rounded, is that exponent
        step = torch.log2((product / torch.where(mantissa == 0, 1.0, mantissa)).abs()).round()
        exponent = exponent + torch.where(mantissa == 0, 0.0, step)
    basis = torch.ldexp(mantissa, exponent)
    return basis if valid is None else torch.where(valid.unsqueeze(-2), basis, 0.0)


def padded_lagrange_matrices(
    knots: torch.Tensor, counts: torch.Tensor, valid: torch.Tensor, points: torch.Tensor, degree: int
) -> torch.Tensor:
    """Matrices ``(B, P, W)`` of the degree ``min(degree, n - 1)`` polynomial fit to each set of nodes (the ``valid``
    entries of ``knots`` ``(B, W)``, ``counts`` ``(B,)`` of them), at ``points`` ``(P,)``; zero in the padding
    columns. Sets with more than ``degree + 1`` nodes get the least-squares fit in the Chebyshev basis, the others
    the interpolating polynomial through all their nodes; both are computed for every set (static shapes)."""
    points = points.to(torch.float64)
    interpolate = lagrange_basis(knots, points.expand(knots.shape[0], -1), valid)
    if knots.shape[-1] <= degree + 1:  # no set has more nodes than the degree needs: all interpolate
        return interpolate
    rows = chebyshev_vandermonde(torch.where(valid, knots, 0.0), degree) * valid.unsqueeze(-1)  # (B, W, r + 1)
    fit = least_squares_map(rows, chebyshev_vandermonde(points, degree))  # (B, P, W); padding rows are zero
    return torch.where((counts > degree + 1).view(-1, 1, 1), fit, interpolate)


def lagrange_matrix(nodes: torch.Tensor, points: torch.Tensor, degree: Optional[int] = None) -> torch.Tensor:
    """Matrix mapping data at ``nodes`` to the degree-``degree`` polynomial fit evaluated at ``points``.

    Args:
        nodes: ``(..., n)`` distinct nodes.
        points: ``(..., P)`` evaluation points.
        degree: polynomial degree ``r <= n - 1``; ``None`` means ``n - 1`` (Lagrange interpolation).

    Returns:
        ``(..., P, n)`` float64 matrix. It reproduces every polynomial of degree <= ``degree`` exactly: by
        :func:`lagrange_basis` when ``degree = n - 1``, by a Chebyshev least-squares fit otherwise.
    """
    nodes = nodes.to(torch.float64)
    points = points.to(torch.float64)
    n = nodes.shape[-1]
    degree = n - 1 if degree is None else degree
    if not 0 <= degree <= n - 1:
        raise ValueError(f"a degree-{degree} polynomial fit needs at least {degree + 1} nodes, got {n}")
    if (nodes.sort(dim=-1).values.diff(dim=-1) == 0).any():
        raise ValueError("nodes must be distinct")
    if degree == n - 1:
        return lagrange_basis(nodes, points)
    return least_squares_map(chebyshev_vandermonde(nodes, degree), chebyshev_vandermonde(points, degree))
