"""The decode plan's launch and sync budget, counted with torch.profiler on CPU: every aten op recorded (each is a
kernel launch on CUDA) and every op that reads device memory back to the host (a synchronisation on CUDA).

The counts must not depend on the batch, on how many distinct survivor counts it holds, or on which masks it holds,
so that the decode is one static sequence of launches (capturable in a CUDA graph); the default check reads one
flag, ``check=False`` none.
"""

import pytest
import torch
from helpers import profiled

import torchgcc
from torchgcc.stragglers import BernoulliStragglers, FixedStragglers

#: Ops per decode call allowed (issue 17).
OPS_BUDGET = 300


def masks(kind: str, batch: int, workers: int) -> torch.Tensor:
    if kind == "fixed":
        return FixedStragglers(workers // 4, seed=0).sample(batch, workers)
    return BernoulliStragglers(0.25, seed=0, min_arrived=2).sample(batch, workers)


def test_the_bernoulli_masks_hold_many_survivor_counts():
    """The premise of the comparisons below: 1 distinct count for fixed masks, at least 9 for Bernoulli ones."""
    assert len(torch.unique(masks("fixed", 512, 64).sum(-1))) == 1
    assert len(torch.unique(masks("bernoulli", 512, 64).sum(-1))) >= 9


@pytest.mark.parametrize("backend", ["torch", "numba"])
@pytest.mark.parametrize("rule", ["adaptive", "spacing", 0.0])
@pytest.mark.parametrize("check", [True, False])
def test_decode_ops_do_not_depend_on_the_batch_or_the_masks(rule, check, backend):
    code = torchgcc.GCC(16, 64, lambda_dec=rule, check=check, backend=backend)
    y = torch.randn(512, 64, 100)
    code.decoder(y, masks("fixed", 512, 64))  # the adaptive rule calibrates on its first batch
    counts = {}
    for batch in (8, 512):
        for kind in ("fixed", "bernoulli"):
            results, mask = y[:batch], masks(kind, batch, 64)
            counts[batch, kind] = profiled(lambda results=results, mask=mask: code.decoder(results, mask))
    assert len(set(counts.values())) == 1, counts
    ops, reads = counts[512, "bernoulli"]
    assert ops <= OPS_BUDGET
    assert reads == (1 if check else 0)


def test_decode_ops_depend_on_the_number_of_workers_only_through_the_levels():
    """On the torch path, other N change the sizes of the blocks, not the sequence of ops, until the solve needs
    another level of nested dissection (O(log N) levels): each level adds the same ops."""

    def decode_ops(num_workers: int) -> tuple[int, int]:
        code = torchgcc.GCC(4, num_workers, lambda_dec="spacing", backend="torch")
        y, mask = torch.randn(8, num_workers, 3), masks("bernoulli", 8, num_workers)
        return len(code.decoder.plan.solve.levels), profiled(lambda: code.decoder(y, mask))[0]

    by_levels: dict[int, set[int]] = {}
    for num_workers in (8, 16, 24, 33, 64, 176, 178, 257, 1000):
        levels, ops = decode_ops(num_workers)
        by_levels.setdefault(levels, set()).add(ops)
    assert sorted(by_levels) == [0, 1, 2] and all(len(ops) == 1 for ops in by_levels.values()), by_levels
    none, one, two = (by_levels[levels].pop() for levels in (0, 1, 2))
    assert two - one == one - none > 0


def test_lcc_decode_ops_do_not_depend_on_the_number_of_workers():
    """LCC's Lagrange basis and Chebyshev fit run a fixed sequence of ops, with no step per node: N = 12 and 30 (the
    padded node sets take one round of the exponent-tracked products, up to 32 factors) run the same ops, as do
    N = 40 and 60 (two rounds; at N = 64 the padding to whole runs of 32 is empty and skipped: 6 ops fewer)."""

    def decode_ops(num_workers: int) -> int:
        code = torchgcc.LCC(4, num_workers, degree=2, check=False)
        y, mask = torch.randn(8, num_workers, 3), masks("fixed", 8, num_workers)
        return profiled(lambda: code.decoder(y, mask))[0]

    assert decode_ops(12) == decode_ops(30)
    assert decode_ops(40) == decode_ops(60)


def test_the_first_adaptive_call_calibrates_and_later_ones_are_mask_only():
    code = torchgcc.GCC(16, 64, check=False)
    y, mask = torch.randn(64, 64, 50), masks("bernoulli", 64, 64)
    first, _ = profiled(lambda: code.decoder.recalibrate() or code.decoder(y, mask))
    later = profiled(lambda: code.decoder(y, mask))
    spacing = torchgcc.GCC(16, 64, lambda_dec="spacing", check=False)
    assert later == profiled(lambda: spacing.decoder(y, mask))
    assert first > later[0]


@pytest.mark.parametrize(
    "make",
    [
        lambda check: torchgcc.GCC(8, 32, check=check),
        lambda check: torchgcc.BACC(8, 32, check=check),
        lambda check: torchgcc.GCC(8, 32, lambda_dec="spacing", check=check),
        lambda check: torchgcc.LCC(8, 32, degree=2, check=check),  # a least-squares fit: no read of its own
    ],
)
@pytest.mark.parametrize("check", [True, False])
def test_encoder_decoder_and_coded_module_reads(make, check):
    """The decoder: check=False no read, check=True one. The encoder reads one number on CPU in eager mode (its
    inputs' largest magnitude, to skip the scaled product where it cannot overflow: no synchronisation there), none
    for float16 inputs (which cannot overflow in float32) and none on CUDA (tests/test_cuda.py's sync test) or under
    torch.compile (tests/test_compile.py's fullgraph tests)."""
    torch.manual_seed(0)
    code = make(check)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    coded = torchgcc.CodedModule(model, code)
    x, mask = torch.randn(40, 6), masks("bernoulli", 5, 32)
    assert profiled(lambda: code.encoder(torch.randn(5, 8, 6)))[1] == 1
    assert profiled(lambda: code.encoder(torch.randn(5, 8, 6).half()))[1] == 0
    assert profiled(lambda: code.decoder(torch.randn(5, 32, 3), mask))[1] == (1 if check else 0)
    assert profiled(lambda: coded(x, mask=mask))[1] == (2 if check else 1)


def test_a_model_with_three_outputs_is_decoded_in_one_call():
    """The decoder's work is done once for a dict of three tensors: the same ops as for one tensor of all three
    outputs side by side, plus the split."""
    torch.manual_seed(0)

    class Three(torch.nn.Module):
        def forward(self, x):
            return {"a": x[:, :2], "b": x[:, 2:5] * 2, "c": x.sum(-1, keepdim=True)}

    code = torchgcc.GCC(4, 16, lambda_dec="spacing", check=False)
    calls = []
    code.decoder.register_forward_hook(lambda module, args, out: calls.append(args[0].shape))
    out = torchgcc.CodedModule(Three(), code)(torch.randn(12, 6), mask=masks("fixed", 3, 16))
    assert set(out) == {"a", "b", "c"} and calls == [torch.Size([3, 16, 6])]
