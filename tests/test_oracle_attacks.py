"""The shift attack and the oracle attack search, against a brute force written with numpy and scipy."""

import numpy as np
import pytest
import torch
from references import natural_spline_reference

import torchgcc
from torchgcc.attacks import ConcentratedAttack, ShiftAttack, SignFlipAttack
from torchgcc.codes.robust import RobustGCC
from torchgcc.oracles.attacks import SHIFT_FRACTIONS, attack_errors, worst_attacks


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


def test_shift_attack_refuses_a_start_or_shift_that_does_not_fit_naming_it():
    y = torch.arange(10, dtype=torch.float64).view(1, 10, 1).repeat(2, 1, 1)
    mask = torch.ones(2, 10, dtype=torch.bool)
    cases = [
        (
            lambda: ShiftAttack(1, 0.5, start=torch.tensor([0, 1, 2])),
            ValueError,
            "^start has 3 entries, one per group, but the batch has 2 groups$",
        ),
        (
            lambda: ShiftAttack(1, torch.tensor([1.0, 2.0, 3.0]), start=0),
            ValueError,
            "^shift has 3 entries, one per group, but the batch has 2 groups$",
        ),
        (lambda: ShiftAttack(1, 0.5, start=1.7), ValueError, "^start must be an integer >= 0, got 1.7"),
        (
            lambda: ShiftAttack(1, 0.5, start=torch.tensor([1.7, 0.0])),
            TypeError,
            "^start must be a number or a \\(B,\\) integer tensor .*float32",
        ),
        (
            lambda: ShiftAttack(1, 0.5, start=torch.tensor([[0, 1]])),
            ValueError,
            "^start must be a number or a \\(B,\\) tensor .*\\(1, 2\\)",
        ),
        (
            lambda: ShiftAttack(1, 0.5, start=torch.tensor([0, -1])),
            ValueError,
            "^start must hold integers >= 0, got -1 in it",
        ),
        (lambda: ShiftAttack(1, "0.5"), TypeError, "^shift must be a finite number, got '0.5'"),
        (
            lambda: ShiftAttack(1, torch.tensor([float("nan"), 1.0])),
            ValueError,
            "^shift must hold finite numbers, got nan",
        ),
        (
            lambda: ShiftAttack(1, torch.tensor([1j, 1.0])),
            TypeError,
            "^shift must be a number or a \\(B,\\) real tensor",
        ),
    ]
    for make, error, message in cases:
        with pytest.raises(error, match=message):
            make()(y, mask)
    # numpy and 0-d integer starts are integers: the same block as start=2 (y + 0.5 at the 3rd arrived worker)
    for start in (np.int64(2), torch.tensor(2)):
        assert ShiftAttack(1, 0.5, start=start)(y, mask)[:, :, 0].tolist() == [[0, 1, 2.5, 3, 4, 5, 6, 7, 8, 9]] * 2


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


def _tanh_case():
    """GCC (K = 3, N = 10) on tanh of two groups, worker 2 straggling: ``(code, results, mask, reference)``."""
    code = torchgcc.GCC(3, 10, lambda_dec=1e-3)
    x = torch.randn(2, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[:, 2] = False
    return code, torch.tanh(code.encoder(x)), mask, torch.tanh(x)


def test_a_reference_or_mask_that_does_not_fit_is_refused_naming_it():
    """A reference of another K, B or output shape used to be broadcast against the estimates (group 1 scored against
    group 0's outputs without a batch dimension), a NaN one scored nothing: each is now an error naming ``reference``,
    in worst_attacks and attack_errors alike; a bad mask names ``mask``, an empty batch ``results``. The valid
    reference's signflip error is the one recomputed by hand from the decoder."""
    code, y, mask, reference = _tanh_case()
    found = worst_attacks(code.decoder, y, mask, reference, q=1, bound=1.0, families=("signflip",), draws=2)
    flips = [SignFlipAttack(1, seed=s) for s in range(2)]
    by_hand = torch.stack([(code.decoder(a(y, mask), mask) - reference).pow(2).mean(dim=(1, 2)) for a in flips])
    torch.testing.assert_close(found.errors, by_hand.max(dim=0).values, rtol=1e-12, atol=0)
    nan = reference.clone()
    nan[1, 2, 3] = float("nan")
    cases = [
        (reference[:, :1], ValueError),
        (reference[..., :1], ValueError),
        (reference[0], ValueError),
        (reference[:1], ValueError),
        (nan, ValueError),
        (reference.to(torch.int32), TypeError),
    ]
    for bad, error in cases:
        with pytest.raises(error, match="^reference must"):
            worst_attacks(code.decoder, y, mask, bad, q=1, bound=1.0, families=("signflip",))
        with pytest.raises(error, match="^reference must"):
            attack_errors(code.decoder, y, mask, bad, [SignFlipAttack(1, seed=0)])
    for bad, error in [(mask.long(), TypeError), (mask[:, :9], ValueError), (mask[:1], ValueError)]:
        with pytest.raises(error, match="^mask must"):
            worst_attacks(code.decoder, y, bad, reference, q=1, bound=1.0, families=("signflip",))
    with pytest.raises(ValueError, match="^results is an empty batch"):
        worst_attacks(code.decoder, y[:0], mask[:0], reference[:0], q=1, bound=1.0, families=("signflip",))


@pytest.mark.parametrize(
    "argument, value, error",
    [
        ("draws", 0, ValueError),
        ("shift_fractions", (), ValueError),
        ("shift_fractions", (0.5, float("nan")), ValueError),
        ("max_starts", 0, ValueError),
        ("seed", "1", TypeError),
    ],
)
def test_edge_arguments_of_the_search_are_named(argument, value, error):
    """They used to give raw torch errors (an empty max, an empty stack) or a search of NaN shifts."""
    code, y, mask, reference = _tanh_case()
    options = {"q": 1, "bound": 1.0, "families": ("shift", "signflip"), argument: value}
    with pytest.raises(error, match=f"^{argument}"):
        worst_attacks(code.decoder, y, mask, reference, **options)


def test_an_attack_on_a_group_that_cannot_be_decoded_is_reported_as_nan():
    """Replication with both copies of input 0 straggling: every estimate of input 0 is NaN (the decoder's answer,
    recomputed here), so every attack's error is NaN, the worst; the search used to skip NaN and report -inf and no
    attack."""
    code = torchgcc.make_code("replication", num_inputs=3, num_workers=6)
    x = torch.randn(2, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y, reference = torch.sin(code.encoder(x)), torch.sin(x)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[:, :2] = False
    assert torch.isnan(code.decoder(SignFlipAttack(1, seed=0)(y, mask), mask)[:, 0]).all()
    found = worst_attacks(code.decoder, y, mask, reference, q=1, bound=1.0, families=("signflip",), draws=2)
    assert torch.isnan(found.errors).all() and found.attacks == ["signflip draw 0"] * 2
