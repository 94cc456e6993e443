"""torch.compile of the decoder and of CodedModule: the whole decode, matrix construction included, is one graph
(``fullgraph=True``, inductor on CPU) that runs the same kernel as eager calls (a registered operator) and does not
recompile for new masks; and the float16 decode staying on its fast path."""

import pytest
import torch
from helpers import random_masks
from torch.profiler import profile
from torch.utils._python_dispatch import TorchDispatchMode

import torchgcc
from torchgcc.stragglers import BernoulliStragglers, FixedStragglers

MATMULS = {"mm", "bmm", "matmul", "baddbmm", "addmm"}


class CountMatmuls(TorchDispatchMode):
    """Counts the matrix products with ``width`` output columns (the decoder's application to the results, not the
    small products that build its matrices) dispatched inside the ``with`` block."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width, self.count = width, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ in MATMULS and out.shape[-1] == self.width:
            self.count += 1
        return out


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))


def test_compiled_coded_module_matches_eager_and_draws_the_same_masks():
    torch._dynamo.reset()
    model, code = small_model(), torchgcc.GCC(num_inputs=4, num_workers=16)
    eager = torchgcc.CodedModule(model, code, FixedStragglers(4, seed=0))
    compiled = torch.compile(torchgcc.CodedModule(model, code, FixedStragglers(4, seed=0)), backend="aot_eager")
    x = torch.randn(10, 12)
    for _ in range(2):  # the second call reuses the compiled graphs and draws a new mask
        torch.testing.assert_close(compiled(x), eager(x), rtol=0, atol=1e-6)


def test_compiled_decoders_match_eager():
    torch._dynamo.reset()
    y = torch.randn(3, 16, 7)
    mask = random_masks(3, 16, 5, seed=1)
    for code in (torchgcc.GCC(4, 16), torchgcc.BACC(4, 16), torchgcc.GCC(4, 16, nonfinite="straggle")):
        compiled = torch.compile(code.decoder, backend="aot_eager")
        torch.testing.assert_close(compiled(y, mask), code.decoder(y, mask), rtol=0, atol=0)


def mixed_masks(batch: int, workers: int, count: int = 20) -> list[torch.Tensor]:
    """``count`` random masks with mixed survivor counts within each batch and across batches."""
    masks = [BernoulliStragglers(0.3, seed=seed, min_arrived=2).sample(batch, workers) for seed in range(count)]
    assert len({int(n) for mask in masks for n in mask.sum(-1)}) >= 5
    return masks


@pytest.mark.parametrize("rule", ["adaptive", "spacing"])
def test_fullgraph_compiled_decoder_never_recompiles_and_matches_eager(rule):
    """``check=False``: no graph break (fullgraph) and no recompilation over 20 masks, float32 results within 1e-6 of
    eager. The adaptive default calibrates on its first (eager) call; later calls are mask-only."""
    torch._dynamo.reset()
    code = torchgcc.GCC(4, 16, lambda_dec=rule, check=False)
    y, masks = torch.randn(8, 16, 5), mixed_masks(8, 16)
    code.decoder(y, masks[0])
    compiled = torch.compile(code.decoder, fullgraph=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for mask in masks:
            torch.testing.assert_close(compiled(y, mask), code.decoder(y, mask), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "make,kernel",
    [
        (lambda: torchgcc.GCC(4, 16, check=False), "torchgcc::numba_spline_rows"),
        (lambda: torchgcc.GCC(4, 16, lambda_dec=0.0, check=False), "torchgcc::numba_spline_rows"),
        (lambda: torchgcc.BACC(4, 16, check=False), "torchgcc::numba_berrut_rows"),
    ],
    ids=["default", "natural", "bacc"],
)
def test_fullgraph_compiled_decoders_run_the_same_cpu_kernel_as_eager(make, kernel):
    """The compiled graph calls the registered numba operator (no op of the batched torch path: its sort, its
    Cholesky factorisations), and the default does so once calibrated, as eager calls do."""
    torch._dynamo.reset()
    code = make()
    y, mask = torch.randn(8, 16, 5), mixed_masks(8, 16)[0]
    expected = code.decoder(y, mask)
    compiled = torch.compile(code.decoder, fullgraph=True)
    compiled(y, mask)
    with profile() as recorded:
        got = compiled(y, mask)
    names = {event.name for event in recorded.events()}
    assert kernel in names and not names & {"aten::sort", "aten::linalg_cholesky_ex"}, sorted(names)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_an_uncalibrated_default_refuses_fullgraph_compilation_with_a_clear_error():
    """Its first call chooses the smoothing from the results (a read back, not traceable): compiled with
    ``fullgraph=True`` before any eager call it raises saying what to do, and stays uncalibrated."""
    torch._dynamo.reset()
    code = torchgcc.GCC(4, 16, check=False)
    y, mask = torch.randn(8, 16, 5), mixed_masks(8, 16)[0]
    with pytest.raises(RuntimeError, match="not calibrated yet.*Call the decoder once eagerly"):
        torch.compile(code.decoder, fullgraph=True)(y, mask)
    assert not code.decoder.calibrated
    expected = code.decoder(y, mask)
    torch.testing.assert_close(torch.compile(code.decoder, fullgraph=True)(y, mask), expected, rtol=0, atol=0)


def test_fullgraph_compiled_coded_module_never_recompiles_and_matches_eager():
    torch._dynamo.reset()
    coded = torchgcc.CodedModule(small_model(), torchgcc.GCC(4, 16, check=False))
    x, masks = torch.randn(30, 12), mixed_masks(8, 16)
    coded(x, mask=masks[0])
    compiled = torch.compile(coded, fullgraph=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for mask in masks:
            torch.testing.assert_close(compiled(x, mask=mask), coded(x, mask=mask), rtol=1e-6, atol=1e-6)


def test_compiled_decoder_keeps_the_errors():
    torch._dynamo.reset()
    code = torchgcc.GCC(4, 8)
    compiled = torch.compile(code.decoder, backend="aot_eager")
    y = torch.randn(2, 8, 3)
    y[1, 2, 0] = float("nan")
    mask = torch.ones(2, 8, dtype=torch.bool)
    try:
        compiled(y, mask)
    except ValueError as error:
        assert "worker 2 in group 1" in str(error)
    else:
        raise AssertionError("a NaN from an arrived worker must raise")


def test_float16_decode_of_large_logits_takes_the_fast_path():
    """512 groups x 1000 outputs around 4: the old probe ``out[:, 0].sum()`` overflows float16 (it is about 2e6),
    which sent every call down the careful path (a second matrix product). The decode makes exactly one product
    (the mask-only spacing rule)."""
    code = torchgcc.GCC(num_inputs=4, num_workers=16, lambda_dec="spacing")
    generator = torch.Generator().manual_seed(0)
    y = (4 + torch.randn(512, 16, 1000, generator=generator)).half()
    mask = random_masks(512, 16, 4, seed=0)
    with CountMatmuls(1000) as counter:
        out = code.decoder(y, mask)
    assert counter.count == 1
    assert torch.isinf(out[:, 0].sum())  # what the old probe saw
    assert torch.isfinite(out).all()
    reference = code.decoder.decode_matrix(mask) @ y.double()
    torch.testing.assert_close(out.double(), reference, rtol=2e-2, atol=2e-2)
