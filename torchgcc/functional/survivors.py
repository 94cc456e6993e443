"""The survivors of each straggler mask, compacted to the front by a sort: static shapes, no host reads.

A decoder fits a function to the results of the workers that arrived. Batched over groups with different numbers of
survivors, every group's survivors are moved to the front of its row in ascending worker order by a stable sort of
the mask (not ``nonzero``, ``unique`` or ``tolist``, which read the mask on the host), and the rest of the row is
padding. Every tensor has the same shape ``(B, N)`` whatever the masks hold, so the computations on it are the same
launches for every batch, and capturable in a CUDA graph.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["Survivors", "compact_survivors"]

#: Padded knots are ``PAD_START + j`` at position ``j`` (beyond every worker point on [-1, 1]).
PAD_START = 2.0


class Survivors(NamedTuple):
    """The compacted survivors of ``B`` masks over ``N`` workers (position ``j`` of a row is its ``j``-th survivor).

    Attributes:
        order: ``(B, N)`` int64, the worker at each position: the survivors in ascending order, then the stragglers.
        counts: ``(B,)`` int64, the survivors ``n`` of each row.
        valid: ``(B, N)`` bool, ``j < n`` (the position holds a survivor).
        knots: ``(B, N)`` float64, the survivors' points at the valid positions and ``PAD_START + j`` at the others,
            so every row is strictly increasing and its padding lies beyond every point of [-1, 1].
    """

    order: torch.Tensor
    counts: torch.Tensor
    valid: torch.Tensor
    knots: torch.Tensor


def compact_survivors(mask: torch.Tensor, points: torch.Tensor) -> Survivors:
    """:class:`Survivors` of a ``(B, N)`` bool ``mask`` (True = arrived) over ascending ``points`` ``(N,)``."""
    order = torch.sort((~mask).to(torch.uint8), dim=-1, stable=True).indices
    counts = mask.sum(dim=-1)
    position = torch.arange(mask.shape[-1], device=mask.device)
    valid = position < counts.unsqueeze(-1)
    knots = torch.where(valid, points.to(torch.float64)[order], PAD_START + position.to(torch.float64))
    return Survivors(order, counts, valid, knots)
