"""The compiled CPU decode kernels (``backend="numba"``, the default for CPU data) against independent references
(scipy's splines, Berrut's formula written point by point) and against the decoders' contract on the torch path."""

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import berrut_points_on_nodes, masks_with_every_straggler_count, random_masks
from references import berrut_reference, csaps_reference, natural_spline_reference, solve_tolerance

import torchgcc
from torchgcc.codes.gcc import spacing_lambda
from torchgcc.functional import numba_decode


def masks_with_stragglers_also_at_the_ends(num_workers: int, max_stragglers: int) -> torch.Tensor:
    """Two random masks per straggler count 0..max_stragglers, and those masks with the first or last two workers
    straggling too (where at least two survive): alpha then lies outside the survivors (the natural spline's linear
    pieces)."""
    masks = torch.cat([masks_with_every_straggler_count(num_workers, max_stragglers, seed) for seed in (0, 100)])
    ends = masks.clone()
    ends[::2, :2] = False
    ends[1::2, -2:] = False
    return torch.cat([masks, ends[ends.sum(-1) >= 2]])


def test_the_cpu_default_is_the_numba_kernel():
    assert torchgcc.GCC(4, 8).decoder.kernel_backend(torch.device("cpu")) == "numba"
    assert torchgcc.BACC(4, 8).decoder.kernel_backend(torch.device("cpu")) == "numba"
    assert torchgcc.LCC(4, 8, degree=1).decoder.kernel_backend(torch.device("cpu")) == "torch"  # no kernel
    assert torchgcc.GCC(4, 8, backend="torch").decoder.kernel_backend(torch.device("cpu")) == "torch"
    with pytest.raises(ValueError, match="backend='numba' is not available for LagrangeDecoder"):
        torchgcc.LCC(4, 8, degree=1, backend="numba")


def csaps_tolerance(knots: np.ndarray, lam: float) -> float:
    """:func:`solve_tolerance` plus csaps's own error: it takes ``p = 1 / (1 + n lam)`` and smooths with ``1 - p``,
    whose rounding changes ``n lam`` by a relative ``eps / (n lam)`` (2e-7 at the spacing rule's n lam ~ 1e-9 for
    n = 301), and the matrix entries by as much."""
    mu = len(knots) * lam
    return solve_tolerance(knots, lam) + (np.finfo(np.float64).eps / mu if mu > 0 else 0.0)


@pytest.mark.parametrize("lam", [0.0, 1e-6, 1e-2, "spacing"])
@pytest.mark.parametrize("num_workers,num_inputs", [(3, 2), (8, 3), (13, 5), (64, 16), (301, 7)])
def test_spline_kernel_matches_csaps_and_scipy_on_every_group(lam, num_workers, num_inputs):
    """Points inside each group's survivors against csaps, to the conditioning of the system and of csaps's
    parameter (:func:`csaps_tolerance`); points beyond them (the ends straggled) against scipy's spline continued
    linearly, at scipy's own accuracy (its B-spline smoothing fit differs from csaps by up to 8e-8 at n = 301,
    lam = 1e-2)."""
    decoder = torchgcc.GCC(num_inputs, num_workers, lambda_dec=lam, backend="numba").decoder
    masks = masks_with_stragglers_also_at_the_ends(num_workers, min(num_workers - 2, 12))
    if num_workers > 64:  # a few groups: the references are dense
        masks = masks[::5]
    got = decoder.decode_matrix(masks)
    assert got.dtype == torch.float64 and got.shape == (len(masks), num_inputs, num_workers)
    assert (got.transpose(1, 2)[~masks] == 0).all()  # straggler columns exactly zero
    beta, alpha = decoder.beta.numpy(), decoder.alpha.numpy()
    for row, mask in zip(got.numpy(), masks.numpy()):
        knots = beta[mask]
        rule = float(spacing_lambda(len(knots))) if lam == "spacing" else lam
        inside = (alpha >= knots[0]) & (alpha <= knots[-1])
        expected = csaps_reference(knots, alpha[inside], rule)
        np.testing.assert_allclose(row[inside][:, mask], expected, rtol=0, atol=csaps_tolerance(knots, rule))
        if (~inside).any() and (rule == 0 or len(knots) >= 5):
            expected = natural_spline_reference(knots, alpha[~inside], rule)
            np.testing.assert_allclose(row[~inside][:, mask], expected, rtol=0, atol=1e-7)


