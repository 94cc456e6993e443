"""Property tests: every code's encoder and decoder against independent float64 references, on drawn point sets,
masks, dtypes, backends and shapes (zero-size ones included).

References: Green and Silverman's dense smoothing spline in 40-digit arithmetic (mpmath; linear beyond the knots)
for the splines, Berrut's formula written point by point, and Lagrange interpolation in exact rational arithmetic
(``fractions.Fraction``) for LCC. Tolerances follow from the conditioning of each map: the componentwise rounding
scale of the Reinsch form, the cancellation in Berrut's sum, the product formula's few ulps per factor.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from properties import (
    DTYPES,
    FEATURE_SHAPES,
    PROFILE,
    decode_tolerance,
    masks,
    point_sets,
    seeded_normal,
)
from references import berrut_error, berrut_reference, exact_lagrange, green_silverman_reference, spline_error

import torchgcc
from torchgcc.codes import RobustGCC

LAMBDAS = [0.0, 1e-6, 1e-3, 0.1, 10.0]
EPS = 2.0**-53

#: Largest N drawn where the reference is computed in 40-digit arithmetic (mpmath, O(N^3) each).
MAX_SPLINE_WORKERS = 14


@st.composite
def results(draw, workers: int, minimum: int):
    """``(y, mask, dtype)``: drawn ``(B, N, *feat)`` results in a drawn dtype and a mask with enough arrivals."""
    groups = draw(st.integers(1, 2))
    feat = draw(st.sampled_from(FEATURE_SHAPES))
    dtype = draw(st.sampled_from(list(DTYPES)))
    y = seeded_normal((groups, workers, *feat), draw(st.integers(0, 2**16))).to(dtype)
    return y, draw(masks(groups, workers, minimum)), dtype


def assert_decodes_like(out: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, reference_of, dtype):
    """``out`` ``(B, K, *feat)`` against ``D @ y[survivors]`` per group, ``(D, matrix_error) = reference_of(arrived)``,
    within :func:`properties.decode_tolerance`."""
    assert out.dtype == dtype and out.shape == (y.shape[0], out.shape[1]) + y.shape[2:]
    for group in range(y.shape[0]):
        arrived = mask[group].numpy()
        data = y[group].to(torch.float64).reshape(y.shape[1], -1).numpy()[arrived]
        reference, matrix_error = reference_of(arrived)
        got = out[group].to(torch.float64).reshape(out.shape[1], -1).numpy()
        error = np.abs(got - reference @ data)
        bound = decode_tolerance(reference, data, dtype, matrix_error)
        assert (error <= bound).all(), f"group {group}: error {error.max():.3g}, bound {bound[error > bound].min():.3g}"


def spline(knots: np.ndarray, points: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    return green_silverman_reference(knots, points, lam), spline_error(knots, points, lam)


@PROFILE
@given(data=st.data())
def test_gcc_decodes_as_the_dense_smoothing_spline(data):
    workers = data.draw(st.integers(2, MAX_SPLINE_WORKERS), label="N")
    inputs = data.draw(st.integers(1, min(workers, 5)), label="K")
    beta, alpha = data.draw(point_sets(workers), label="beta"), data.draw(point_sets(inputs), label="alpha")
    lam = data.draw(st.sampled_from(LAMBDAS), label="lambda_dec")
    backend = data.draw(st.sampled_from(["torch", "numba"]), label="backend")
    code = torchgcc.GCC(inputs, workers, alpha=alpha, beta=beta, lambda_dec=lam, backend=backend)
    y, mask, dtype = data.draw(results(workers, minimum=2))
    knots, points = beta.numpy(), alpha.numpy()
    assert_decodes_like(code.decoder(y, mask), y, mask, lambda arrived: spline(knots[arrived], points, lam), dtype)


@PROFILE
@given(data=st.data())
def test_the_adversarial_smoothing_decoder_uses_its_lambda_table_in_float64(data):
    workers = data.draw(st.integers(3, MAX_SPLINE_WORKERS), label="N")
    q = data.draw(st.integers(0, workers - 2), label="q")
    code = RobustGCC(2, workers, q=q, backend=data.draw(st.sampled_from(["torch", "numba"]), label="backend"))
    y, mask, dtype = data.draw(results(workers, minimum=2))
    knots, points = code.beta.numpy(), code.alpha.numpy()
    lam = lambda arrived: 0.1 * (q / max(int(arrived.sum()), 1)) ** 1.6  # noqa: E731 - the seed's rule, by hand
    assert_decodes_like(
        code.decoder(y, mask), y, mask, lambda arrived: spline(knots[arrived], points, lam(arrived)), dtype
    )


@PROFILE
@given(data=st.data())
def test_bacc_decodes_as_berruts_formula(data):
    workers = data.draw(st.integers(1, 24), label="N")
    inputs = data.draw(st.integers(1, min(workers, 6)), label="K")
    beta, alpha = data.draw(point_sets(workers), label="beta"), data.draw(point_sets(inputs), label="alpha")
    backend = data.draw(st.sampled_from(["torch", "numba"]), label="backend")
    code = torchgcc.BACC(inputs, workers, alpha=alpha, beta=beta, backend=backend)
    y, mask, dtype = data.draw(results(workers, minimum=1))
    knots, points = beta.numpy(), alpha.numpy()

    def reference(arrived):
        matrix = berrut_reference(knots[arrived], points)
        return matrix, berrut_error(knots[arrived], points, matrix)

    assert_decodes_like(code.decoder(y, mask), y, mask, reference, dtype)


def lagrange(nodes: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact basis and the product formula's error: each entry a product of ``n - 1`` correctly rounded ratios,
    ``3 n`` ulps of itself (``4 n`` here, with the reference's final rounding)."""
    matrix = exact_lagrange(nodes, points)
    return matrix, 4 * len(nodes) * EPS * np.abs(matrix)


