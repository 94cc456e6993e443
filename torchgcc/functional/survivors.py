"""The survivors of each straggler mask, compacted to the front by a sort: static shapes, no host reads.

A decoder fits a function to the results of the workers that arrived. Batched over groups with different numbers of
survivors, every group's survivors are moved to the front of its row in ascending order by one sort (not
``nonzero``, ``unique`` or ``tolist``, which read the mask on the host), and the rest of the row is padding. The sort
key of a worker is its point if it arrived and its point shifted beyond ``PAD_START`` if not, so the sorted keys are
at once the compacted knots (survivors' points, then padding knots beyond every point of [-1, 1], strictly
increasing) and the sort's indices the permutation back to worker order. Every tensor has the same shape whatever
the masks hold, so the computations on it are the same launches for every batch, and capturable in a CUDA graph.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

__all__ = ["PAD_START", "SurvivorLayout", "Survivors", "compact_survivors", "survivor_layout"]

#: Padding knots are ``>= PAD_START`` (worker points lie on [-1, 1]): a straggler at point ``t`` sorts as
#: ``t + 2 PAD_START``, a slot beyond the ``N`` workers (a layout wider than ``N``) as ``3 PAD_START + 1 + j``.
PAD_START = 2.0


class SurvivorLayout(NamedTuple):
    """The sort keys of ``N`` workers in rows of ``W >= N`` slots (slots past ``N`` are never survivors).

    Attributes:
        arrived_keys: ``(W,)`` float64, the key of each slot if its worker arrived (its point);
        straggler_keys: ``(W,)`` float64, if it did not.
        extend: ``(W,)`` int64, the worker whose mask entry each slot reads (``min(j, N - 1)``: the slots past ``N``
            have equal keys in both rows, so what they read does not matter).
    """

    arrived_keys: torch.Tensor
    straggler_keys: torch.Tensor
    extend: torch.Tensor

    @property
    def width(self) -> int:
        return self.extend.shape[-1]


def survivor_layout(points: torch.Tensor, width: Optional[int] = None) -> SurvivorLayout:
    """The :class:`SurvivorLayout` of ascending worker ``points`` ``(N,)`` on [-1, 1] in rows of ``width >= N``
    slots (default ``N``)."""
    n = points.shape[-1]
    width = n if width is None else width
    if points.ndim != 1 or width < n:
        raise ValueError(f"need points of shape (N,) and width >= N, got {tuple(points.shape)} and width={width}")
    points = points.detach().to(torch.float64)
    beyond = 3 * PAD_START + 1 + torch.arange(width - n, dtype=torch.float64, device=points.device)
    extend = torch.arange(width, device=points.device).clamp(max=n - 1)
    return SurvivorLayout(torch.cat([points, beyond]), torch.cat([points + 2 * PAD_START, beyond]), extend)


class Survivors(NamedTuple):
    """The compacted survivors of ``B`` masks over ``N`` workers in rows of ``W`` slots (position ``j`` of a row is its
    ``j``-th survivor).

    Attributes:
        order: ``(B, W)`` int64, the slot at each position: the survivors in ascending order, then the stragglers,
            then the slots past ``N`` (a permutation of ``0 .. W - 1``).
        counts: ``(B,)`` int64, the survivors ``n`` of each row.
        valid: ``(B, W)`` bool, ``j < n`` (the position holds a survivor).
        knots: ``(B, W)`` float64, the survivors' points at the valid positions and knots ``>= PAD_START`` at the
            others: every row is strictly increasing and its padding lies beyond every point of [-1, 1].
    """

    order: torch.Tensor
    counts: torch.Tensor
    valid: torch.Tensor
    knots: torch.Tensor


def compact_survivors(mask: torch.Tensor, layout: SurvivorLayout) -> Survivors:
    """:class:`Survivors` of a ``(B, N)`` bool ``mask`` (True = arrived) in the rows of ``layout``: one sort."""
    arrived = mask.gather(1, layout.extend.expand(mask.shape[0], -1))
    knots, order = torch.where(arrived, layout.arrived_keys, layout.straggler_keys).sort(dim=-1)
    return Survivors(order, mask.sum(dim=-1), knots < PAD_START, knots)