@pytest.mark.parametrize("num_workers", [8, 64, 1100])
def test_spline_kernel_equals_the_torch_path(num_workers):
    """The same matrices as the batched torch path (its nested-dissection levels at N = 1100) for Bernoulli masks,
    to the conditioning of each group's system: both are backward-stable solves of it."""
    masks = torchgcc.stragglers.BernoulliStragglers(0.3, seed=1, min_arrived=2).sample(6, num_workers)
    for lam in (0.0, "spacing"):
        kernel, banded = (torchgcc.GCC(8, num_workers, lambda_dec=lam, backend=b).decoder for b in ("numba", "torch"))
        got, expected = kernel.decode_matrix(masks), banded.decode_matrix(masks)
        for group, mask in enumerate(masks):
            knots = kernel.beta[mask].numpy()
            rule = float(spacing_lambda(len(knots))) if lam == "spacing" else lam
            tolerance = solve_tolerance(knots, rule)
            torch.testing.assert_close(got[group], expected[group], rtol=0, atol=tolerance)


def test_berrut_kernel_matches_the_definition_also_at_nodes():
    num_workers = 9
    beta, alpha = berrut_points_on_nodes(num_workers)
    masks = masks_with_stragglers_also_at_the_ends(num_workers, num_workers - 1)
    got = torchgcc.BACC(3, num_workers, alpha=alpha, backend="numba").decoder.decode_matrix(masks)
    for row, mask in zip(got, masks):
        expected = berrut_reference(beta[mask].numpy(), alpha.numpy())
        np.testing.assert_allclose(row[:, mask].numpy(), expected, rtol=0, atol=1e-13)
        assert (row[:, ~mask] == 0).all()


@pytest.mark.parametrize("lam", ["adaptive", "gcv"])
def test_the_gcv_rules_choose_as_on_the_torch_path_and_the_kernel_builds_their_matrices(lam):
    kernel, banded = (torchgcc.GCC(4, 10, lambda_dec=lam, backend=b).decoder for b in ("numba", "torch"))
    generator = torch.Generator().manual_seed(4)
    y = torch.sin(3 * kernel.beta).view(1, 10, 1) + 0.05 * torch.randn(
        6, 10, 2, generator=generator, dtype=torch.float64
    )
    mask = masks_with_stragglers_also_at_the_ends(10, 5)[:6]
    torch.testing.assert_close(kernel(y, mask), banded(y, mask), rtol=0, atol=1e-12)
    torch.testing.assert_close(kernel.last_lambda, banded.last_lambda, rtol=0, atol=0)


def test_decoder_errors_and_policies_are_those_of_the_torch_path():
    kernel, banded = (torchgcc.GCC(4, 8, lambda_dec="spacing", backend=b) for b in ("numba", "torch"))
    y, mask = torch.randn(3, 8, 5), random_masks(3, 8, 3, seed=2)
    torch.testing.assert_close(kernel.decoder(y, mask), banded.decoder(y, mask), rtol=1e-6, atol=1e-6)
    short = mask.clone()
    short[1] = False
    short[1, 4] = True
    messages = []
    for code in (kernel, banded):
        with pytest.raises(ValueError) as error:
            code.decoder(y, short)
        messages.append(str(error.value))
    assert messages[0] == messages[1]
    unchecked = torchgcc.GCC(4, 8, lambda_dec="spacing", backend="numba", check=False).decoder(y, short)
    assert torch.isnan(unchecked[1]).all() and torch.isfinite(unchecked[[0, 2]]).all()
    nan_at_straggler = y.clone()
    nan_at_straggler[0, (~mask[0]).nonzero()[0, 0]] = float("nan")
    torch.testing.assert_close(kernel.decoder(nan_at_straggler, mask), kernel.decoder(y, mask))


