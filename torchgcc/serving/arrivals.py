"""Open-loop query arrivals: a seeded Poisson process.

Open loop means the arrival times do not depend on how fast the system answers (as with real users, unlike a
closed loop that sends the next query when the previous one returns), so a slow system builds a queue.
"""

from __future__ import annotations

import torch

from torchgcc.checks import check_integer, check_real, check_seed

__all__ = ["PoissonArrivals"]


class PoissonArrivals:
    """Queries arriving at ``rate`` per second with independent exponential gaps (a Poisson process).

    Args:
        rate: mean arrivals per second (finite, > 0).
        seed: seed of the generator (an integer); the same seed gives the same arrival times.
    """

    def __init__(self, rate: float, *, seed: int) -> None:
        self.rate = check_real("rate (queries per second)", rate, low=0, low_open=True)
        self.seed = check_seed("seed", seed)

    def times(self, num_queries: int) -> torch.Tensor:
        """``(num_queries,)`` float64 arrival times in seconds after the start, increasing; the first is one gap in.
        ``num_queries`` is an integer >= 1."""
        num_queries = check_integer("num_queries", num_queries, minimum=1)
        generator = torch.Generator().manual_seed(self.seed)
        uniform = torch.rand(num_queries, generator=generator, dtype=torch.float64)
        return (-torch.log1p(-uniform) / self.rate).cumsum(0)

    def __repr__(self) -> str:
        return f"PoissonArrivals(rate={self.rate}, seed={self.seed})"