@PROFILE
@given(data=st.data())
def test_lcc_at_its_threshold_decodes_as_exact_lagrange_interpolation(data):
    inputs = data.draw(st.integers(1, 4), label="K")
    degree = data.draw(st.integers(1, 3), label="degree")
    threshold = (inputs - 1) * degree + 1
    workers = data.draw(st.integers(threshold, threshold + 6), label="N")
    beta, alpha = data.draw(point_sets(workers), label="beta"), data.draw(point_sets(inputs), label="alpha")
    code = torchgcc.LCC(inputs, workers, degree=degree, alpha=alpha, beta=beta)
    y, _, dtype = data.draw(results(workers, minimum=threshold))
    chosen = [data.draw(st.permutations(range(workers)))[:threshold] for _ in range(y.shape[0])]
    mask = torch.tensor([[j in row for j in range(workers)] for row in chosen])
    knots, points = beta.numpy(), alpha.numpy()
    assert_decodes_like(code.decoder(y, mask), y, mask, lambda arrived: lagrange(knots[arrived], points), dtype)


@PROFILE
@given(data=st.data())
def test_encoders_are_their_interpolants_at_the_worker_points(data):
    workers = data.draw(st.integers(2, MAX_SPLINE_WORKERS), label="N")
    inputs = data.draw(st.integers(1, min(workers, 6)), label="K")
    beta, alpha = data.draw(point_sets(workers), label="beta"), data.draw(point_sets(inputs), label="alpha")
    name = data.draw(st.sampled_from(["gcc", "bacc", "lcc"]), label="code")
    options = {"degree": 1} if name == "lcc" else {}
    code = torchgcc.make_code(name, num_inputs=inputs, num_workers=workers, alpha=alpha, beta=beta, **options)
    groups, feat = data.draw(st.integers(1, 3)), data.draw(st.sampled_from(FEATURE_SHAPES))
    dtype = data.draw(st.sampled_from(list(DTYPES)))
    x = seeded_normal((groups, inputs, *feat), data.draw(st.integers(0, 2**16))).to(dtype)
    nodes, points = alpha.numpy(), beta.numpy()
    if inputs == 1:
        reference, matrix_error = np.ones((workers, 1)), np.zeros((workers, 1))
    elif name == "gcc":
        reference, matrix_error = spline(nodes, points, 0.0)
    elif name == "bacc":
        reference = berrut_reference(nodes, points)
        matrix_error = berrut_error(nodes, points, reference)
    else:
        reference, matrix_error = lagrange(nodes, points)
    coded = code.encoder(x)
    assert coded.shape == (groups, workers, *feat) and coded.dtype == dtype
    for group in range(groups):
        flat = x[group].to(torch.float64).reshape(inputs, -1).numpy()
        got = coded[group].to(torch.float64).reshape(workers, -1).numpy()
        bound = decode_tolerance(reference, flat, dtype, matrix_error)
        assert (np.abs(got - reference @ flat) <= bound).all()


@pytest.mark.parametrize("method", ["huber", "trim"])
@PROFILE
@given(data=st.data())
def test_robust_decoders_without_adversaries_interpolate_and_flag_nothing(method, data):
    """With q = 0 the robust decoders return the interpolating spline's estimate (any dtype, any shape)."""
    workers = data.draw(st.integers(2, MAX_SPLINE_WORKERS), label="N")
    code = RobustGCC(2, workers, q=0, decoder=method)
    y, mask, dtype = data.draw(results(workers, minimum=2))
    knots, points = code.beta.numpy(), code.alpha.numpy()
    assert_decodes_like(code.decoder(y, mask), y, mask, lambda arrived: spline(knots[arrived], points, 0.0), dtype)
    assert not code.decoder.last_flagged.any()
