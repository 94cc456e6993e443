"""CUDA checks of the GPU-native decode (marked ``cuda``, skipped without a device; run by benchmarks/gpu_check.sh).

None of these has run on this project's build machine (it has no GPU). Every code they build constructs (K <= N) and
every tolerance follows from the conditioning of what is compared; ``benchmarks/gpu_check.sh --dry-run`` collects
them on a CPU-only machine.
"""

import copy
import warnings

import pytest
import torch
from helpers import random_masks, requires_cuda
from references import berrut_tolerance, solve_tolerance

import torchgcc
from torchgcc.codes.gcc import spacing_lambda
from torchgcc.stragglers import BernoulliStragglers, FixedStragglers, LatencyStragglers

pytestmark = [pytest.mark.cuda, requires_cuda]

LAMBDAS = [0.0, 1e-6, "spacing"]


def every_straggler_count(num_workers: int, keep: int) -> torch.Tensor:
    """One seeded random mask per straggler count 0..N-keep (at most 64 of them, 16 where N > 257, evenly spread: the
    tolerance's condition number takes a banded eigensolve per group)."""
    most = 64 if num_workers <= 257 else 16
    counts = torch.linspace(0, num_workers - keep, min(most, num_workers - keep + 1)).round().long().unique()
    return torch.cat([random_masks(1, num_workers, int(s), seed=int(s)) for s in counts])


@pytest.mark.parametrize("lam", LAMBDAS)
@pytest.mark.parametrize("num_workers", [8, 64, 257, 1024, 4096])
def test_spline_kernel_equals_the_cpu_kernel(num_workers, lam):
    """The Triton kernel on the GPU against the numba kernel, group by group, to the conditioning of each group's
    system (:func:`references.solve_tolerance`: two backward-stable solves, FMA contraction included)."""
    num_inputs = min(16, num_workers // 2)
    masks = every_straggler_count(num_workers, keep=2)
    cpu = torchgcc.GCC(num_inputs, num_workers, lambda_dec=lam, backend="numba").decoder
    gpu = torchgcc.GCC(num_inputs, num_workers, lambda_dec=lam).cuda().decoder
    assert gpu.kernel_backend(torch.device("cuda")) == "triton"
    got = gpu.decode_matrix(masks.cuda()).cpu()
    expected = cpu.decode_matrix(masks)
    for group, mask in enumerate(masks):
        knots = cpu.beta[mask].numpy()
        rule = float(spacing_lambda(len(knots))) if lam == "spacing" else lam
        torch.testing.assert_close(got[group], expected[group], rtol=0, atol=solve_tolerance(knots, rule))


@pytest.mark.parametrize("num_workers", [8, 64, 1024])
def test_berrut_kernel_equals_the_cpu_kernel(num_workers):
    num_inputs = min(16, num_workers // 2)
    masks = every_straggler_count(num_workers, keep=1)
    cpu = torchgcc.BACC(num_inputs, num_workers, backend="numba").decoder
    got = torchgcc.BACC(num_inputs, num_workers).cuda().decoder.decode_matrix(masks.cuda()).cpu()
    expected = cpu.decode_matrix(masks)
    for group, mask in enumerate(masks):
        tolerance = berrut_tolerance(cpu.beta[mask].numpy(), cpu.alpha.numpy())
        torch.testing.assert_close(got[group], expected[group], rtol=0, atol=tolerance)


@pytest.mark.parametrize("rule", ["adaptive", "spacing"])
def test_fullgraph_compiled_decoder_runs_the_triton_kernels(rule):
    """Calibrated, the compiled decoder launches the same Triton kernels as eager calls (no op of the batched torch
    path), and gives the eager estimates."""
    torch._dynamo.reset()
    code = torchgcc.GCC(16, 64, lambda_dec=rule, check=False).cuda()
    y = torch.randn(64, 64, 100, device="cuda")
    mask = FixedStragglers(16, seed=0).sample(64, 64, device="cuda")
    expected = code.decoder(y, mask)
    compiled = torch.compile(code.decoder, fullgraph=True)
    compiled(y, mask)
    with torch.profiler.profile() as recorded:
        got = compiled(y, mask)
        torch.cuda.synchronize()
    names = " ".join(event.name for event in recorded.events())
    assert "_spline_rows_kernel" in names and "_apply_kernel" in names and "aten::sort" not in names, names[:3000]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_decode_on_cuda(dtype):
    """Float32 products of the low-precision results, rounded once: within one rounding of ``dtype`` (relative) plus
    the float32 sum's error over N = 32 terms (absolute) of the exact product."""
    code = torchgcc.GCC(8, 32, lambda_dec="spacing").cuda()
    y = torch.randn(64, 32, 100, device="cuda")
    mask = FixedStragglers(6, seed=0).sample(64, 32, device="cuda")
    out = code.decoder(y.to(dtype), mask)
    assert out.dtype == dtype and out.device.type == "cuda"
    matrices = code.decoder.decode_matrix(mask)
    reference = matrices @ y.to(dtype).double()
    scale = float((matrices.abs() @ y.to(dtype).double().abs()).max())
    rounding = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}[dtype]
    torch.testing.assert_close(out.double(), reference, rtol=rounding, atol=32 * 2.0**-24 * scale)


def test_device_moves_keep_the_results_and_the_calibration():
    code = torchgcc.GCC(4, 16)
    y, mask = torch.randn(5, 16, 3), random_masks(5, 16, 4, seed=1)
    expected = code.decoder(y, mask)  # calibrates on the CPU
    code.cuda()
    assert code.beta.device.type == "cuda" and code.decoder.ratio.device.type == "cuda" and code.decoder.calibrated
    torch.testing.assert_close(code.decoder(y.cuda(), mask.cuda()).cpu(), expected)
    torch.testing.assert_close(code.decoder(y.cuda(), mask).cpu(), expected)  # a CPU mask follows the results
    code.cpu()
    torch.testing.assert_close(code.decoder(y, mask), expected)
    half = torchgcc.GCC(4, 16).to("cuda", torch.bfloat16)
    assert half.beta.dtype == torch.float64


def test_coded_module_on_cuda_draws_masks_on_the_device():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).cuda()
    coded = torchgcc.CodedModule(model, torchgcc.GCC(4, 16, lambda_dec="spacing").cuda(), FixedStragglers(4, seed=0))
    out = coded(torch.randn(12, 6, device="cuda"))
    assert out.shape == (12, 3) and coded.last_mask.device.type == "cuda"
    assert (coded.last_mask.sum(dim=1) == 12).all()


