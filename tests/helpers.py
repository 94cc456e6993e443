"""Helpers shared by the tests: seeded masks, Berrut points on worker nodes, the CUDA skip marker, the ops and host
reads of a call (torch.profiler) and the warnings it raises."""

import warnings
from typing import Any, Callable

import pytest
import torch
from torch.profiler import profile

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


#: Ops that read device memory back to the host (``item``, ``bool()`` and ``float()`` all end in
#: ``_local_scalar_dense``).
READS = {
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::unique",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_dim",
    "aten::unique_consecutive",
}


def profiled(fn):
    """``(aten ops, reads)`` recorded while ``fn()`` runs (after one call to warm up), on one thread: with more, a
    CPU reduction over a large tensor splits into per-thread partial sums (a few more aten ops at B = 512 than at
    B = 8), torch's implementation on CPU and not a launch of the plan (one kernel on CUDA)."""
    fn()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with profile() as recorded:
            fn()
    finally:
        torch.set_num_threads(threads)
    names = [event.name for event in recorded.events() if event.name.startswith("aten::")]
    return len(names), sum(name in READS for name in names)


def caught_warnings(call: Callable[[], Any], category: type[Warning] = Warning) -> tuple[Any, list]:
    """``(call(), caught)``: the call's value and the warnings of ``category`` it raised, every one of them (the
    filters that show a message once are off while it runs)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = call()
    return value, [w for w in caught if issubclass(w.category, category)]
