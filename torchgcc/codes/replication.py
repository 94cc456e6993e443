"""Replication: every input of a group is computed by several workers, and estimated by the mean of its arrived copies.

The practitioner's baseline at equal N. Worker ``n`` computes input ``owner[n] = floor(n K / N)`` of its group:
the copies of an input sit on neighbouring workers, ``N / K`` of them when K divides N (the ``round_robin`` worker
layout of :mod:`torchgcc.distributed` spreads neighbours over different ranks). The decoder is linear and depends on
the mask only: input ``k``'s estimate is the mean of the results of its copies that arrived (all copies are the same
computation, so any one is exact up to rounding), and NaN when none arrived, never a silent zero.
"""

from __future__ import annotations

from typing import Any

import torch

from torchgcc.checks import check_mask
from torchgcc.codes.base import Code
from torchgcc.codes.maps import Decoder, Encoder
from torchgcc.functional.survivors import Survivors

__all__ = ["CopyMeanDecoder", "Replication", "copy_owners"]


def copy_owners(num_inputs: int, num_workers: int) -> torch.Tensor:
    """``(N,)`` int64: the input each of the ``N`` workers computes, ``floor(n K / N)`` (blocks of ``N / K``
    neighbouring workers when K divides N, else of ``floor`` or ``ceil`` of it)."""
    return torch.arange(num_workers) * num_inputs // num_workers


class CopyMeanDecoder(Decoder):
    """Each input's estimate is the mean of the arrived results of its copies: ``(B, N, *out) -> (B, K, *out)``.

    Args:
        owners: ``(N,)`` int64, the input each worker computes (:func:`copy_owners`).
        options: those of :class:`~torchgcc.codes.maps.Decoder`.

    An input none of whose copies arrived gets a NaN row of decode matrix, so its estimate is NaN (and
    :meth:`Replication.decodable` is False for its group); the other inputs of the group are decoded as usual.
    """

    owners: torch.Tensor
    #: ``(K, N)`` bool: worker ``n`` holds a copy of input ``k``.
    copies: torch.Tensor

    def __init__(self, alpha: torch.Tensor, beta: torch.Tensor, *, owners: torch.Tensor, **options: Any) -> None:
        super().__init__(alpha, beta, **options)
        self.register_buffer("owners", owners.to(torch.int64))
        self.register_buffer("copies", self.owners == torch.arange(self.num_inputs).unsqueeze(1))

    def fit_matrix(self, survivors: Survivors) -> torch.Tensor:
        # position j of a row holds slot survivors.order[j]; slots past N (none here: the layout is N wide) clamp
        owners = self.owners[survivors.order.clamp(max=self.num_workers - 1)]  # (B, W)
        inputs = torch.arange(self.num_inputs, device=owners.device).view(1, -1, 1)
        arrived_copies = (owners.unsqueeze(1) == inputs) & survivors.valid.unsqueeze(1)  # (B, K, W)
        weights = arrived_copies.to(torch.float64)
        return weights / weights.sum(dim=-1, keepdim=True)  # 0 / 0 = NaN: an input without an arrived copy


class Replication(Code):
    """Repetition encoder (worker ``n`` gets input ``floor(n K / N)`` of its group) and the mean of the arrived
    copies as decoder.

    Decodes a group fully once every input has an arrived copy (:meth:`decodable`); with at least one arrived
    result (``min_arrived = 1``) it decodes the covered inputs and gives NaN for the others. ``options`` are those
    of :class:`~torchgcc.codes.base.Code`; the points (``"equispaced"`` by default, defined for one worker too) only
    order the workers, the estimates do not depend on them.
    """

    decoder: CopyMeanDecoder

    def __init__(self, num_inputs: int, num_workers: int, **options: Any) -> None:
        options.setdefault("alpha", "equispaced")
        options.setdefault("beta", "equispaced")
        super().__init__(num_inputs, num_workers, **options)
        alpha, beta = self._points
        owners = copy_owners(num_inputs, num_workers)
        self.encoder = Encoder(torch.nn.functional.one_hot(owners, num_inputs).to(torch.float64))
        self.decoder = CopyMeanDecoder(alpha, beta, owners=owners, min_arrived=1, **self._decoder_options)

    def decodable(self, mask: torch.Tensor) -> torch.Tensor:
        """``(B,)`` bool: every input of the group has an arrived copy under the ``(B, N)`` bool ``mask`` (checked as
        :meth:`Code.decodable` checks it)."""
        mask = check_mask(mask, self.num_workers)
        copies = self.decoder.copies
        return (
            (mask.unsqueeze(1) & (copies if copies.device == mask.device else copies.to(mask.device))).any(-1).all(-1)
        )