@pytest.mark.parametrize(
    "sampler",
    [
        FixedStragglers(3, seed=0),
        FixedStragglers(3, "contiguous", seed=0),
        BernoulliStragglers(0.2, seed=0),
        LatencyStragglers(num_stragglers=3, seed=0),
    ],
    ids=repr,
)
def test_samplers_draw_on_the_device(sampler):
    mask = sampler.sample(7, 16, device="cuda")
    assert mask.device.type == "cuda" and mask.dtype == torch.bool and mask.shape == (7, 16)


@pytest.mark.parametrize(
    "make",
    [
        lambda: torchgcc.GCC(16, 64, check=False),
        lambda: torchgcc.GCC(16, 64, lambda_dec="spacing", check=False),
        lambda: torchgcc.BACC(16, 64, check=False),
    ],
    ids=["default", "spacing", "bacc"],
)
def test_no_host_sync_under_check_false(make):
    code = make().cuda()
    stragglers = FixedStragglers(16, seed=0)
    y = torch.randn(512, 64, 100, device="cuda")
    code.decoder(y, stragglers.sample(512, 64, device="cuda"))  # compile the kernel first (and calibrate)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        code.encoder(torch.randn(512, 16, 100, device="cuda"))  # the encoder's overflow check is off too
        mask = stragglers.sample(512, 64, device="cuda")
        out = code.decoder(y, mask)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    reference = copy.deepcopy(code).cpu().decoder
    torch.testing.assert_close(out.cpu(), reference(y.cpu(), mask.cpu()), rtol=1e-4, atol=1e-4)


def test_default_mode_syncs_at_most_once_and_keeps_the_errors():
    code = torchgcc.GCC(16, 64, lambda_dec="spacing").cuda()
    y = torch.randn(512, 64, 100, device="cuda")
    mask = FixedStragglers(16, seed=0).sample(512, 64, device="cuda")
    code.decoder(y, mask)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            code.decoder(y, mask)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert len([w for w in caught if "synchroniz" in str(w.message)]) <= 1
    short = mask.clone()
    short[3] = False
    short[3, 5] = True
    with pytest.raises(ValueError, match="group 3 has 1 arrived results but this decoder needs at least 2"):
        code.decoder(y, short)
    bad = y.clone()
    bad[7, int(mask[7].nonzero()[0]), 0] = float("nan")
    with pytest.raises(ValueError, match="in group 7"):
        code.decoder(bad, mask)


@pytest.mark.parametrize("rule", ["adaptive", "spacing"])
def test_decode_and_coded_module_forward_capture_in_a_cuda_graph(rule):
    """check=False: the decode (matrices included) and a whole CodedModule forward with an explicit mask are one
    static sequence of kernels: captured once in a CUDA graph, replayed on new masks copied into the captured
    tensor, they equal eager calls."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.GELU(), torch.nn.Linear(32, 5)).cuda()
    code = torchgcc.GCC(8, 32, lambda_dec=rule, check=False).cuda()
    coded = torchgcc.CodedModule(model, code)
    x = torch.randn(64, 6, device="cuda")
    masks = [BernoulliStragglers(0.25, seed=seed, min_arrived=2).sample(8, 32, device="cuda") for seed in range(6)]
    static_mask = masks[0].clone()
    y = torch.randn(8, 32, 100, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up (and calibrate) outside the capture
        for _ in range(2):
            code.decoder(y, static_mask)
            coded(x, mask=static_mask)
    torch.cuda.current_stream().wait_stream(stream)
    decode_graph, forward_graph = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(decode_graph):
        decoded = code.decoder(y, static_mask)
    with torch.cuda.graph(forward_graph):
        forwarded = coded(x, mask=static_mask)
    for mask in masks[1:]:
        static_mask.copy_(mask)
        decode_graph.replay()
        forward_graph.replay()
        torch.testing.assert_close(decoded, code.decoder(y, mask), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(forwarded, coded(x, mask=mask), rtol=1e-5, atol=1e-5)
