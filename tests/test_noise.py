"""Noise models for worker results."""

import numpy as np
import pytest
import torch

import torchgcc
from torchgcc.noise import GaussianNoise, LowPrecisionWorkers


def test_gaussian_noise_is_relative_and_seeded():
    y = torch.full((4, 500, 20), 3.0, dtype=torch.float64)
    y[1] *= 10
    mask = torch.ones(4, 500, dtype=torch.bool)
    noisy = GaussianNoise(0.01, seed=0)(y, mask)
    spread = (noisy - y).std(dim=(1, 2))
    assert spread[0].item() == pytest.approx(0.03, rel=0.05) and spread[1].item() == pytest.approx(0.3, rel=0.05)
    assert torch.equal(noisy, GaussianNoise(0.01, seed=0)(y, mask))
    absolute = GaussianNoise(0.5, relative=False, seed=1)(y, mask)
    assert (absolute - y).std().item() == pytest.approx(0.5, rel=0.05)
    with pytest.raises(ValueError, match="sigma"):
        GaussianNoise(-1.0)


def test_relative_scale_is_the_rms_of_the_arrived_workers_only():
    y = torch.randn(3, 6, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[0, 2] = mask[1, [0, 5]] = False
    garbage = y.clone()
    garbage[0, 2], garbage[1, 0], garbage[1, 5] = 1e6, float("nan"), float("inf")
    noisy = GaussianNoise(0.1, seed=3)(garbage, mask)
    # reference: numpy float64 RMS over each group's arrived workers, times the same seeded standard normal draw
    z = torch.randn(y.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64).numpy()
    rms = [np.sqrt(np.mean(y.numpy()[b][mask[b].numpy()] ** 2)) for b in range(3)]
    expected = y.numpy() + 0.1 * np.array(rms).reshape(3, 1, 1) * z
    np.testing.assert_allclose(noisy[mask].numpy(), expected[mask.numpy()], rtol=1e-13)
    assert torch.equal(noisy[mask], GaussianNoise(0.1, seed=3)(y, mask)[mask])  # straggler values change nothing
    np.testing.assert_allclose(  # no mask: every worker arrived
        GaussianNoise(0.1, seed=3)(y).numpy(),
        y.numpy() + 0.1 * np.sqrt((y.numpy() ** 2).mean((1, 2)))[:, None, None] * z,
    )


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: GaussianNoise(0.5, seed="1"), TypeError, "^seed must be an integer in .*, got '1'"),
        (lambda: GaussianNoise(0.5, seed=1.5), ValueError, "^seed must be an integer in .*, got 1.5"),
        (
            lambda: GaussianNoise(0.5, seed=2**70),
            ValueError,
            "^seed must be an integer in .*, got 1180591620717411303424",
        ),
        (lambda: GaussianNoise("0.5"), TypeError, "^sigma must be a finite number >= 0, got '0.5'"),
        (lambda: GaussianNoise(0.5)(torch.ones(2, 3, 1), torch.ones(2, 4, dtype=torch.bool)), ValueError, "^mask must"),
    ],
)
def test_bad_arguments_are_named(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_low_precision_workers():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    x = torch.randn(32, 8)
    low = LowPrecisionWorkers(model, torch.bfloat16)
    out = low(x)
    assert out.dtype == torch.float32 and next(model.parameters()).dtype == torch.float32
    error = (out - model(x)).abs().max().item()
    assert 0 < error < 0.05  # bf16 has 8 bits of mantissa: errors near 1e-2 of O(1) outputs
    coded = torchgcc.CodedModule(low, torchgcc.GCC(8, 16), noise=GaussianNoise(0.0, seed=0))
    assert coded(x).shape == (32, 4)