def test_unusable_groups_are_nan_and_stragglers_rows_zero_in_the_kernels_own_output():
    """The kernels mark a group of fewer than ``min_arrived`` survivors themselves (NaN everywhere) and write the
    stragglers' rows as zeros; with a per-group smoothing table each group reads its own row."""
    beta, alpha = torch.linspace(-1, 1, 9, dtype=torch.float64), torch.tensor([-0.5, 0.1, 0.7], dtype=torch.float64)
    mask = masks_with_every_straggler_count(9, 8)  # 9 .. 1 survivors
    mu = torch.arange(10, dtype=torch.float64).view(1, -1) * 1e-3
    for rows, fewest in (
        (numba_decode.spline_rows(mask, beta, alpha, mu, 4), 4),
        (numba_decode.berrut_rows(mask, beta, alpha, 3), 3),
    ):
        unusable = mask.sum(-1) < fewest
        assert rows.shape == (9, 9, 3) and torch.isnan(rows[unusable]).all()
        assert torch.isfinite(rows[~unusable]).all() and (rows[~unusable][~mask[~unusable]] == 0).all()
    per_group = numba_decode.spline_rows(
        mask, beta, alpha, mu.expand(9, -1).contiguous() * torch.arange(9).view(-1, 1), 2
    )
    for group in (0, 4):
        alone = numba_decode.spline_rows(mask[group : group + 1], beta, alpha, mu * group, 2)
        torch.testing.assert_close(per_group[group], alone[0], rtol=0, atol=0)


def test_the_registered_operators_pass_torch_library_opcheck():
    """Schema, fake (shape-only) implementation and the CPU kernel agree, as ``torch.compile`` needs them to."""
    beta, alpha = torch.linspace(-1, 1, 8, dtype=torch.float64), torch.tensor([-0.3, 0.2], dtype=torch.float64)
    mask = random_masks(5, 8, 3, seed=1)
    mu = torch.full((1, 9), 1e-4, dtype=torch.float64)
    for dtype in (torch.float64, torch.float32):
        torch.library.opcheck(torch.ops.torchgcc.numba_spline_rows, (mask, beta, alpha, mu, 2, dtype))
        torch.library.opcheck(torch.ops.torchgcc.numba_berrut_rows, (mask, beta, alpha, 1, dtype))


def test_float32_rows_are_the_float64_rows_rounded_once():
    """The forward pass asks the kernels for float32 rows (no conversion pass before a float32 product): each entry
    is the float64 one rounded once, the interval's weights a, b included."""
    beta, alpha = torch.linspace(-1, 1, 40, dtype=torch.float64), torch.linspace(-0.95, 0.95, 9, dtype=torch.float64)
    mask = masks_with_stragglers_also_at_the_ends(40, 20)
    mu = torch.arange(41, dtype=torch.float64) * 1e-5
    for rows in (
        lambda dtype: numba_decode.spline_rows(mask, beta, alpha, mu, 2, dtype),
        lambda dtype: numba_decode.berrut_rows(mask, beta, alpha, 1, dtype),
    ):
        single, double = rows(torch.float32), rows(torch.float64)
        assert single.dtype == torch.float32 and torch.equal(single, double.float())


