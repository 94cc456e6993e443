"""Noise models for worker results."""

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
