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


def test_spectral_order_of_repeated_samples_is_a_permutation_keeping_copies_together():
    """Two clusters of 8 copies each: the median kNN distance is 0 (it was a raw LinAlgError from eigh). Two cliques
    joined by a few edges: the Fiedler vector separates them, so each cluster is one contiguous half of the order."""
    features = torch.cat([torch.zeros(8, 2), torch.ones(8, 2)]).double()
    perm = manifold_order(features, order="spectral")
    assert sorted(perm.tolist()) == list(range(16))
    assert {int(i) // 8 for i in perm[:8]} in ({0}, {1})
    assert sorted(manifold_order(torch.zeros(8, 2), order="spectral").tolist()) == list(range(8))  # all copies
    model = torch.nn.Linear(2, 3).double()
    coded = torchgcc.CodedModule(model, torchgcc.GCC(4, 8, lambda_dec=0.0), grouping=ManifoldGrouping("spectral"))
    out = coded(features, mask=torch.ones(4, 8, dtype=torch.bool))
    torch.testing.assert_close(out, model(features))  # every worker arrived, lambda 0: the outputs themselves


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: manifold_order(torch.randn(6, 2), order="spectral", neighbours=0), ValueError, "neighbours"),
        (lambda: manifold_order(torch.randn(6, 2), order="spectral", neighbours=-3), ValueError, "neighbours"),
        (lambda: manifold_order(torch.randn(6, 2), order="spectral", neighbours=2.5), ValueError, "neighbours"),
        (lambda: ManifoldGrouping("spectral", neighbours="8"), TypeError, "neighbours"),
        (lambda: manifold_order(torch.randn(6, 2, dtype=torch.complex64)), TypeError, "features must hold real"),
        (lambda: manifold_order(torch.tensor([[0.0, 1], [float("nan"), 1], [2, 2]])), ValueError, "features must be"),
    ],
)
def test_manifold_order_refuses_bad_arguments_naming_them(call, error, message):
    with pytest.raises(error, match=message):
        call()
