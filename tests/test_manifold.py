"""Manifold-aware grouping."""

import pytest
import torch

import torchgcc
from torchgcc.manifold import ManifoldGrouping, manifold_order


@pytest.mark.parametrize("order", ["greedy", "spectral"])
def test_order_follows_a_curve(order):
    t = torch.linspace(0, 3, 60, dtype=torch.float64)
    curve = torch.stack([t.cos() * (1 + t), t.sin() * (1 + t), 0.1 * t], dim=1)
    shuffle = torch.randperm(60, generator=torch.Generator().manual_seed(0))
    perm = manifold_order(curve[shuffle], order=order)
    assert sorted(perm.tolist()) == list(range(60))
    recovered = shuffle[perm]
    steps = (recovered.diff().abs() == 1).float().mean().item()
    assert steps > 0.9  # consecutive samples along the path are neighbours on the curve
    with pytest.raises(ValueError, match="order"):
        manifold_order(curve, order="tsp")


def test_coded_module_grouping_returns_callers_order():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()
    x = torch.randn(20, 5, dtype=torch.float64)
    grouping = ManifoldGrouping("greedy")
    perm = grouping(x)
    mask = torch.ones(3, 16, dtype=torch.bool)
    mask[:, 3] = False
    code = torchgcc.GCC(8, 16)
    with torch.no_grad():
        grouped = torchgcc.CodedModule(model, code, grouping=grouping)(x, mask)
        manual = torchgcc.CodedModule(model, code)(x[perm], mask)
    assert torch.allclose(grouped[perm], manual)
