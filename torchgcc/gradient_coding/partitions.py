"""The k data partitions of a training set, each with its own seeded stream of mini-batches.

Partition ``j`` is the shard ``perm[j::k]`` of a seeded permutation of the training set (trimmed to equal sizes).
At step ``t`` it yields the ``t``-th mini-batch of ``batch_size`` samples of its shard, reshuffled every epoch of
the shard with a generator seeded by ``(seed, j, epoch)``. Every scheme, runtime and process that builds this
object from the same tensors and seed sees the same mini-batch for ``(partition, step)``.
"""

from __future__ import annotations

import torch

__all__ = ["PartitionedData"]


class PartitionedData:
    """``k = num_partitions`` shards of ``(x, y)``; :meth:`batch` gives partition ``j``'s mini-batch at step ``t``.

    Args:
        x: ``(M, *feat)`` inputs.
        y: ``(M,)`` targets.
        num_partitions: k.
        batch_size: samples per partition per step (the full step's batch is ``k * batch_size``).
        seed: seed of the shard assignment and of the per-epoch shuffles.
    """

    def __init__(
        self, x: torch.Tensor, y: torch.Tensor, *, num_partitions: int, batch_size: int, seed: int = 0
    ) -> None:
        if len(x) != len(y):
            raise ValueError(f"x and y must have the same length, got {len(x)} and {len(y)}")
        if num_partitions < 1 or batch_size < 1:
            raise ValueError(f"num_partitions and batch_size must be >= 1, got {num_partitions}, {batch_size}")
        shard = len(y) // num_partitions
        if shard < batch_size:
            raise ValueError(
                f"each of the {num_partitions} partitions has {shard} samples, fewer than "
                f"batch_size={batch_size}; lower batch_size or num_partitions"
            )
        perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
        self.shards = [perm[j::num_partitions][:shard] for j in range(num_partitions)]
        self.x, self.y = x, y
        self.num_partitions, self.batch_size, self.seed = num_partitions, batch_size, seed
        self.batches_per_epoch = shard // batch_size
        self._orders: dict[tuple[int, int], torch.Tensor] = {}

    def _order(self, partition: int, epoch: int) -> torch.Tensor:
        key = (partition, epoch)
        if key not in self._orders:
            if len(self._orders) > 8 * self.num_partitions:
                self._orders.clear()
            generator = torch.Generator().manual_seed((self.seed * 1_000_003 + partition) * 1_000_033 + epoch)
            self._orders[key] = self.shards[partition][torch.randperm(len(self.shards[partition]), generator=generator)]
        return self._orders[key]

    def batch(self, partition: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)`` of partition ``partition`` at step ``step``: ``(batch_size, *feat)`` and ``(batch_size,)``."""
        if not 0 <= partition < self.num_partitions or step < 0:
            raise ValueError(f"need 0 <= partition < {self.num_partitions} and step >= 0, got {partition}, {step}")
        epoch, index = divmod(step, self.batches_per_epoch)
        rows = self._order(partition, epoch)[index * self.batch_size : (index + 1) * self.batch_size]
        return self.x[rows], self.y[rows]
