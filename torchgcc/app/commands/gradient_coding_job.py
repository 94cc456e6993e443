"""``torchrun --nproc-per-node P -m torchgcc.gradient_coding.runtime [options]``: the gradient-coding job's command
line.

Every rank parses the same options and builds the same
:class:`~torchgcc.gradient_coding.distributed_training.TrainingJob` (code, data, model, delays) BEFORE joining the
job, so a bad option ends every rank with status 2 and one line on rank 0's stderr, without a rendezvous. Rank 0
prints one JSON line per step and a summary; ``--save`` writes the final flat parameters and the arrived sets with
``torch.save``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional

import torch

from torchgcc.app.cli import Parser
from torchgcc.app.data import list_datasets, load_dataset
from torchgcc.app.models import build_model, list_models
from torchgcc.gradient_coding.catalog import list_gradient_codes, make_gradient_code
from torchgcc.gradient_coding.clock import DelaySchedule
from torchgcc.gradient_coding.distributed_training import TrainingJob, run
from torchgcc.gradient_coding.partitions import PartitionedData
from torchgcc.stragglers import Exponential, LatencyModel, PersistentSlow

__all__ = ["build_job", "main", "parser"]

PROG = "torchrun --nproc-per-node P -m torchgcc.gradient_coding.runtime"

#: exit status for a bad option.
EXIT_USAGE = 2


def parser() -> argparse.ArgumentParser:
    """The job's options."""
    options = Parser(prog=PROG, description="Gradient-coded training across torchrun ranks.", allow_abbrev=False)
    options.add_argument("--scheme", choices=list_gradient_codes(), default="gc-fr")
    options.add_argument("-s", type=int, default=1, help="stragglers tolerated (default 1)")
    options.add_argument("--steps", type=int, default=10)
    options.add_argument("--model", choices=list_models(), default="mlp", help="default mlp")
    options.add_argument("--data", choices=list_datasets(), default="digits")
    options.add_argument("--batch-size", type=int, default=16, help="samples per partition per step")
    options.add_argument("--lr", type=float, default=0.3)
    options.add_argument("--seed", type=int, default=0)
    options.add_argument("--mean-delay", type=float, default=0.0, help="exponential delay mean in s (0: none)")
    options.add_argument("--slow-worker", type=int, action="append", default=[], help="a persistently slow worker")
    options.add_argument("--slow-delay", type=float, default=3.0, help="its extra delay in seconds (default 3)")
    options.add_argument("--save", type=Path, default=None, help="write final parameters and arrivals (torch.save)")
    options.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for results of one step")
    options.add_argument(
        "--wait-deadline",
        type=float,
        default=None,
        help="adaptive wait count: S in 0..s chosen per step so that steps finish within this many "
        "seconds (a step over it is a straggler event)",
    )
    options.add_argument("--wait-budget", type=float, default=0.1, help="allowed share of steps over --wait-deadline")
    return options


def latency_model(args: argparse.Namespace) -> LatencyModel:
    """``Exponential(--mean-delay)`` (or none), plus ``--slow-delay`` seconds for ``--slow-worker`` at every step."""
    base = Exponential(args.mean_delay) if args.mean_delay > 0 else None
    slow = tuple(args.slow_worker)
    if base is not None and not slow:
        return base
    return PersistentSlow(slow=slow, delay=args.slow_delay, base=base)  # slow=(): no delays at all


def build_job(
    argv: Optional[list[str]] = None, num_workers: Optional[int] = None
) -> tuple[argparse.Namespace, TrainingJob]:
    """Parse ``argv`` and build the job for ``num_workers`` workers (default ``WORLD_SIZE - 1``); raises
    ``ValueError`` for options no job can run. Used by the tests to replay a run in one process."""
    args = parser().parse_args(argv)
    if num_workers is None:
        num_workers = int(os.environ.get("WORLD_SIZE", "0")) - 1
    if num_workers < 1:
        raise ValueError("need at least 2 processes (a coordinator and a worker rank): --nproc-per-node >= 2")
    for name in ("steps", "batch_size"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.slow_worker and not all(0 <= w < num_workers for w in args.slow_worker):
        raise ValueError(f"--slow-worker must lie in [0, {num_workers}) (the n = {num_workers} workers)")
    code = make_gradient_code(args.scheme, num_workers=num_workers, num_stragglers=args.s, seed=args.seed)
    split = load_dataset(args.data, seed=args.seed)
    data = PartitionedData(
        split.train_x,
        split.train_y,
        num_partitions=code.num_partitions,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    torch.manual_seed(args.seed)
    model = build_model(
        args.model, in_channels=split.in_channels, image_size=split.image_size, num_classes=split.num_classes
    )
    policy = None
    if args.wait_deadline is not None:
        from torchgcc.control.wait_count import WaitCountController

        if not args.wait_deadline > 0:
            raise ValueError(f"--wait-deadline must be > 0 seconds, got {args.wait_deadline}")
        policy = WaitCountController(
            num_workers,
            deadline=args.wait_deadline,
            budget=args.wait_budget,
            candidates=range(args.s + 1),
            seed=args.seed,
        )
    job = TrainingJob(
        code=code,
        data=data,
        model=model,
        delays=DelaySchedule(latency_model(args), num_workers, seed=args.seed),
        lr=args.lr,
        steps=args.steps,
        policy=policy,
        wait_deadline=args.wait_deadline,
        timeout=args.timeout,
    )
    return args, job


def main(argv: Optional[list[str]] = None) -> int:
    """Parse, build, join and run; rank 0 returns the job's status, the worker ranks 0."""
    torch.set_num_threads(1)
    rank0 = int(os.environ.get("RANK", "0")) == 0
    try:
        args, job = build_job(argv)
    except ValueError as error:
        if rank0:
            print(f"{PROG}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    outcome = run(job, emit=lambda record: print(json.dumps(record), flush=True))
    if outcome is None:
        return 0
    if args.save is not None:
        saved = {"parameters": outcome.parameters, "arrivals": outcome.arrivals, "args": vars(args)}
        if job.policy is not None:
            saved.update(S_by_step=outcome.S_by_step, finish_s=outcome.finish_s, wait_policy=outcome.wait_policy)
        args.save.parent.mkdir(parents=True, exist_ok=True)
        torch.save(saved, args.save)
    # The data plane's receiver threads stay blocked in gloo until the peers close; tearing the process groups down
    # under them during interpreter finalisation can abort the process, so rank 0 leaves without finalising.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(outcome.status)
