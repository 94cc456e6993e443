"""Pure float64 functions that build the linear maps behind every code.

Each returns a matrix ``(..., P, n)`` that maps data at ``n`` nodes to a fitted function's values at ``P`` points;
the batched spline core (:func:`padded_spline_matrices`) works on knot sets of different sizes padded to one width
(:func:`compact_survivors`), with static shapes and no host reads.
"""

from torchgcc.functional.banded import PentadiagonalPlan, pentadiagonal_plan, solve_pentadiagonal
from torchgcc.functional.berrut import berrut_matrix
from torchgcc.functional.kernel import cubic_spline_kernel, kernel_smoother_matrix
from torchgcc.functional.lagrange import chebyshev_vandermonde, lagrange_matrix
from torchgcc.functional.spline import (
    ReinschBands,
    SplinePlan,
    padded_spline_matrices,
    reinsch_bands,
    smoothing_spline_matrix,
    spline_plan,
)
from torchgcc.functional.survivors import SurvivorLayout, Survivors, compact_survivors, survivor_layout

__all__ = [
    "PentadiagonalPlan",
    "ReinschBands",
    "SplinePlan",
    "SurvivorLayout",
    "Survivors",
    "berrut_matrix",
    "chebyshev_vandermonde",
    "compact_survivors",
    "cubic_spline_kernel",
    "kernel_smoother_matrix",
    "lagrange_matrix",
    "padded_spline_matrices",
    "pentadiagonal_plan",
    "reinsch_bands",
    "smoothing_spline_matrix",
    "solve_pentadiagonal",
    "spline_plan",
    "survivor_layout",
]
