"""Low-precision and near-overflow decodes match a float64 decode of the same data to the output dtype's precision."""

import re
import warnings

import pytest
import torch

import torchgcc
from torchgcc.stragglers import FixedStragglers


def contiguous_mask(num_groups: int, num_workers: int, first: int, last: int) -> torch.Tensor:
    mask = torch.ones(num_groups, num_workers, dtype=torch.bool)
    mask[:, first : last + 1] = False
    return mask


@pytest.mark.parametrize("lambda_dec", ["adaptive", "spacing"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_large_straggler_gap_low_precision_decode_matches_float64(lambda_dec, dtype):
    # The fuzz case of issue 13: N = 2048, workers 600..1557 straggle, data of max ~1.9. The decode weights reach
    # ~300, so casting the matrix to bfloat16 before the product gave an error of 1.51.
    code = torchgcc.GCC(16, 2048, lambda_dec=lambda_dec)
    generator = torch.Generator().manual_seed(0)
    t = code.beta.unsqueeze(-1)  # (N, 1)
    phase = torch.rand(3, 1, 4, generator=generator, dtype=torch.float64) * 3
    y = torch.sin(3 * t + phase) * 1.9 + 0.01 * torch.randn(3, 2048, 4, generator=generator, dtype=torch.float64)
    y = y.to(dtype)  # (3, N, 4)
    mask = contiguous_mask(3, 2048, 600, 1557)
    reference = code.decoder(y.double(), mask)  # the float64 decode of the same (rounded) data
    got = code.decoder(y, mask)
    assert got.dtype == dtype
    # Rounding to dtype is within half an ulp (eps * |value| / 2); the float32 accumulation of ~1000 products with
    # weights up to ~250 adds ~6e-5 absolute, allowed as a tenth of an ulp of the largest estimate (where estimates
    # cancel to near 0, a relative bound alone would ask for more than float32 holds).
    eps = torch.finfo(dtype).eps
    bound = eps * (reference.abs() + 0.1 * reference.abs().max())
    error = (got.double() - reference).abs()
    assert bool((error <= bound).all()), float(error.max())
    matrices = code.decoder.matrices(y.double(), mask)
    cast_first = (matrices.to(dtype) @ y).double()  # the matrix rounded to the data's dtype: what this test rules out
    assert not bool(((cast_first - reference).abs() <= bound).all())


def test_encoder_low_precision_matches_float64():
    code = torchgcc.GCC(32, 64)
    x = torch.randn(4, 32, 8, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    reference = code.encoder(x.double())
    got = code.encoder(x)
    assert got.dtype == torch.bfloat16
    assert bool(((got.double() - reference).abs() <= torch.finfo(torch.bfloat16).eps * reference.abs() + 1e-12).all())


def test_float32_near_max_decodes_without_intermediate_overflow():
    code = torchgcc.GCC(16, 256, lambda_dec="spacing")
    mask = contiguous_mask(2, 256, 60, 190)
    assert float(code.decoder.decode_matrix(mask).abs().max()) > 2  # products of 3e38 overflow float32
    y = (3e38 * torch.cos(2 * code.beta)).float().expand(2, 256).unsqueeze(-1).contiguous()  # (2, N, 1)
    reference = code.decoder(y.double(), mask)
    assert float(reference.abs().max()) < torch.finfo(torch.float32).max  # the exact answer fits
    got = code.decoder(y, mask)
    assert bool(torch.isfinite(got).all())
    torch.testing.assert_close(got.double(), reference, rtol=2 * torch.finfo(torch.float32).eps, atol=0)


def test_float32_near_max_encodes_without_intermediate_overflow():
    code = torchgcc.GCC(8, 32)
    x = (3.3e38 * torch.cos(3 * code.alpha)).float().reshape(1, 8, 1)
    reference = code.encoder(x.double())
    assert float(reference.abs().max()) < torch.finfo(torch.float32).max
    assert not bool(torch.isfinite(code.encoder.matrix.float() @ x[0]).all())  # the plain float32 product overflows
    got = code.encoder(x)
    assert bool(torch.isfinite(got).all())
    # the exact power-of-two scaling leaves a float32 product of K = 8 terms: K ulps of the largest code
    bound = 8 * torch.finfo(torch.float32).eps * reference.abs().max()
    assert bool(((got.double() - reference).abs() <= bound).all())
    # the scaling reads nothing back from the device: the same with check=False
    torch.testing.assert_close(torchgcc.GCC(8, 32, check=False).encoder(x), got, rtol=0, atol=0)


def test_straggler_nan_still_never_leaks_in_low_precision():
    code = torchgcc.BACC(4, 16)
    mask = FixedStragglers(5, seed=0).sample(3, 16)
    y = torch.randn(3, 16, 2, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    y[~mask] = float("nan")
    assert bool(torch.isfinite(code.decoder(y, mask)).all())


@pytest.mark.parametrize("bad", ["numpy", "list"])
def test_non_tensor_inputs_raise_type_errors_naming_the_argument(bad):
    code = torchgcc.GCC(4, 8)
    x, y, mask = torch.randn(2, 4, 3), torch.randn(2, 8, 3), torch.ones(2, 8, dtype=torch.bool)
    convert = (lambda t: t.numpy()) if bad == "numpy" else (lambda t: t.tolist())
    with pytest.raises(TypeError, match=r"encoder input x must be a torch.Tensor.*torch.as_tensor"):
        code.encoder(convert(x))
    with pytest.raises(TypeError, match=r"decoder results y must be a torch.Tensor.*torch.as_tensor"):
        code.decoder(convert(y), mask)
    with pytest.raises(TypeError, match=r"mask must be a bool torch.Tensor.*torch.as_tensor"):
        code.decoder(y, convert(mask))


@pytest.mark.parametrize("shape", [(2,), (2, 5), (2, 9, 3)])
def test_wrong_shapes_raise_value_errors_naming_the_argument_and_its_expected_shape(shape):
    code = torchgcc.GCC(4, 8)
    got = re.escape(str(shape))
    with pytest.raises(ValueError, match=rf"encoder input x must have shape \(B, K=4, \*feat\), got {got}"):
        code.encoder(torch.randn(shape))
    with pytest.raises(ValueError, match=rf"decoder results y must have shape \(B, N=8, \*out\), got {got}"):
        code.decoder(torch.randn(shape), torch.ones(2, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask must have shape \(B, N\) = \(2, 8\), got \(2, 7\)"):
        code.decoder(torch.randn(2, 8, 3), torch.ones(2, 7, dtype=torch.bool))


def test_empty_batch_raises_value_error():
    code = torchgcc.GCC(4, 8)
    with pytest.raises(ValueError, match=r"empty batch \(B = 0"):
        code.encoder(torch.randn(0, 4, 3))
    with pytest.raises(ValueError, match=r"empty batch \(B = 0"):
        code.decoder(torch.randn(0, 8, 3), torch.ones(0, 8, dtype=torch.bool))


def test_too_few_workers_names_num_workers():
    with pytest.raises(ValueError, match="num_workers=1"):
        torchgcc.GCC(1, 1)


def test_bfloat16_near_max_encodes_without_intermediate_overflow():
    code = torchgcc.GCC(8, 32)
    x = (3.3e38 * torch.cos(3 * code.alpha)).to(torch.bfloat16).reshape(1, 8, 1)
    reference = code.encoder(x.double())
    got = code.encoder(x)
    assert bool(torch.isfinite(got).all())
    eps = torch.finfo(torch.bfloat16).eps
    assert bool(((got.double() - reference).abs() <= eps * reference.abs()).all())


def assert_within_float32_product(got: torch.Tensor, matrix: torch.Tensor, x: torch.Tensor) -> None:
    """``got`` ``(N, d)`` is ``matrix @ x`` ``(N, K) @ (K, d)`` computed in float32 and rounded to ``got``'s dtype:
    each float32 sum of K products is within ``gamma_K sum |E| |x|`` of the exact one (Higham, eq. 3.5; ``K u``
    bounded by ``8 eps``), plus the final rounding. BLAS kernels differ in summation order and FMA, so no bitwise
    reference."""
    exact = matrix @ x.double()
    bound = 8 * torch.finfo(torch.float32).eps * matrix.abs() @ x.double().abs()
    bound += torch.finfo(got.dtype).eps * exact.abs()
    assert bool(((got.double() - exact).abs() <= bound).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_encoder_scales_exactly_where_the_plain_product_could_overflow(dtype):
    """Below the bound (``L max|x| < 2^127``, ``L`` the largest row sum of ``|E|``) the encoder's product is the plain
    float32 one (no power-of-two scaling: three passes fewer); above it the scaled one, finite where the plain one
    is not."""
    from torch.profiler import profile

    code = torchgcc.GCC(8, 32)
    lebesgue = float(code.encoder.matrix.abs().sum(dim=1).max())
    shape = torch.cos(3 * code.alpha).reshape(1, 8, 1)
    shape = shape / shape.abs().max()  # max |x| is the scale
    for scale, scaled in ((0.99 * 2.0**127 / lebesgue, False), (1.01 * 2.0**127 / lebesgue, True)):
        x = (scale * shape).to(dtype)
        with profile() as recorded:
            got = code.encoder(x)
        assert any(event.name == "aten::ldexp" for event in recorded.events()) == scaled
        assert bool(torch.isfinite(got).all())
        if not scaled:  # the plain float32 product, to its rounding: BLAS kernels differ in summation order and FMA
            assert_within_float32_product(got[0], code.encoder.matrix, x[0])


@pytest.mark.parametrize("change", ["load_state_dict", "in_place", "new_buffer"])
def test_the_encoders_bound_follows_a_changed_matrix(change):
    """The bound ``L`` is kept between calls: a matrix loaded, written in place or replaced after a call moves it (an
    input that fitted the old matrix's bound and not the new one's is scaled, and its code stays finite)."""
    from torch.profiler import profile

    code = torchgcc.GCC(8, 32)
    lebesgue = float(code.encoder.matrix.abs().sum(dim=1).max())
    x = torch.full((1, 8, 1), 0.9 * 2.0**127 / lebesgue)
    code.encoder(x)  # the bound of the first matrix is now kept
    doubled = 2 * code.encoder.matrix
    if change == "load_state_dict":
        code.encoder.load_state_dict({"matrix": doubled})
    elif change == "in_place":
        code.encoder.matrix.mul_(2)
    else:
        code.encoder.matrix = doubled
    with profile() as recorded:
        got = code.encoder(x)
    assert any(event.name == "aten::ldexp" for event in recorded.events())
    assert bool(torch.isfinite(got).all())
    assert_within_float32_product(got[0], doubled, x[0])  # the power-of-two scaling is exact


def test_a_traced_encoder_scales_every_input_it_sees_later():
    """``torch.jit.trace`` records the branch its example input takes: the encoder must not record the plain product
    (a small example) and then overflow on inputs near float32's largest value whose codes fit."""
    code = torchgcc.GCC(8, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trace's deprecation and tracer warnings
        traced = torch.jit.trace(code.encoder, torch.randn(2, 8, 3))
    near_max = (3.3e38 * torch.cos(3 * code.alpha)).float().reshape(1, 8, 1)
    assert not bool(torch.isfinite(code.encoder.matrix.float() @ near_max[0]).all())  # the plain product overflows
    torch.testing.assert_close(traced(near_max), code.encoder(near_max), rtol=0, atol=0)
    assert bool(torch.isfinite(traced(near_max)).all())
