"""Shared pieces of the property tests (tests/test_properties_*.py): the Hypothesis profile, strategies for point
sets, masks, dtypes and shapes, and the tolerance of a decode against a float64 reference.

The profile ``ci`` (the default) draws a fixed, modest number of examples, derandomized: every run of the suite
checks the same examples, so a failure reproduces. ``TORCHGCC_HYPOTHESIS=thorough`` draws many more, at random
(run it by hand, e.g. before a release).
"""

from __future__ import annotations

import os

import numpy as np
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

settings.register_profile(
    "ci",
    max_examples=20,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
settings.register_profile(
    "thorough", max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)

#: The settings of every property test: ``@PROFILE`` above ``@given``.
PROFILE = settings(settings.get_profile(os.environ.get("TORCHGCC_HYPOTHESIS", "ci")))

#: The dtypes a decoder takes, with the unit roundoff of the dtype the product runs in and of the output.
DTYPES = {
    torch.float64: (2.0**-53, 2.0**-53),
    torch.float32: (2.0**-24, 2.0**-24),
    torch.bfloat16: (2.0**-24, 2.0**-8),  # applied in float32, rounded once to bfloat16
    torch.float16: (2.0**-24, 2.0**-11),
}

#: Feature shapes ``*feat`` of the results: none, zero-size, one value, several, and multi-dimensional ones.
FEATURE_SHAPES = [(), (0,), (1,), (3,), (2, 0, 3), (2, 3)]

#: Smallest spacing of drawn point sets: nearly coincident points are a question of conditioning, asked elsewhere.
MIN_SPACING = 1e-2


@st.composite
def point_sets(draw, n: int) -> torch.Tensor:
    """``n`` strictly increasing float64 points on [-1, 1], at least :data:`MIN_SPACING` apart."""
    weights = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=n + 1, max_size=n + 1)))
    weights = weights / weights.sum() if weights.sum() > 0 else np.full(n + 1, 1.0 / (n + 1))
    free = 2.0 - (n - 1) * MIN_SPACING  # the length left after the smallest gaps: shared by the weights
    steps = MIN_SPACING + weights[1:-1] * free  # the n - 1 gaps between points; weights[0], [-1]: before, after
    points = -1.0 + weights[0] * free + np.concatenate([[0.0], np.cumsum(steps)])
    return torch.tensor(points, dtype=torch.float64).clamp(-1.0, 1.0)


@st.composite
def masks(draw, groups: int, workers: int, minimum: int = 1) -> torch.Tensor:
    """``(groups, workers)`` bool masks with at least ``minimum`` results arrived per group."""
    rows = []
    for _ in range(groups):
        arrived = draw(st.integers(min(minimum, workers), workers))
        chosen = draw(st.permutations(range(workers)))[:arrived]
        rows.append([j in chosen for j in range(workers)])
    return torch.tensor(rows, dtype=torch.bool)


def seeded_normal(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """float64 standard normal values of ``shape`` from ``seed`` (data need no shrinking: their seed does)."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def decode_tolerance(
    reference_matrix: np.ndarray, data: np.ndarray, dtype: torch.dtype, matrix_error: np.ndarray
) -> np.ndarray:
    """Entrywise bound on ``|decode - D y|`` for the reference matrix ``D`` ``(K, n)``, the data the decoder saw
    ``y`` ``(n, d)`` (already rounded to ``dtype``) and a bound ``matrix_error`` ``(K, n)`` on the error of the code's
    own matrix (from its conditioning; each test derives it): that error carried by ``|y|``, the product's rounding
    in the compute dtype (``(n + 2) u``) on ``|D| |y|``, and the output's rounding (``u_out |D y|``)."""
    compute, out = DTYPES[dtype]
    n = reference_matrix.shape[-1]
    magnitude = np.abs(reference_matrix) @ np.abs(data)
    exact = reference_matrix @ data
    return matrix_error @ np.abs(data) + (n + 2) * compute * magnitude + out * np.abs(exact) + 1e-300
