"""``python -m torchgcc.rl``: the command line of one synchronous GRPO run, with a static group size or SAGC-style
adaptive sizing.

    python -m torchgcc.rl --group-size 8 --steps 200            # static G = 8
    python -m torchgcc.rl --sagc 4,6,8,12,16 --budget 0.3       # G chosen per step by the controller

Prints the reward every 20 steps and a summary (event rate, wall-clock, chosen G); ``--out`` writes the per-step
records and the controller's state as JSON. Plain PyTorch, no Lightning: the loop is
:func:`torchgcc.rl.loop.train_grpo`.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from pathlib import Path

import torch

from torchgcc.control.group_size import GroupSizeHook, group_size_controller
from torchgcc.rl.loop import GRPOConfig, train_grpo

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torchgcc.rl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sizing = parser.add_mutually_exclusive_group(required=True)
    sizing.add_argument("--group-size", type=int, help="static group size G")
    sizing.add_argument("--sagc", metavar="G1,G2,...", help="candidate group sizes for the adaptive controller")
    parser.add_argument("--budget", type=float, default=0.3, help="allowed straggler-event rate (default 0.3)")
    parser.add_argument(
        "--kappa",
        type=float,
        default=40.0,
        help="a rollout straggles past kappa x the step's median rollout time (default 40)",
    )
    parser.add_argument("--steps", type=int, default=GRPOConfig.steps)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write records and controller state to this JSON file")
    args = parser.parse_args(argv)
    try:
        sizes = (args.group_size,) if args.group_size is not None else tuple(int(g) for g in args.sagc.split(","))
    except ValueError:
        parser.error(f"--sagc takes comma-separated integers, got {args.sagc!r}")
    if min(sizes) < 1 or len(set(sizes)) != len(sizes):
        parser.error(f"group sizes must be distinct and at least 1, got {list(sizes)}")
    if not 0 < args.budget < 1 or not args.kappa > 1 or args.steps < 1:
        parser.error("--budget must lie in (0, 1), --kappa be above 1 and --steps be at least 1")
    torch.set_num_threads(1)
    config = replace(GRPOConfig(), steps=args.steps, seed=args.seed)
    hook = GroupSizeHook(
        group_size_controller(
            sizes,
            prompts_per_step=config.prompts_per_step,
            budget=args.budget,
            kappa=args.kappa,
            hold=5,
            seed=args.seed,
        )
    )
    records = train_grpo(config, hook)
    for start in range(0, len(records), 20):
        window = records[start : start + 20]
        reward = sum(r["reward"] for r in window) / len(window)
        print(
            f"steps {start:4d}-{start + len(window) - 1:4d}: reward {reward:.3f}"
            f"  mean G {sum(r['G'] for r in window) / len(window):.1f}  clock {window[-1]['clock']:.0f} s"
        )
    controller = hook.controller
    print(
        f"straggler-event rate {controller.event_rate:.3f} (budget {args.budget}), wall-clock "
        f"{records[-1]['clock']:.0f} s, chosen G {controller.size_distribution()}"
    )
    if args.out is not None:
        state = controller.state_dict()
        state["generator"] = state["generator"].tolist()
        args.out.write_text(json.dumps({"config": asdict(config), "records": records, "controller": state}, indent=1))
        print(f"wrote {args.out}")
    return 0
