"""Uncoded execution: each of the K inputs of a group on its own worker (N = K), decoded as the identity."""

from __future__ import annotations

from typing import Any, Optional

from torchgcc.codes.replication import Replication

__all__ = ["Uncoded"]


class Uncoded(Replication):
    """The baseline without redundancy: worker ``k`` computes input ``k`` of every group and its result is that
    input's estimate (replication with one copy). A group decodes only when every worker arrived (:meth:`decodable`);
    the estimate of an input whose worker did not arrive is NaN.

    Args:
        num_inputs: K, also the number of workers.
        num_workers: N, if given, must equal K.
        options: those of :class:`~torchgcc.codes.base.Code`.
    """

    def __init__(self, num_inputs: int, num_workers: Optional[int] = None, **options: Any) -> None:
        if num_workers is not None and num_workers != num_inputs:
            raise ValueError(
                f"uncoded runs each input on its own worker: num_workers must equal num_inputs (K={num_inputs}), "
                f"got num_workers={num_workers!r}; use replication for N > K"
            )
        super().__init__(num_inputs, num_inputs, **options)
