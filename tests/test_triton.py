"""The Triton kernels (``backend="triton"``) against the numba kernels and the batched torch path.

Without a GPU the kernels run in Triton's CPU interpreter, which must be switched on before they are defined:
``test_kernels_under_the_triton_interpreter`` reruns the ``interpreted`` tests of this file in a subprocess with
``TRITON_INTERPRET=1`` (small sizes; the interpreter is slow). ``benchmarks/fused_kernel_check.py`` runs the grid of
N up to 4096 against the numba kernels. The tolerances are those of two backward-stable solves of each group's
system (:func:`references.solve_tolerance`) and of Berrut's sums (:func:`references.berrut_tolerance`): the kernels
run the same recurrences in another order (and a GPU contracts to FMA).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import berrut_points_on_nodes, masks_with_every_straggler_count, random_masks
from references import berrut_tolerance, solve_tolerance

import torchgcc
from torchgcc.codes.gcc import spacing_lambda

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
interpreted = pytest.mark.skipif(not INTERPRETED, reason="run by test_kernels_under_the_triton_interpreter")


@pytest.mark.skipif(INTERPRETED, reason="this is the driver of the interpreted run")
def test_kernels_under_the_triton_interpreter():
    pytest.importorskip("triton")
    root = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(Path(__file__).resolve()),
        "-q",
        "-x",
        "-k",
        "interpreted",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
    ]
    result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout.split("\n")[-2], result.stdout[-2000:]


def test_backend_option_is_validated():
    with pytest.raises(ValueError, match="backend must be one of"):
        torchgcc.GCC(4, 8, backend="cuda")
    with pytest.raises(ValueError, match="not available for LagrangeDecoder"):
        torchgcc.LCC(4, 8, degree=1, backend="triton")
    assert torchgcc.GCC(
        4, 8, lambda_dec="gcv", backend="triton"
    ).decoder.has_fused_kernel  # GCV picks, the kernel builds
    with pytest.raises(TypeError, match="check must be True or False"):
        torchgcc.BACC(4, 8, check="no")
    assert torchgcc.make_code("natural", num_inputs=4, num_workers=8, backend="triton").decoder.backend == "triton"


@pytest.mark.skipif(INTERPRETED, reason="the interpreter accepts CPU tensors")
def test_triton_backend_on_cpu_without_the_interpreter_says_what_to_do():
    pytest.importorskip("triton")
    code = torchgcc.GCC(4, 8, lambda_dec="spacing", backend="triton")
    with pytest.raises(ValueError, match="backend='triton' runs on CUDA tensors .* use 'auto' or 'torch'"):
        code.decoder.decode_matrix(torch.ones(2, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match="backend='triton' runs on CUDA tensors"):
        code.decoder(torch.randn(2, 8, 3), torch.ones(2, 8, dtype=torch.bool))


def masks_with_the_ends_straggling(num_workers: int, max_stragglers: int) -> torch.Tensor:
    """One mask per straggler count, and copies with the first or last two workers straggling too (alpha then lies
    beyond the survivors: the natural spline's linear pieces)."""
    masks = masks_with_every_straggler_count(num_workers, max_stragglers)
    ends = masks.clone()
    ends[::2, :2] = False
    ends[1::2, -2:] = False
    return torch.cat([masks, ends[ends.sum(-1) >= 2]])


@interpreted
@pytest.mark.parametrize("lam", [0.0, 1e-6, "spacing"])
@pytest.mark.parametrize("num_workers,num_inputs", [(3, 2), (8, 3), (13, 5), (40, 16), (37, 33)])
def test_interpreted_spline_kernel_equals_the_numba_kernel(lam, num_workers, num_inputs):
    """Straggler counts from none to all but one (a group with one survivor is NaN everywhere), the ends straggling;
    several groups per program at small K, one at K = 33."""
    fused = torchgcc.GCC(num_inputs, num_workers, lambda_dec=lam, backend="triton").decoder
    numba = torchgcc.GCC(num_inputs, num_workers, lambda_dec=lam, backend="numba").decoder
    masks = masks_with_the_ends_straggling(num_workers, num_workers - 1)
    one_survivor = masks[num_workers - 1 : num_workers]
    masks = torch.cat([masks[:: max(1, len(masks) // 12)], one_survivor])  # the interpreter: ~20 ms a step
    got, expected = fused.decode_matrix(masks, check=False), numba.decode_matrix(masks, check=False)
    assert got.dtype == torch.float64 and got.shape == (len(masks), num_inputs, num_workers)
    unusable = masks.sum(-1) < 2
    assert unusable.any() and torch.isnan(got[unusable]).all()
    assert (got[~unusable].transpose(1, 2)[~masks[~unusable]] == 0).all()  # stragglers' columns exactly zero
    for group in (~unusable).nonzero()[:, 0]:
        knots = fused.beta[masks[group]].numpy()
        rule = float(spacing_lambda(len(knots))) if lam == "spacing" else lam
        torch.testing.assert_close(got[group], expected[group], rtol=0, atol=solve_tolerance(knots, rule))


@interpreted
def test_interpreted_float32_rows_are_the_float64_rows_rounded_once():
    from torchgcc.functional import fused_decode

    for decoder in (torchgcc.GCC(5, 14, lambda_dec="spacing").decoder, torchgcc.BACC(5, 14).decoder):
        masks = masks_with_the_ends_straggling(14, 12)[::3].contiguous()
        single, double = (decoder.kernel_rows(masks, fused_decode, dtype) for dtype in (torch.float32, torch.float64))
        assert single.dtype == torch.float32 and torch.equal(single, double.float())


@interpreted
def test_interpreted_berrut_kernel_equals_the_numba_kernel_also_at_nodes():
    num_workers = 9
    beta, alpha = berrut_points_on_nodes(num_workers)
    masks = torch.cat([masks_with_the_ends_straggling(num_workers, num_workers - 1), torch.zeros(1, 9, dtype=bool)])
    fused = torchgcc.BACC(3, num_workers, alpha=alpha, backend="triton").decoder.decode_matrix(masks, check=False)
    numba = torchgcc.BACC(3, num_workers, alpha=alpha, backend="numba").decoder.decode_matrix(masks, check=False)
    assert torch.isnan(fused[-1]).all() and torch.isfinite(fused[:-1]).all()
    for group in range(len(masks) - 1):
        tolerance = berrut_tolerance(beta[masks[group]].numpy(), alpha.numpy())
        torch.testing.assert_close(fused[group], numba[group], rtol=0, atol=tolerance)


@interpreted
def test_interpreted_decode_matches_the_torch_path_and_keeps_the_errors():
    fused = torchgcc.GCC(4, 8, lambda_dec="spacing", backend="triton")
    banded = torchgcc.GCC(4, 8, lambda_dec="spacing", backend="torch")
    y = torch.randn(3, 8, 5)
    mask = random_masks(3, 8, 3, seed=2)
    torch.testing.assert_close(fused.decoder(y, mask), banded.decoder(y, mask), rtol=1e-6, atol=1e-6)
    short = mask.clone()
    short[1] = False
    short[1, 4] = True
    with pytest.raises(ValueError) as fused_error:
        fused.decoder(y, short)
    with pytest.raises(ValueError) as banded_error:
        banded.decoder(y, short)
    assert str(fused_error.value) == str(banded_error.value)
    bad = y.clone()
    bad[2, mask[2].nonzero()[0, 0], 1] = float("inf")
    with pytest.raises(ValueError, match="non-finite result from worker"):
        fused.decoder(bad, mask)


@interpreted
@pytest.mark.parametrize("lam", ["adaptive", "gcv"])
def test_interpreted_kernel_builds_the_gcv_rules_choice(lam):
    """The GCV rules on the triton backend: GCV chooses on the device, the kernel builds the matrices (``"gcv"``: a
    table of mu per group); the default calibrates on the first call and then builds every later batch's matrices
    in the kernel alone."""
    fused, torch_path = (torchgcc.GCC(4, 10, lambda_dec=lam, backend=b).decoder for b in ("triton", "torch"))
    generator = torch.Generator().manual_seed(4)
    y = torch.sin(3 * fused.beta).view(1, 10, 1) + 0.05 * torch.randn(
        6, 10, 2, generator=generator, dtype=torch.float64
    )
    mask = masks_with_every_straggler_count(10, 5)
    torch.testing.assert_close(fused(y, mask), torch_path(y, mask), rtol=0, atol=1e-12)
    torch.testing.assert_close(fused.last_lambda, torch_path.last_lambda, rtol=0, atol=0)
    later = masks_with_every_straggler_count(10, 5, seed=7)
    torch.testing.assert_close(fused(y, later), torch_path(y, later), rtol=0, atol=1e-12)


@interpreted
def test_interpreted_check_false_and_straggle_policy():
    y = torch.randn(2, 8, 4)
    mask = random_masks(2, 8, 2, seed=3)
    nan_at_straggler = y.clone()
    nan_at_straggler[0, (~mask[0]).nonzero()[0, 0]] = float("nan")
    checked = torchgcc.BACC(3, 8, backend="triton").decoder
    reference = checked(y, mask)
    torch.testing.assert_close(checked(nan_at_straggler, mask), reference)  # NaN at a straggler never reaches out
    unchecked = torchgcc.BACC(3, 8, backend="triton", check=False).decoder
    torch.testing.assert_close(unchecked(y, mask), reference)
    straggle = torchgcc.BACC(3, 8, backend="triton", check=False, nonfinite="straggle").decoder
    torch.testing.assert_close(straggle(nan_at_straggler, mask), reference)


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_interpreted_product_equals_bmm_counts_non_finite_estimates_and_has_bmms_gradients(dtype):
    """The product kernel over several tiles of points (K = 70 > 64) and of outputs (d = 130 > 64) with matrices
    given transposed (the kernels' rows), against ``torch.bmm`` in float32 rounded once; its flag counts the
    non-finite estimates (a NaN at a straggler, a float16 overflow); without the check the estimates are the same."""
    from torchgcc.functional import fused_decode

    generator = torch.Generator().manual_seed(0)
    rows = torch.randn(3, 80, 70, generator=generator, dtype=torch.float64)
    y = torch.randn(3, 80, 130, generator=generator).to(dtype)
    matrices = rows.transpose(1, 2)
    out, flag = fused_decode.apply_rows(matrices, y, True)
    expected = torch.bmm(matrices.float(), y.float()).to(dtype)
    assert out.dtype == dtype and out.shape == (3, 70, 130) and int(flag) == 0
    ulp = {torch.float32: 2**-23, torch.float16: 2**-10, torch.bfloat16: 2**-7}[dtype]
    torch.testing.assert_close(out.float(), expected.float(), rtol=2 * ulp, atol=80 * 2**-23 * 10)
    torch.testing.assert_close(fused_decode.apply_rows(matrices, y, False)[0], out, rtol=0, atol=0)
    bad = y.clone()
    bad[1, 5, 7] = float("nan")
    assert int(fused_decode.apply_rows(matrices, bad, True)[1]) == 70  # a column of every point
    if dtype == torch.float16:
        assert int(fused_decode.apply_rows(matrices * 1e4, y, True)[1]) > 0  # beyond float16's 65504
    wanted = y.detach().float().requires_grad_()
    weights = matrices.detach().clone().requires_grad_()
    fused_decode.apply_rows(weights, wanted, True)[0].sum().backward()
    reference_y, reference_m = wanted.detach().requires_grad_(), matrices.detach().clone().requires_grad_()
    torch.bmm(reference_m.float(), reference_y).sum().backward()
    torch.testing.assert_close(wanted.grad, reference_y.grad, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(weights.grad, reference_m.grad, rtol=1e-6, atol=1e-4)
