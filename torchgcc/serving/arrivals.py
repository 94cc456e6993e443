"""Open-loop query arrivals: a seeded Poisson process.

Open loop means the arrival times do not depend on how fast the system answers (as with real users, unlike a
closed loop that sends the next query when the previous one returns), so a slow system builds a queue.
"""

from __future__ import annotations

import torch

__all__ = ["PoissonArrivals"]


class PoissonArrivals:
    """Queries arriving at ``rate`` per second with independent exponential gaps (a Poisson process).

    Args:
        rate: mean arrivals per second (> 0).
        seed: seed of the generator; the same seed gives the same arrival times.
    """

    def __init__(self, rate: float, *, seed: int) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be a positive number of queries per second, got {rate!r}")
        self.rate = float(rate)
        self.seed = seed

    def times(self, num_queries: int) -> torch.Tensor:
        """``(num_queries,)`` float64 arrival times in seconds after the start, increasing; the first is one gap in."""
        if num_queries < 1:
            raise ValueError(f"num_queries must be at least 1, got {num_queries}")
        generator = torch.Generator().manual_seed(self.seed)
        uniform = torch.rand(num_queries, generator=generator, dtype=torch.float64)
        return (-torch.log1p(-uniform) / self.rate).cumsum(0)

    def __repr__(self) -> str:
        return f"PoissonArrivals(rate={self.rate}, seed={self.seed})"
