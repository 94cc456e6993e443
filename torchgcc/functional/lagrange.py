"""Polynomial interpolation and least-squares fits as linear maps (the LCC baseline).

The polynomial of degree ``r`` that fits data at ``n >= r + 1`` nodes in the least-squares sense (exactly, when
``n = r + 1`` or the data are a polynomial of degree <= r) is evaluated at other points.

- Interpolation (``r = n - 1``, LCC at its recovery threshold) uses the Lagrange basis by its product formula,
  ``L_j(x) = prod_{m != j} (x - t_m) / (t_j - t_m)``, in the modified form of :func:`lagrange_basis`: every entry's
  relative error is at most about ``4 n`` units in the last place however the nodes cluster (a pseudo-inverse of a
  Vandermonde matrix loses digits with its condition number: 1.3e-7 relative on clustered survivors where the
  product formula is 1e-16).
- A least-squares fit (``r < n - 1``) uses the Chebyshev basis, well conditioned on [-1, 1] for spread nodes, and a
  Householder QR in float64 (backward stable, as an SVD-based pseudo-inverse is, and with no host read: torch's SVD
  checks its convergence on the host, a synchronisation on CUDA).
"""

from __future__ import annotations

from typing import Optional

import torch

from torchgcc.checks import batch_shape, check_integer, check_nodes

__all__ = [
    "chebyshev_vandermonde",
    "lagrange_basis",
    "lagrange_matrix",
    "least_squares_map",
    "padded_lagrange_matrices",
]


def chebyshev_vandermonde(x: torch.Tensor, degree: int) -> torch.Tensor:
    """``(..., P, degree + 1)`` matrix of Chebyshev polynomials ``T_0 .. T_degree`` at ``x`` ``(..., P)``.

    One elementwise op (``torch.special.chebyshev_polynomial_t``: ``cos(k arccos x)`` on [-1, 1] for ``k > 6``, the
    three-term recurrence for ``k <= 6``), as accurate as the recurrence (within a few ``k`` units in the last place,
    checked against mpmath). Written as the recurrence ``T_k = 2 x T_{k-1} - T_{k-2}`` in torch, torch.compile inlines
    every column into the next and its compile time grows exponentially with the degree (over 200 s at degree 21).
    ``degree`` must be an integer ``>= 0`` (else a ``TypeError`` / ``ValueError`` naming it; no host read).
    """
    degree = check_integer("degree", degree, minimum=0)
    orders = torch.arange(degree + 1, dtype=x.dtype, device=x.device)
    return torch.special.chebyshev_polynomial_t(x.unsqueeze(-1), orders)


def least_squares_map(basis_at_nodes: torch.Tensor, basis_at_points: torch.Tensor) -> torch.Tensor:
    """``basis_at_points @ pinv(basis_at_nodes)``: ``(..., P, n)``, the least-squares fit's values at the points as a
    map of the data at the nodes, for ``basis_at_nodes`` ``(..., n, r + 1)`` of full column rank and
    ``basis_at_points`` ``(..., P, r + 1)`` (broadcast). Zero rows of ``basis_at_nodes`` (padding) give zero columns;
    a rank-deficient one gives non-finite entries (no error, no host read)."""
    q, r = torch.linalg.qr(basis_at_nodes)  # reduced: (..., n, r + 1), (..., r + 1, r + 1)
    return torch.linalg.solve_triangular(r, basis_at_points, upper=True, left=False) @ q.mT


#: Mantissas multiplied in one go: each is in [0.5, 1), so a product of this many is at least ``0.5 ** 32``, far
#: from float64's underflow; longer runs are split into such products, whose mantissas are multiplied again.
_MANTISSAS_PER_PRODUCT = 32


