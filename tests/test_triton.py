"""The fused Triton decode kernels (``backend="triton"``) against the batched torch path.

Without a GPU the kernels run in Triton's CPU interpreter, which must be switched on before they are defined:
``test_kernels_under_the_triton_interpreter`` reruns the ``interpreted`` tests of this file in a subprocess with
``TRITON_INTERPRET=1`` (small sizes; the interpreter is slow). ``benchmarks/fused_kernel_check.py`` runs the full
grid of N, straggler counts and lambdas.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import berrut_points_on_nodes, masks_with_every_straggler_count, random_masks

import torchgcc

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
    ]
    result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
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
    with pytest.raises(ValueError, match="use backend='torch'"):
        code.decoder.decode_matrix(torch.ones(2, 8, dtype=torch.bool))


@interpreted
@pytest.mark.parametrize("lam", [0.0, 1e-6, "spacing"])
@pytest.mark.parametrize("num_workers,num_inputs", [(8, 3), (13, 5)])
def test_interpreted_spline_kernel_equals_the_torch_path(lam, num_workers, num_inputs):
    fused = torchgcc.GCC(num_inputs, num_workers, lambda_dec=lam, backend="triton").decoder
    torch_path = torchgcc.GCC(num_inputs, num_workers, lambda_dec=lam, backend="torch").decoder
    masks = masks_with_every_straggler_count(num_workers, num_workers - 2)
    got = fused.decode_matrix(masks)
    assert got.dtype == torch.float64 and got.shape == (len(masks), num_inputs, num_workers)
    assert (got[~masks.unsqueeze(1).expand_as(got)] == 0).all()
    torch.testing.assert_close(got, torch_path.decode_matrix(masks), rtol=0, atol=1e-12)


@interpreted
def test_interpreted_spline_kernel_extrapolates_linearly_outside_the_survivors():
    """Stragglers at both ends leave alpha outside the surviving points (the natural spline's linear pieces)."""
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[0, :4] = False
    mask[1, -5:] = False
    for lam in (0.0, "spacing"):
        fused = torchgcc.GCC(6, 12, lambda_dec=lam, backend="triton").decoder.decode_matrix(mask)
        torch.testing.assert_close(
            fused, torchgcc.GCC(6, 12, lambda_dec=lam, backend="torch").decoder.decode_matrix(mask), rtol=0, atol=1e-12
        )


@interpreted
def test_interpreted_berrut_kernel_equals_the_torch_path_also_at_nodes():
    num_workers = 9
    beta, alpha = berrut_points_on_nodes(num_workers)
    masks = masks_with_every_straggler_count(num_workers, num_workers - 1)
    fused = torchgcc.BACC(3, num_workers, alpha=alpha, backend="triton").decoder.decode_matrix(masks)
    banded = torchgcc.BACC(3, num_workers, alpha=alpha, backend="torch").decoder.decode_matrix(masks)
    torch.testing.assert_close(fused, banded, rtol=0, atol=1e-13)


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
    """The GCV rules on the triton backend: GCV chooses on the device, the kernel builds the matrices; the default
    calibrates on the first call and then builds every later batch's matrices in the kernel alone."""
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
