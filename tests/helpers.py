"""Helpers shared by the tests: seeded masks, Berrut points on worker nodes, and the CUDA skip marker."""

import pytest
import torch

import torchgcc

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def random_masks(num_groups: int, num_workers: int, num_stragglers: int, seed: int = 0) -> torch.Tensor:
    """``(B, N)`` masks with exactly ``num_stragglers`` False entries per row, from a seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.rand(num_groups, num_workers, generator=generator).argsort(dim=1)
    return order >= num_stragglers


def masks_with_every_straggler_count(num_workers: int, max_stragglers: int, seed: int = 0) -> torch.Tensor:
    """One random mask per straggler count 0..max_stragglers, ``(max_stragglers + 1, N)``."""
    return torch.cat([random_masks(1, num_workers, s, seed=seed + s) for s in range(max_stragglers + 1)])


def berrut_points_on_nodes(num_workers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(beta, alpha)``: Chebyshev worker points and three regression points, two of them on worker nodes (where
    Berrut's interpolant is the node's value, not the formula's 0 / 0)."""
    beta = torchgcc.points.resolve_points("chebyshev2", num_workers, name="beta")
    alpha = torch.stack([beta[1], torch.tensor(0.123, dtype=torch.float64), beta[6]])
    return beta, alpha