def _split(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``values = mantissa * 2 ** exponent`` with ``|mantissa|`` in [0.5, 1) (0 for 0), exactly; the exponent is
    float64 with integer values: ``frexp``'s int32 exponent converted to float64 in the same kernel is C++ that
    torch.compile's CPU code generator fails to compile, so it is read back as ``log2(values / mantissa)``, the log of
    a power of two (exact)."""
    mantissa = torch.frexp(values).mantissa
    zero = mantissa == 0
    exponent = torch.log2((values / torch.where(zero, 1.0, mantissa)).abs()).round()
    return mantissa, torch.where(zero, 0.0, exponent)


def _product(factors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The product over the last dimension of ``factors`` ``(..., n)`` as ``(mantissa, exponent)`` ``(...,)``
    (:func:`_split`'s form): no intermediate product overflows or underflows, however many factors, and each
    multiplication rounds once, as a running product does. ``ceil(log_32(n))`` rounds of one ``prod``."""
    mantissa, exponent = _split(factors)
    exponent = exponent.sum(-1)
    while mantissa.shape[-1] > 1:
        short = -mantissa.shape[-1] % _MANTISSAS_PER_PRODUCT
        runs = torch.nn.functional.pad(mantissa, (0, short), value=1.0).unflatten(-1, (-1, _MANTISSAS_PER_PRODUCT))
        mantissa, step = _split(runs.prod(-1))
        exponent = exponent + step.sum(-1)
    return mantissa.squeeze(-1), exponent


def lagrange_basis(nodes: torch.Tensor, points: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``(..., P, n)`` matrix ``L_j(x_p) = prod_{m != j} (x_p - t_m) / (t_j - t_m)`` of the Lagrange basis of the
    distinct float64 ``nodes`` ``(..., n)`` at ``points`` ``(..., P)``: the interpolating polynomial's values are
    ``L @ y``. With ``valid`` ``(..., n)`` bool, only the valid nodes form the basis (the products skip the others,
    whose columns are zero): node sets of different sizes padded to one width.

    The same products, shared (the modified Lagrange form; Higham, IMA J. Numer. Anal. 2004):
    ``L_j(x) = l(x) / ((x - t_j) d_j)`` with ``l(x) = prod_m (x - t_m)`` and ``d_j = prod_{m != j} (t_j - t_m)``. Every
    entry then takes ``2 n - 1`` correctly rounded differences and about as many multiplications and divisions, each
    rounded once, so its relative error is at most about ``4 n`` units in the last place however the nodes cluster.
    Where a point is a node the row is that node's unit row. Products are kept as mantissa and binary exponent
    (:func:`_product`), so none overflows or underflows when the entry itself is representable. O((P + n) n) work and
    memory, a fixed number of steps (no loop over the nodes: one graph of a few dozen ops under torch.compile,
    whatever ``n``).
    """
    n = nodes.shape[-1]
    differences = points.unsqueeze(-1) - nodes.unsqueeze(-2)  # (..., P, n): x_p - t_m
    if valid is None:
        valid = torch.ones(nodes.shape, dtype=torch.bool, device=nodes.device)
    valid_column = valid.unsqueeze(-2)  # (..., 1, n)
    on_node = (differences == 0) & valid_column  # at most one per row: the nodes are distinct
    numerator, numerator_exponent = _product(torch.where(valid_column & ~on_node, differences, 1.0))  # (..., P)
    own = torch.eye(n, dtype=torch.bool, device=nodes.device)
    gaps = nodes.unsqueeze(-1) - nodes.unsqueeze(-2)  # (..., n, n): t_j - t_m
    weight, weight_exponent = _product(torch.where(valid_column & ~own, gaps, 1.0))  # (..., n): d_j
    difference, difference_exponent = _split(differences)
    mantissa = numerator.unsqueeze(-1) / torch.where(on_node, 1.0, difference * weight.unsqueeze(-2))
    exponent = numerator_exponent.unsqueeze(-1) - difference_exponent - weight_exponent.unsqueeze(-2)
    basis = torch.where(on_node.any(-1, keepdim=True), on_node.to(torch.float64), torch.ldexp(mantissa, exponent))
    return torch.where(valid_column, basis, 0.0)


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
        nodes: ``(..., n)`` finite, distinct nodes (any order), ``n >= 1``.
        points: ``(..., P)`` finite evaluation points.
        degree: integer polynomial degree ``0 <= r <= n - 1``; ``None`` means ``n - 1`` (Lagrange interpolation).

    Returns:
        ``(..., P, n)`` float64 matrix. It reproduces every polynomial of degree <= ``degree`` exactly: by
        :func:`lagrange_basis` when ``degree = n - 1``, by a Chebyshev least-squares fit otherwise.

    Raises ``TypeError`` / ``ValueError`` naming the argument otherwise (tensors of real numbers only; batch shapes
    that broadcast; a degree that is not an integer, bool included).
    """
    nodes = check_nodes(nodes, "nodes", order="distinct")
    points = check_nodes(points, "points")
    n = nodes.shape[-1]
    if n < 1:
        raise ValueError("nodes must hold at least one node, got nodes of shape (..., 0)")
    degree = n - 1 if degree is None else check_integer("degree", degree, minimum=0)
    if degree > n - 1:
        raise ValueError(f"degree={degree} needs at least {degree + 1} nodes for a polynomial fit, got {n} nodes")
    batch_shape(nodes=nodes.shape[:-1], points=points.shape[:-1])
    if degree == n - 1:
        return lagrange_basis(nodes, points)
    return least_squares_map(chebyshev_vandermonde(nodes, degree), chebyshev_vandermonde(points, degree))
