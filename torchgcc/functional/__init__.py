"""Pure float64 functions that build the linear maps behind every code.

Each returns a matrix ``(..., P, n)`` that maps data at ``n`` nodes to a fitted function's values at ``P`` points.
"""

from torchgcc.functional.banded import PentadiagonalLDL, pentadiagonal_ldl, pentadiagonal_solve
from torchgcc.functional.berrut import berrut_matrix
from torchgcc.functional.gcv import gcv_scores
from torchgcc.functional.kernel import cubic_spline_kernel, kernel_smoother_matrix
from torchgcc.functional.lagrange import chebyshev_vandermonde, lagrange_matrix
from torchgcc.functional.spline import smoothing_spline_matrix

__all__ = [
    "PentadiagonalLDL",
    "berrut_matrix",
    "chebyshev_vandermonde",
    "cubic_spline_kernel",
    "gcv_scores",
    "kernel_smoother_matrix",
    "lagrange_matrix",
    "pentadiagonal_ldl",
    "pentadiagonal_solve",
    "smoothing_spline_matrix",
]
