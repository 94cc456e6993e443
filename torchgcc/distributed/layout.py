"""Worker layout: which worker rank (1 .. P-1) hosts which of the N coded workers (rank 0 is the coordinator).

(Not to be confused with straggler *placement* in :mod:`torchgcc.stragglers`, which decides which workers straggle.)
"""

from __future__ import annotations

from typing import Callable

__all__ = ["LAYOUTS", "layout_workers"]


def _round_robin(num_workers: int, num_ranks: int) -> list[list[int]]:
    return [list(range(r, num_workers, num_ranks)) for r in range(num_ranks)]


def _contiguous(num_workers: int, num_ranks: int) -> list[list[int]]:
    base, extra = divmod(num_workers, num_ranks)
    sizes = [base + (r < extra) for r in range(num_ranks)]
    starts = [sum(sizes[:r]) for r in range(num_ranks)]
    return [list(range(start, start + size)) for start, size in zip(starts, sizes)]


#: name -> function(num_workers, num_worker_ranks) -> worker indices per worker rank.
LAYOUTS: dict[str, Callable[[int, int], list[list[int]]]] = {
    "round_robin": _round_robin,
    "contiguous": _contiguous,
}


def layout_workers(*, num_workers: int, world_size: int, layout: str = "round_robin") -> dict[int, list[int]]:
    """Map each worker rank (1 .. world_size-1) to the coded workers it hosts.

    ``round_robin`` spreads neighbouring workers (close points beta_n) over different ranks, so a slow or dead rank
    removes scattered points rather than a contiguous block, the worst case for spline decoders (GCC.md section 4).
    ``contiguous`` gives each rank a block of neighbouring workers.

    Returns:
        ``{rank: [worker indices]}``; every worker appears exactly once, every rank hosts at least one worker.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose from {sorted(LAYOUTS)}")
    num_ranks = world_size - 1
    if num_ranks < 1:
        raise ValueError(f"need at least 2 processes (1 coordinator + workers), got world_size={world_size}")
    if num_workers < num_ranks:
        raise ValueError(
            f"{num_ranks} worker ranks but only num_workers={num_workers} coded workers: some ranks would idle; "
            f"launch at most {num_workers + 1} processes"
        )
    blocks = LAYOUTS[layout](num_workers, num_ranks)
    return {rank + 1: block for rank, block in enumerate(blocks)}
