"""What torch.compile(fullgraph=True) cannot record stops with torchgcc's explanation of what to do, and the rest
compiles: an uncalibrated default decoder, check=True and a mask drawn inside the call each end the graph with the
reason (without fullgraph they run after a graph break), and LCC's decoder compiles with inductor."""

import pytest
import torch
from helpers import random_masks

import torchgcc
from torchgcc.coded_module import MASK_UNDER_COMPILE
from torchgcc.codes.gcc import UNCALIBRATED_UNDER_COMPILE
from torchgcc.codes.maps import CHECK_UNDER_COMPILE
from torchgcc.stragglers import FixedStragglers

MODEL = torch.nn.Linear(5, 2)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()


@pytest.mark.parametrize(
    "code, stragglers, reason",
    [
        (lambda: torchgcc.GCC(4, 12, check=False), None, UNCALIBRATED_UNDER_COMPILE),
        (lambda: torchgcc.GCC(4, 12, lambda_dec="spacing"), None, CHECK_UNDER_COMPILE),
        (lambda: torchgcc.GCC(4, 12, lambda_dec="spacing", check=False), FixedStragglers(2), MASK_UNDER_COMPILE),
    ],
)
def test_fullgraph_stops_with_what_to_do_and_without_it_the_call_runs(code, stragglers, reason):
    x, mask = torch.randn(8, 5), random_masks(2, 12, 2)
    kwargs = {} if stragglers is not None else {"mask": mask}
    compiled = torch.compile(torchgcc.CodedModule(MODEL, code(), stragglers), fullgraph=True, backend="eager")
    with pytest.raises(torch._dynamo.exc.Unsupported) as raised:
        compiled(x, **kwargs)
    assert reason in str(raised.value)
    coded = torchgcc.CodedModule(MODEL, code(), FixedStragglers(2, seed=0) if stragglers is not None else None)
    eager = torchgcc.CodedModule(MODEL, code(), FixedStragglers(2, seed=0) if stragglers is not None else None)
    torch.testing.assert_close(torch.compile(coded, backend="eager")(x, **kwargs), eager(x, **kwargs))


def test_a_fresh_default_module_compiles_after_one_eager_batch():
    x, mask = torch.randn(8, 5), random_masks(2, 12, 2)
    coded = torchgcc.CodedModule(MODEL, torchgcc.GCC(4, 12, check=False))
    coded(x, mask=mask)  # calibrates
    compiled = torch.compile(coded, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x, mask=mask), coded(x, mask=mask), rtol=0, atol=0)


def test_the_calibrate_first_wording_exists_once():
    for advice in ("decoder.calibrate(y, mask)", "lambda_dec='spacing'", "torch.jit.trace"):
        assert advice in UNCALIBRATED_UNDER_COMPILE
    assert "check=False" in CHECK_UNDER_COMPILE and "mask=" in MASK_UNDER_COMPILE


def test_lcc_decoder_compiles_with_inductor():
    """frexp's int32 exponent converted to float64 in one kernel used to be C++ that inductor failed to compile."""
    decoder = torchgcc.LCC(3, 6, degree=2, check=False).decoder
    y, mask = torch.randn(2, 6, 3, dtype=torch.float64), random_masks(2, 6, 1)
    compiled = torch.compile(decoder, fullgraph=True)
    torch.testing.assert_close(compiled(y, mask), decoder(y, mask), rtol=0, atol=1e-12)
