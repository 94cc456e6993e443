"""The straggler-aware controller on synthetic Pareto duration streams: its event rate and mean chosen size beside the
largest static size that meets the budget (the numbers docs/control.md quotes; ``tests/test_control.py`` asserts the
same behaviour).

Two streams of ``--steps`` steps: every unit's duration is Pareto(1, shape), i.i.d. (``(1 - u)^(-1/shape)``, one
seeded generator per stream); ``stationary`` keeps shape 3, ``drifting`` switches from 3 to 2 (a heavier tail)
halfway. A step is a straggler event when its largest duration exceeds the deadline. The controller
(:class:`torchgcc.control.StragglerAwareController`, sizes 2, 4, ..., 32, ``DeadlineThreshold(deadline)``) must keep
the long-run event rate at the budget. The best static size is the largest size whose closed-form event probability
``1 - (1 - deadline^-shape)^G``, averaged over the two halves, meets the budget. Writes JSON (settings, seeds, load
average, threads, wall time):

    python benchmarks/pareto_streams.py --out torchgcc-results/pareto_streams.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from torchgcc.control import DeadlineThreshold, StragglerAwareController
from torchgcc.testing.pareto_stream import pareto_stream  # the stream the controller's tests run

#: The controller's candidate group sizes.
GRID = tuple(range(2, 33, 2))

#: The streams: the tail shape of the first and of the second half.
STREAMS = {"stationary": (3.0, 3.0), "drifting": (3.0, 2.0)}


def event_probability(size: int, shape: float, deadline: float) -> float:
    """``P(max of size Pareto(1, shape) > deadline) = 1 - (1 - deadline^-shape)^size``."""
    return 1 - (1 - deadline**-shape) ** size


def run_stream(shapes: tuple[float, float], *, steps: int, budget: float, deadline: float, seed: int) -> dict:
    """One stream: the controller's event rate and chosen sizes, and the best static size in closed form."""
    controller = StragglerAwareController(GRID, budget=budget, threshold=DeadlineThreshold(deadline), seed=0)
    chosen = pareto_stream(controller, steps, lambda step: shapes[step >= steps // 2], seed=seed)
    feasible = [g for g in GRID if sum(event_probability(g, shape, deadline) for shape in shapes) / 2 <= budget]
    return {
        "shapes": list(shapes),
        "event_rate": controller.event_rate,
        "mean_size": sum(chosen) / steps,
        "mean_size_first_half": sum(chosen[: steps // 2]) / (steps // 2),
        "mean_size_second_half": sum(chosen[steps // 2 :]) / (steps - steps // 2),
        "best_static_size": max(feasible) if feasible else None,
        "grid_step": GRID[1] - GRID[0],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--budget", type=float, default=0.1)
    parser.add_argument("--deadline", type=float, default=6.0)
    parser.add_argument("--seed", type=int, default=1, help="seed of the duration streams")
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/pareto_streams.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start, load = time.perf_counter(), os.getloadavg()
    records = {
        name: run_stream(shapes, steps=args.steps, budget=args.budget, deadline=args.deadline, seed=args.seed)
        for name, shapes in STREAMS.items()
    }
    config = {**vars(args), "out": str(args.out), "grid": list(GRID), "controller_seed": 0}
    run = {"wall_s": time.perf_counter() - start, "load_average": list(load), "threads": torch.get_num_threads()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"config": config, "run": run, "streams": records}, indent=2) + "\n")
    for name, record in records.items():
        print(
            f"{name}: event rate {record['event_rate']:.3f} (budget {args.budget}), "
            f"mean size {record['mean_size']:.1f}, best static size {record['best_static_size']}"
        )


if __name__ == "__main__":
    main()
