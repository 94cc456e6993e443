import math

import numpy as np
import pytest
import torch

import torchgcc
from torchgcc.points import chebyshev_first_kind, chebyshev_second_kind, equispaced, resolve_points


@pytest.mark.parametrize("n", [1, 2, 7, 40])
def test_chebyshev_first_kind_matches_numpy(n):
    expected = np.sort(np.polynomial.chebyshev.chebpts1(n))
    np.testing.assert_allclose(chebyshev_first_kind(n).numpy(), expected, atol=1e-15)


@pytest.mark.parametrize("n", [2, 3, 8, 41])
def test_chebyshev_second_kind_matches_numpy_and_has_exact_ends(n):
    points = chebyshev_second_kind(n)
    np.testing.assert_allclose(points.numpy(), np.sort(np.polynomial.chebyshev.chebpts2(n)), atol=1e-15)
    assert points[0] == -1.0 and points[-1] == 1.0
    assert points.dtype == torch.float64


def test_first_kind_formula_and_order():
    points = chebyshev_first_kind(5)
    assert torch.all(points.diff() > 0)
    assert math.isclose(points[-1].item(), math.cos(math.pi / 10), abs_tol=1e-15)


def test_equispaced():
    np.testing.assert_allclose(equispaced(5).numpy(), [-1, -0.5, 0, 0.5, 1])
    assert equispaced(1).tolist() == [0.0]


def test_resolve_points_accepts_rules_and_valid_tensors():
    assert torch.equal(resolve_points("chebyshev2", 6), chebyshev_second_kind(6))
    custom = resolve_points([-0.5, 0.0, 0.25], 3)
    assert custom.dtype == torch.float64 and custom.tolist() == [-0.5, 0.0, 0.25]


@pytest.mark.parametrize(
    "spec, n, message",
    [
        ("legendre", 3, "unknown"),
        ([0.0, 0.0, 1.0], 3, "duplicates"),
        ([0.0, 1.0, 0.5], 3, "increasing"),
        ([0.0, 1.0], 3, "shape"),
        ([0.0, float("nan"), 1.0], 3, "finite"),
        ([0.0, 0.5, 1.0 + 1e-15], 3, "must lie on \\[-1, 1\\]"),
        ([-10.0, 0.0, 1.0], 3, "2 \\* \\(t - lo\\) / \\(hi - lo\\) - 1"),
    ],
)
def test_resolve_points_rejects_bad_points(spec, n, message):
    with pytest.raises(ValueError, match=message):
        resolve_points(spec, n)


@pytest.mark.parametrize("rule", [chebyshev_first_kind, chebyshev_second_kind, equispaced])
def test_bad_counts(rule):
    with pytest.raises(ValueError):
        rule(0)


@pytest.mark.parametrize("code", ["gcc", "natural", "bacc", "lcc"])
@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_every_code_rejects_points_outside_the_unit_interval(code, backend):
    """The torch path used to decode points beyond [-1, 1] wrongly (a straggler's sort key fell among the survivors'),
    the numba path rightly, and the smoothing rules assume [-1, 1] anyway: every backend rejects them, naming the
    points and the map to [-1, 1]."""
    options = {"degree": 1} if code == "lcc" else {}
    for name, points in (("alpha", torch.tensor([1.0, 5.0, 9.0])), ("beta", torch.linspace(0, 10, 8))):
        with pytest.raises(ValueError, match=f"{name} must lie on \\[-1, 1\\]"):
            torchgcc.make_code(code, num_inputs=3, num_workers=8, backend=backend, **{name: points}, **options)


def test_decoders_built_directly_check_their_points():
    from torchgcc.codes.gcc import SplineDecoder

    with pytest.raises(ValueError, match="beta must lie on"):
        SplineDecoder(torch.tensor([0.0]), torch.linspace(0, 3, 5), lam=0.0, min_arrived=2)


@pytest.mark.parametrize("count", ["3", 2.5, None, True])
def test_rules_reject_counts_that_are_not_integers(count):
    with pytest.raises((TypeError, ValueError), match="the number of points must be an integer"):
        chebyshev_first_kind(count)


def test_points_must_be_real_and_hold_values():
    """Complex points lost their imaginary part (resolve_points feeds alpha= and beta= of every code); meta tensors
    hold no values to check."""
    with pytest.raises(TypeError, match="beta must hold real numbers, got a torch.complex64 tensor"):
        resolve_points(torch.tensor([0.1 + 1j, 0.2 + 0j]), 2, name="beta")
    with pytest.raises(TypeError, match="alpha"):
        torchgcc.GCC(2, 4, alpha=torch.tensor([-0.5, 0.5], dtype=torch.complex128))
    with pytest.raises(ValueError, match="points is on the meta device"):
        torchgcc.points.check_points(torch.tensor([0.1, 0.2], device="meta"))
    assert resolve_points(torch.tensor([-1, 0, 1]), 3).tolist() == [-1.0, 0.0, 1.0]  # integers are real numbers
