"""The shift attack and the oracle attack search, against a brute force written with numpy and scipy."""

import numpy as np
import pytest
import torch
from references import natural_spline_reference

import torchgcc
from torchgcc.attacks import ConcentratedAttack, ShiftAttack
from torchgcc.codes.robust import RobustGCC
from torchgcc.oracles.attacks import SHIFT_FRACTIONS, worst_attacks


def _xsinx(code):
    f = lambda t: t * torch.sin(t)  # noqa: E731
    n, k = code.num_workers, code.num_inputs
    return f(10 * code.beta).view(1, n, 1), f(10 * code.alpha).view(1, k, 1)


def test_shift_attack_moves_a_block_of_arrived_workers_and_clips():
    y = torch.arange(10, dtype=torch.float64).view(1, 10, 1).repeat(2, 1, 1)
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[1, 1] = False
    attack = ShiftAttack(3, 5.0, start=torch.tensor([2, 2]), bound=12.0)
    out = attack(y, mask)
    assert attack.last_corrupted[0].nonzero().flatten().tolist() == [2, 3, 4]
    assert attack.last_corrupted[1].nonzero().flatten().tolist() == [3, 4, 5]  # the 3rd to 5th ARRIVED workers
    assert out[0, 2:5, 0].tolist() == [7.0, 8.0, 9.0] and out[1, 3:6, 0].tolist() == [8.0, 9.0, 10.0]
    assert ShiftAttack(2, 9.0, start=7, bound=12.0)(y, mask)[0, 7:9, 0].tolist() == [12.0, 12.0]  # clipped at M
    per_group = ShiftAttack(1, torch.tensor([1.0, -1.0]), start=0)(y, mask)
    assert per_group[:, 0, 0].tolist() == [1.0, -1.0]
    centred = ShiftAttack(4, 1.0)
    centred(y, mask)
    concentrated = ConcentratedAttack(4, 1.0)
    concentrated(y, mask)
    assert torch.equal(centred.last_corrupted, concentrated.last_corrupted)
    with pytest.raises(ValueError, match="start must lie"):
        ShiftAttack(3, 1.0, start=8)(y, mask)


def _brute_force_shift(code, y, truth, q, bound, starts=None):
    """Every shift magnitude of SHIFT_FRACTIONS, both signs, every block position (or ``starts``): scipy's natural
    spline."""
    beta, alpha = code.beta.numpy(), code.alpha.numpy()
    decode = natural_spline_reference(beta, alpha, 0.0)  # no stragglers: the full matrix
    honest, exact = y[0, :, 0].numpy(), truth[0, :, 0].numpy()
    worst = 0.0
    for fraction in SHIFT_FRACTIONS:
        for delta in (bound * fraction, -bound * fraction):
            for start in range(len(beta) - q + 1) if starts is None else starts:
                attacked = honest.copy()
                attacked[start : start + q] = np.clip(attacked[start : start + q] + delta, -bound, bound)
                worst = max(worst, float(((decode @ attacked - exact) ** 2).mean()))
    return worst


def test_shift_search_equals_the_brute_force_over_every_magnitude_and_position():
    n, q, bound = 60, 5, 100.0
    code = torchgcc.make_code("natural", num_inputs=8, num_workers=n)
    y, truth = _xsinx(code)
    mask = torch.ones(1, n, dtype=torch.bool)
    brute = _brute_force_shift(code, y, truth, q, bound)
    every = worst_attacks(code.decoder, y, mask, truth, q=q, bound=bound, families=("shift",))  # all 56 positions
    assert every.errors.item() == pytest.approx(brute, rel=1e-9)
    assert every.attacks[0] == "shift delta=+100.0 start=3"
    spread = worst_attacks(code.decoder, y, mask, truth, q=q, bound=bound, families=("shift",), max_starts=8)
    grid = np.round(np.linspace(0, 1, 8) * (n - q)).astype(int)
    assert _brute_force_shift(code, y, truth, q, bound, grid) <= spread.errors.item() <= brute * (1 + 1e-9)


