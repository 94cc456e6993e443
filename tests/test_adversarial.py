"""Attacks, the weighted smoothing spline, and the robust decoders."""

import numpy as np
import pytest
import torch
from scipy.interpolate import make_smoothing_spline

import torchgcc
from torchgcc.attacks import ConcentratedAttack, ConstantAttack, GreedyAttack, RandomAttack, SignFlipAttack
from torchgcc.codes.robust import RobustGCC, adversarial_lambda
from torchgcc.functional.weighted_spline import huber_weights, weighted_smoothing_spline
from torchgcc.stragglers import FixedStragglers


def _setup(groups=6, n=32, d=3, s=4):
    y = torch.randn(groups, n, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mask = FixedStragglers(s, seed=1).sample(groups, n)
    return y, mask


def test_random_attack_corrupts_q_arrived_workers_with_bound():
    y, mask = _setup()
    attack = RandomAttack(3, 7.0, seed=0)
    out = attack(y, mask)
    corrupted = attack.last_corrupted
    assert (corrupted.sum(dim=1) == 3).all() and not (corrupted & ~mask).any()
    assert torch.equal(out[corrupted], torch.full_like(out[corrupted], 7.0))
    assert torch.equal(out[~corrupted], y[~corrupted])
    signed = RandomAttack(3, 7.0, random_sign=True, seed=0)(y, mask)
    assert set(signed[corrupted].abs().unique().tolist()) == {7.0}


def test_concentrated_attack_is_a_middle_block_of_arrived_workers():
    y, mask = _setup()
    attack = ConcentratedAttack(5, 2.0)
    attack(y, mask)
    for row, arrived in zip(attack.last_corrupted, mask):
        order = arrived.nonzero().squeeze(1)
        hit = row[order].nonzero().squeeze(1)
        assert len(hit) == 5 and (hit.diff() == 1).all()
        assert abs((hit[0] + hit[-1]) / 2 - (len(order) - 1) / 2) <= 0.5


def test_greedy_signflip_constant_and_composition():
    y, mask = _setup()
    greedy = GreedyAttack(2, 1.5)
    out = greedy(y, mask)
    assert (greedy.last_corrupted.sum(1) == 2).all() and out[greedy.last_corrupted].abs().max() <= 1.5
    flip = SignFlipAttack(2, seed=0)
    assert torch.equal(flip(y, mask)[flip.last_corrupted], -y[flip.last_corrupted])
    fixed = ConstantAttack(value=3.0, workers=[0, 5])
    out = fixed(y, mask)
    assert torch.equal(fixed.last_corrupted, mask & (torch.arange(32) == 0) | mask & (torch.arange(32) == 5))
    both = RandomAttack(1, 9.0, seed=0) + fixed
    both(y, mask)
    assert (both.last_corrupted.sum(1) >= fixed.last_corrupted.sum(1)).all()
    with pytest.raises(ValueError, match="q must"):
        RandomAttack(-1, 1.0)
    with pytest.raises(ValueError, match="bound"):
        RandomAttack(1, 0.0)


def test_weighted_spline_matches_scipy():
    rng = np.random.default_rng(3)
    n = 25
    t = np.sort(rng.uniform(-1, 1, n))
    y = rng.normal(size=(n, 2))
    w = rng.uniform(0.05, 1, n)
    points = np.linspace(t[0], t[-1], 11)
    reference = make_smoothing_spline(t, y, w=w, lam=n * 1e-3)
    fitted, values = weighted_smoothing_spline(
        torch.tensor(t)[None], torch.tensor(y)[None], torch.tensor(w)[None], torch.tensor(points), 1e-3
    )
    np.testing.assert_allclose(values[0].numpy(), reference(points), atol=1e-8)
    np.testing.assert_allclose(fitted[0].numpy(), reference(t), atol=1e-8)


def test_huber_weights():
    norms = torch.tensor([[1.0, 1.0, 1.0, 100.0]], dtype=torch.float64)
    w = huber_weights(norms)
    assert torch.allclose(w[0, :3], torch.ones(3, dtype=torch.float64))
    assert w[0, 3] == pytest.approx(1.345 * 1.4826 / 100)


def _xsinx(n, k=20):
    code = torchgcc.make_code("natural", num_inputs=k, num_workers=n)
    x = 10 * code.alpha
    f = lambda t: t * torch.sin(t)  # noqa: E731
    return f(10 * code.beta).view(1, n, 1), f(x).view(1, k, 1)


@pytest.mark.parametrize("method", ["huber", "trim"])
def test_robust_equals_plain_without_adversaries(method):
    y, mask = _setup()
    robust = RobustGCC(8, 32, q=0, decoder=method)
    plain = RobustGCC(8, 32, q=0, decoder="smoothing")
    a, b = robust.decoder(y, mask), plain.decoder(y, mask)
    assert torch.allclose(a, b, rtol=1e-6, atol=0)
    assert not robust.decoder.last_flagged.any()


@pytest.mark.parametrize("method", ["huber", "trim"])
def test_robust_decoder_beats_plain_and_detects(method):
    n, q = 400, 20
    y, truth = _xsinx(n)
    mask = torch.ones(1, n, dtype=torch.bool)
    for attack in (ConcentratedAttack(q, 100.0), RandomAttack(q, 100.0, seed=0)):
        attacked = attack(y, mask)
        natural = torchgcc.make_code("natural", num_inputs=20, num_workers=n).decoder(attacked, mask)
        code = RobustGCC(20, n, q=q, decoder=method)
        robust = code.decoder(attacked, mask)
        error = lambda e: (e - truth).pow(2).mean().item()  # noqa: E731
        assert error(robust) * 5 < error(natural)
        assert torch.equal(code.decoder.last_flagged, attack.last_corrupted)


def test_adversarial_lambda_and_coded_module_attack():
    assert adversarial_lambda(0, 10) == 0 and adversarial_lambda(4, 100) == pytest.approx(0.1 * 0.04**1.6)
    model = torch.nn.Linear(4, 3).double()
    x = torch.randn(16, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    attack = RandomAttack(2, 50.0, random_sign=True, seed=0)
    plain = torchgcc.CodedModule(model, torchgcc.GCC(8, 32), attack=attack)
    robust = torchgcc.CodedModule(
        model, RobustGCC(8, 32, q=2, decoder="trim"), attack=RandomAttack(2, 50.0, random_sign=True, seed=0)
    )
    with torch.no_grad():
        reference = model(x)
        assert (robust(x) - reference).abs().max() < 0.05 and (plain(x) - reference).abs().max() > 1.0


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: RandomAttack(1, 1.0, seed="1"), TypeError, "^seed must be an integer in .*, got '1'"),
        (
            lambda: SignFlipAttack(1, seed=2**70),
            ValueError,
            "^seed must be an integer in .*, got 1180591620717411303424",
        ),
        (lambda: ConcentratedAttack(1, 1.0, seed=1.5), ValueError, "^seed must be an integer in .*, got 1.5"),
        (lambda: RandomAttack("1", 1.0), TypeError, "^q must be an integer >= 0, got '1'"),
        (lambda: RandomAttack(1, "2"), TypeError, "^bound \\(M\\) must be a positive finite number, got '2'"),
        (lambda: ConstantAttack(value="3"), TypeError, "^value must be a finite number, got '3'"),
        (lambda: ConstantAttack(value=float("nan")), ValueError, "^value must be a finite number, got nan"),
        (lambda: ConstantAttack(workers=[0, 1.7]), ValueError, "^workers\\[1\\] must be an integer >= 0, got 1.7"),
        (lambda: ConstantAttack(workers=[-1]), ValueError, "^workers\\[0\\] must be an integer >= 0, got -1"),
        (lambda: ConstantAttack(workers=[2, 2]), ValueError, "^workers must be distinct ranks, got \\(2, 2\\)"),
        (lambda: ConstantAttack(workers=3), TypeError, "^workers must be a sequence of worker ranks, got int"),
        (lambda: GreedyAttack(1, 1.0, lam=-1e-4), ValueError, "^lam must be a finite number >= 0, got -0.0001"),
        (lambda: GreedyAttack(1, 1.0, lam="1e-4"), TypeError, "^lam must be a finite number >= 0, got '1e-4'"),
    ],
)
def test_attack_arguments_given_otherwise_are_named(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_attack_takes_numpy_integers_as_q():
    y, mask = _setup()
    attack = RandomAttack(np.int64(3), 7.0, seed=0)
    assert type(attack.q) is int and torch.equal(attack(y, mask), RandomAttack(3, 7.0, seed=0)(y, mask))
    assert attack.last_corrupted.sum(dim=1).tolist() == [3] * len(mask)
