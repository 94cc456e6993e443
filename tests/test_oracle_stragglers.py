"""The oracle straggler adversary against brute force: every block by scipy, every set exhaustively at small N."""

import itertools

import numpy as np
import pytest
import torch
from references import natural_spline_reference

import torchgcc
from torchgcc.coded_module import group_samples
from torchgcc.oracles.stragglers import block_masks, decode_errors, worst_stragglers


def _workload(code, samples=32, dim=2, seed=0):
    """A smooth tanh network on Gaussian inputs: ``(results (B, N, 3), reference (B, K, 3))``."""
    generator = torch.Generator().manual_seed(seed)
    w1 = torch.randn(dim, 8, generator=generator, dtype=torch.float64)
    w2 = torch.randn(8, 3, generator=generator, dtype=torch.float64) / 8**0.5
    f = lambda x: torch.tanh(x @ w1) @ w2  # noqa: E731
    groups = group_samples(torch.randn(samples, dim, generator=generator, dtype=torch.float64), code.num_inputs)
    coded = code.encoder(groups)
    results = f(coded.flatten(0, 1)).unflatten(0, coded.shape[:2])
    return results, f(groups.flatten(0, 1)).unflatten(0, groups.shape[:2])


@pytest.mark.parametrize("n, s", [(24, 3), (40, 6)])
def test_block_search_equals_a_brute_force_over_block_positions_with_scipy(n, s):
    """Natural-spline GCC: every block position decoded one group at a time by scipy's natural CubicSpline
    (linear beyond the outermost survivors); the oracle's worst block per group agrees to 1e-9 relative."""
    code = torchgcc.make_code("natural", num_inputs=6, num_workers=n)
    results, reference = _workload(code)
    found = worst_stragglers(code.decoder, results, reference, s)
    beta, alpha = code.beta.numpy(), code.alpha.numpy()
    for group in range(len(results)):
        brute = []
        for start in range(n - s + 1):
            survivors = [i for i in range(n) if not start <= i < start + s]
            decode = natural_spline_reference(beta[survivors], alpha, 0.0)
            estimate = decode @ results[group, survivors].numpy()
            brute.append(((estimate - reference[group].numpy()) ** 2).mean())
        assert found.block_errors[group].item() == pytest.approx(max(brute), rel=1e-9)
        assert found.block_starts[group].item() == int(np.argmax(brute))
        assert found.errors[group] >= found.block_errors[group]


def test_default_gcc_worst_block_agrees_with_a_per_mask_loop_to_one_percent():
    """The data-adaptive default decoder (GCV per group): one mask and one group per call, in a plain loop."""
    n, s = 32, 4
    code = torchgcc.make_code("gcc", num_inputs=8, num_workers=n)
    results, reference = _workload(code, samples=24)
    found = worst_stragglers(code.decoder, results, reference, s, searches=("block",))
    for group in range(len(results)):
        errors = []
        for start in range(n - s + 1):
            mask = torch.ones(1, n, dtype=torch.bool)
            mask[0, start : start + s] = False
            decoded = code.decoder(results[group : group + 1], mask)
            errors.append((decoded - reference[group : group + 1]).pow(2).mean().item())
        assert found.errors[group].item() == pytest.approx(max(errors), rel=0.01)


@pytest.mark.parametrize("name", ["natural", "bacc"])
def test_oracle_finds_the_exhaustive_worst_set_at_small_n(name):
    """All C(16, 3) = 560 straggler sets: the oracle reaches the exhaustive maximum in (almost) every group, never
    reports more than a set's true error, and beats the best block where the worst set is not a block."""
    n, s = 16, 3
    code = torchgcc.make_code(name, num_inputs=4, num_workers=n)
    results, reference = _workload(code)
    sets = torch.ones(560, n, dtype=torch.bool)
    for row, stragglers in enumerate(itertools.combinations(range(n), s)):
        sets[row, list(stragglers)] = False
    exhaustive = decode_errors(code.decoder, results, reference, sets).max(dim=1).values
    found = worst_stragglers(code.decoder, results, reference, s)
    assert ((~found.masks).sum(dim=1) == s).all()
    recomputed = decode_errors(code.decoder, results, reference, found.masks.unsqueeze(1)).squeeze(1)
    torch.testing.assert_close(found.errors, recomputed, rtol=1e-12, atol=0)
    ratio = found.errors / exhaustive
    assert (ratio <= 1 + 1e-12).all() and ratio.mean() > 0.99
    assert (found.errors >= found.block_errors).all()


def test_oracle_is_far_worse_than_the_widest_gap_block():
    """The geometric rule (the central block with Chebyshev points) holds no regression point: the oracle's error is
    orders of magnitude larger at N = 64 (the issue measured 0-10% of the largest MSE)."""
    from torchgcc.stragglers import FixedStragglers

    n, s = 64, 4
    code = torchgcc.make_code("natural", num_inputs=8, num_workers=n)
    results, reference = _workload(code, samples=64)
    found = worst_stragglers(code.decoder, results, reference, s, searches=("block",))
    mask = FixedStragglers(s, "widest_gap").sample(len(results), n)
    gap = (code.decoder(results, mask) - reference).pow(2).flatten(1).mean(dim=1)
    assert (gap <= found.errors * (1 + 1e-12)).all()
    assert gap.mean() < 0.1 * found.errors.mean()


def test_block_masks_and_argument_checks():
    masks = block_masks(6, 2)
    assert masks.shape == (5, 6) and ((~masks).sum(dim=1) == 2).all()
    assert (~masks[3]).nonzero().flatten().tolist() == [3, 4]
    code = torchgcc.make_code("natural", num_inputs=4, num_workers=8)
    results, reference = _workload(code, samples=8)
    none = worst_stragglers(code.decoder, results, reference, 0)
    assert none.masks.all()
    torch.testing.assert_close(none.errors, (code.decoder(results, none.masks) - reference).pow(2).mean(dim=(1, 2)))
    with pytest.raises(ValueError, match="num_stragglers must be an integer in \\[0, N - min_arrived\\] = \\[0, 6\\]"):
        worst_stragglers(code.decoder, results, reference, 7)
    with pytest.raises(ValueError, match="searches"):
        worst_stragglers(code.decoder, results, reference, 2, searches=("tabu",))
    with pytest.raises(ValueError, match="radius"):
        worst_stragglers(code.decoder, results, reference, 2, radius=0)