def test_huber_misses_moderate_shifts_that_the_search_finds():
    """Huber flags a block shifted by M but not one shifted by a few percent of M, and that one is its worst case:
    worse than the seed's smoothing decoder under its own worst attack (x sin x, N = 400, q = 20, M = 100)."""
    n, q = 400, 20
    huber, smoothing = RobustGCC(20, n, q=q, decoder="huber"), RobustGCC(20, n, q=q)
    y, truth = _xsinx(huber)
    mask = torch.ones(1, n, dtype=torch.bool)
    found = worst_attacks(huber.decoder, y, mask, truth, q=q, bound=100.0, families=("shift", "random"))
    assert found.shift_detected[0, 0] and not found.detected[0]  # delta = M is caught, the worst is not
    worst_size = found.shifts[found.shift_errors[0].argmax()]
    assert 1.0 < worst_size < 50.0
    assert found.family_errors["random"][0] < 1e-6 < found.errors[0]
    seed = worst_attacks(smoothing.decoder, y, mask, truth, q=q, bound=100.0, families=("shift", "random"))
    assert seed.detected is None and seed.errors[0] < found.errors[0]


def test_every_family_runs_and_the_worst_is_the_largest():
    n, q = 48, 3
    code = RobustGCC(8, n, q=q, decoder="trim")
    y, truth = _xsinx(code)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, 10:14] = False
    found = worst_attacks(code.decoder, y.repeat(2, 1, 1), mask, truth.repeat(2, 1, 1), q=q, bound=100.0, draws=2)
    assert set(found.family_errors) == {"shift", "signflip", "random", "random_pm", "constant", "greedy"}
    stacked = torch.stack(list(found.family_errors.values()))
    torch.testing.assert_close(found.errors, stacked.max(dim=0).values)
    assert found.shift_errors.shape == (2, len(SHIFT_FRACTIONS)) and found.detected.shape == (2,)
    with pytest.raises(ValueError, match="q must be an integer in \\[1, fewest arrived = 44\\]"):
        worst_attacks(code.decoder, y.repeat(2, 1, 1), mask, truth.repeat(2, 1, 1), q=45, bound=1.0)
    with pytest.raises(ValueError, match="families"):
        worst_attacks(code.decoder, y, mask[:1], truth, q=1, bound=1.0, families=("bribe",))


def test_agreement_under_the_worst_attack_and_the_lowest_over_every_attack():
    """Logits of three classes: the agreement at the worst-MSE attack is recomputed by hand from its description,
    and no attack tried agrees less than the reported minimum (here: the clean estimate agrees fully)."""
    n, k, q = 24, 4, 3
    code = torchgcc.make_code("natural", num_inputs=k, num_workers=n)
    t = code.beta.view(1, n, 1)
    logits = torch.cat([t, -t, 0.3 * t.cos()], dim=-1).repeat(2, 1, 1)  # (2, N, 3)
    reference = torch.cat(
        [code.alpha.view(1, k, 1), -code.alpha.view(1, k, 1), 0.3 * code.alpha.cos().view(1, k, 1)], -1
    )
    reference = reference.repeat(2, 1, 1)
    mask = torch.ones(2, n, dtype=torch.bool)
    found = worst_attacks(
        code.decoder, logits, mask, reference, q=q, bound=5.0, families=("shift",), classification=True
    )
    assert ((0 <= found.min_agreement) & (found.min_agreement <= found.agreement) & (found.agreement <= 1)).all()
    delta, start = found.attacks[0].removeprefix("shift delta=").split(" start=")
    attacked = ShiftAttack(q, float(delta), start=int(start), bound=5.0)(logits, mask)
    decoded = code.decoder(attacked, mask)
    by_hand = (decoded.argmax(-1) == reference.argmax(-1)).double().mean(dim=1)
    assert found.agreement[0] == pytest.approx(float(by_hand[0]))
    assert found.errors[0] == pytest.approx(float((decoded[0] - reference[0]).pow(2).mean()))
