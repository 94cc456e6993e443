import pytest
import torch

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def random_masks(num_groups: int, num_workers: int, num_stragglers: int, seed: int = 0) -> torch.Tensor:
    """``(B, N)`` masks with exactly ``num_stragglers`` False entries per row, from a seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.rand(num_groups, num_workers, generator=generator).argsort(dim=1)
    return order >= num_stragglers