def test_concurrent_calls_from_threads_give_the_serial_results():
    """The kernels release the GIL: decoders called from several threads at once must not share scratch memory."""
    decoder = torchgcc.GCC(8, 64, lambda_dec="spacing", backend="numba").decoder
    masks = [torchgcc.stragglers.BernoulliStragglers(0.3, seed=s, min_arrived=2).sample(64, 64) for s in range(8)]
    serial = [decoder.decode_matrix(mask) for mask in masks]
    results = [None] * len(masks)

    def work(i):
        for _ in range(5):
            results[i] = decoder.decode_matrix(masks[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(masks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for got, expected in zip(results, serial):
        assert torch.equal(got, expected)


def test_import_torchgcc_imports_neither_numba_nor_triton_until_a_cpu_decode():
    code = (
        "import sys, torch, torchgcc; c = torchgcc.GCC(4, 8); before = 'numba' in sys.modules; "
        "c.decoder(torch.randn(2, 8, 3), torch.ones(2, 8, dtype=torch.bool)); "
        "print(before, 'numba' in sys.modules, 'triton' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["False", "True", "False"], result.stderr[-2000:]


def test_warm_up_compiles_the_kernel_reads_no_data_and_leaves_the_default_uncalibrated():
    code = (
        "import torch, torchgcc; from torchgcc.functional import numba_decode as k; c = torchgcc.GCC(4, 8); "
        "before = len(k._spline_kernel.signatures); c.decoder.warm_up(); "
        "print(before, len(k._spline_kernel.signatures), c.decoder.calibrated)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["0", "2", "False"], result.stderr[-2000:]  # float32 and float64 rows
    torchgcc.GCC(4, 8, backend="torch").decoder.warm_up()  # nothing to compile: no error
    torchgcc.LCC(4, 8, degree=1).decoder.warm_up()


def test_a_batch_split_over_threads_equals_one_call_and_a_forked_child_still_decodes(monkeypatch):
    """Large batches are split over torch's threads (``MIN_WORK_PER_THREAD``); a child forked after the parent used
    the helper threads has none of them, and must decode all the same (not wait forever on a dead pool)."""
    decoder = torchgcc.GCC(16, 64, lambda_dec="spacing", backend="numba").decoder
    mask = torchgcc.stragglers.BernoulliStragglers(0.3, seed=3, min_arrived=2).sample(512, 64)
    # the thread count is patched, not set: torch.set_num_threads(n > 1) leaves MKL's batched LU wrong for the rest
    # of the process (tests/test_functional.py's dense references of n = 300 fail after it; torch 2.14.1, MKL)
    monkeypatch.setattr(numba_decode, "MIN_WORK_PER_THREAD", 2**62)
    whole = decoder.decode_matrix(mask)
    monkeypatch.setattr(numba_decode, "MIN_WORK_PER_THREAD", 1)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    split = decoder.decode_matrix(mask)
    monkeypatch.undo()
    assert torch.equal(whole, split)
    # the child calls the kernel directly and checks in numpy: torch's own multithreaded ops hang in a forked child
    # once the parent has used its OpenMP threads (torch's limitation, not the kernel's)
    code = (
        "import os, numpy as np, torch, torchgcc\n"
        "from torchgcc.functional.numba_decode import spline_rows\n"
        "torch.set_num_threads(2)\n"
        "beta, alpha = torch.linspace(-1, 1, 64, dtype=torch.float64), torch.linspace(-0.9, 0.9, 16).double()\n"
        "m, mu = torch.ones(512, 64, dtype=torch.bool), torch.full((1, 65), 1e-4, dtype=torch.float64)\n"
        "spline_rows(m, beta, alpha, mu, 2)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if np.isfinite(spline_rows(m, beta, alpha, mu, 2).numpy()).all() else 1)\n"
        "print(os.waitpid(pid, 0)[1])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["0"], result.stderr[-2000:]


def test_a_read_only_install_without_a_writable_home_decodes(tmp_path):
    """numba caches compiled kernels next to their source or under the user's home; a read-only install run by a user
    without a writable home has neither (NUMBA_CACHE_DIR unset): the kernels compile in the process, after one
    warning, instead of the first decode failing. A file stands where each cache directory would go, so that the
    directories cannot be made even by root (who ignores permission bits)."""
    package = tmp_path / "site-packages"
    shutil.copytree(Path(torchgcc.__file__).parent, package / "torchgcc", ignore=shutil.ignore_patterns("__pycache__"))
    (package / "torchgcc" / "functional" / "__pycache__").write_text("")
    home = tmp_path / "home"
    home.write_text("")
    for path in [package, *package.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
    env = {key: value for key, value in os.environ.items() if key not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), PYTHONPATH=str(package), PYTHONDONTWRITEBYTECODE="1")
    code = (
        "import logging, torch, torchgcc; logging.basicConfig(); code = torchgcc.GCC(4, 8, lambda_dec='spacing'); "
        "out = code.decoder(torch.randn(3, 8, 2), torch.ones(3, 8, dtype=torch.bool)); "
        "print(torchgcc.__file__.startswith(%r), code.decoder.kernel_backend(out.device), bool(out.isfinite().all()))"
    ) % str(package)
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert result.stdout.split() == ["True", "numba", "True"], result.stderr[-3000:]
    assert result.stderr.count("no writable cache directory") == 1, result.stderr[-3000:]
