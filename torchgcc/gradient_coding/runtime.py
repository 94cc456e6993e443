"""Gradient-coded training across processes under torchrun: a coordinator (rank 0) and one worker per other rank.

Run (5 processes: the coordinator and n = 4 workers; GC-FR with s = 1; worker 3 is 3 s late at every step)::

    torchrun --standalone --nproc-per-node 5 -m torchgcc.gradient_coding.runtime \\
        --scheme gc-fr -s 1 --steps 10 --slow-worker 3 --slow-delay 3 --save run.pt

Every step ``t``:

1. the coordinator sends the flat model ``w_t`` to every worker on the data plane
   (:class:`torchgcc.distributed.dataplane.DataPlane`: a two-member gloo group per worker rank, tensors point to
   point; the rendezvous store only carries the control keys ``ended``);
2. worker ``i`` (rank ``i + 1``) loads ``w_t``, computes its coded gradient with the same
   :class:`~torchgcc.gradient_coding.gradients.GradientWorker` as the simulator (one backward pass; a pipelined
   worker advances its cache), waits its injected delay (``DelaySchedule``, the same seeded delays as the
   simulator's) and sends the result; while it waits it polls ``ended``, and once the coordinator has closed the
   round it sends an empty "abandoned" result at once instead, so a late worker never falls behind;
3. the coordinator takes the first ``code.wait_for`` results of round ``t`` in arrival order, decodes ``a``
   (:meth:`GradientCode.decode`), applies ``w <- w - lr * sum_i a_i f_i / k`` and closes the round (``ended = t``).
   Results of closed rounds are dropped.

With ``--wait-deadline D`` the number of results waited for is adaptive: before every step a
:class:`~torchgcc.control.wait_count.WaitCountController` (candidates ``S = 0..s``, budget ``--wait-budget``)
chooses S and the coordinator takes the first ``n - S`` results. After closing the round it collects every
worker's answer to it: a late result's arrival time, or, from a worker abandoned by the close, the time after the
model's arrival at which its result would have been ready (compute plus injected delay). The controller observes
these with the ones after ``D`` as late (``watched_until=D``), as the distributed executor does.

Every worker holds the whole (small) training set but reads only its partitions' mini-batches
(:class:`~torchgcc.gradient_coding.partitions.PartitionedData`, same seed as the coordinator's simulator). Rank 0
prints one JSON line per step (``step``, ``wall_s``, ``arrived``, ``used``) and a summary; ``--save`` writes the
final flat parameters and the arrived sets, so the simulator can replay the same arrivals
(``Simulation.run(arrivals=...)``) and must reach the same model. gloo on CPU only; the data plane's NCCL path has
never been run here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist

from torchgcc.distributed.dataplane import DataPlane, Message, PairBrokenError, open_peer_pair
from torchgcc.gradient_coding.clock import DelaySchedule
from torchgcc.gradient_coding.codes import GradientCode
from torchgcc.gradient_coding.gradients import GradientWorker, apply_update, combine, flat_parameters, load_flat
from torchgcc.gradient_coding.partitions import PartitionedData
from torchgcc.gradient_coding.training_schemes import list_schemes, make_scheme
from torchgcc.stragglers import Exponential, LatencyModel, PersistentSlow

__all__ = ["TrainingJob", "build_job", "main"]

_MODEL, _STOP, _RESULT, _BYE = 1, 2, 3, 4  # message kinds (first meta entry)
_OK, _ABANDONED = 1, 0
_POLL_S = 0.005


class TrainingJob:
    """What every process builds identically from the command line: the code, the data, the model, the delays."""

    def __init__(self, args: argparse.Namespace, num_workers: int) -> None:
        from torchgcc.app.data import load_dataset
        from torchgcc.app.experiments.training_study import build_study_model

        self.code: GradientCode = make_scheme(
            args.scheme, num_workers=num_workers, num_stragglers=args.s, seed=args.seed
        )
        split = load_dataset(args.data, seed=args.seed)
        self.data = PartitionedData(
            split.train_x,
            split.train_y,
            num_partitions=self.code.num_partitions,
            batch_size=args.batch_size,
            seed=args.seed,
        )
        torch.manual_seed(args.seed)
        self.model = build_study_model(
            args.model, in_channels=split.in_channels, image_size=split.image_size, num_classes=split.num_classes
        )
        self.delays = DelaySchedule(latency_model(args), num_workers, seed=args.seed)
        self.lr, self.steps = args.lr, args.steps
        self.policy = None if args.wait_deadline is None else wait_policy(args, num_workers)


def wait_policy(args: argparse.Namespace, num_workers: int):
    """The adaptive wait count of ``--wait-deadline``: S in ``0..s``, ``WaitCountController``'s defaults."""
    from torchgcc.control.wait_count import WaitCountController

    if args.wait_deadline <= 0:
        raise SystemExit(f"--wait-deadline must be > 0 seconds, got {args.wait_deadline}")
    return WaitCountController(
        num_workers, deadline=args.wait_deadline, budget=args.wait_budget, stragglers=range(args.s + 1), seed=args.seed
    )


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
    """Parse ``argv`` and build the job (``num_workers``: default ``WORLD_SIZE - 1``); used by tests too."""
    parser = argparse.ArgumentParser(
        prog="torchrun ... -m torchgcc.gradient_coding.runtime", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--scheme", choices=list_schemes(), default="gc-fr")
    parser.add_argument("-s", type=int, default=1, help="stragglers tolerated (default 1)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--model", default="mlp", help="mlp (default) or lenet5")
    parser.add_argument("--data", default="digits")
    parser.add_argument("--batch-size", type=int, default=16, help="samples per partition per step")
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mean-delay", type=float, default=0.0, help="exponential delay mean in s (0: none)")
    parser.add_argument("--slow-worker", type=int, action="append", default=[], help="a persistently slow worker")
    parser.add_argument("--slow-delay", type=float, default=3.0, help="its extra delay in seconds (default 3)")
    parser.add_argument("--save", type=Path, default=None, help="write final parameters and arrivals (torch.save)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for results of one step")
    parser.add_argument(
        "--wait-deadline",
        type=float,
        default=None,
        help="adaptive wait count: S in 0..s chosen per step so that steps finish within this many "
        "seconds (a step over it is a straggler event)",
    )
    parser.add_argument("--wait-budget", type=float, default=0.1, help="allowed share of steps over --wait-deadline")
    args = parser.parse_args(argv)
    if num_workers is None:
        num_workers = int(os.environ["WORLD_SIZE"]) - 1
    if num_workers < 1:
        raise SystemExit("need at least 2 processes (a coordinator and a worker)")
    return args, TrainingJob(args, num_workers)


def _emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def coordinate(job: TrainingJob, store: dist.Store, args: argparse.Namespace) -> int:
    """Rank 0: run the steps, print JSON lines, return the exit status."""
    n = job.code.num_workers
    ranks = list(range(1, n + 1))
    plane = DataPlane(store, ranks)
    arrivals, start_all = [], time.perf_counter()
    observed, chosen = [], []
    for step in range(job.steps):
        start = time.perf_counter()
        stragglers = None if job.policy is None else job.policy.choose()
        wait_for = job.code.wait_for if stragglers is None else n - stragglers
        flat = flat_parameters(job.model)
        for rank in ranks:
            plane.post(rank, Message(meta=[_MODEL, step], tensors=[flat]))
        arrived, messages, finish_s = [], {}, torch.full((n,), math.inf, dtype=torch.float64)
        while len(arrived) < wait_for:
            rank, _, message = plane.inbox.get(timeout=args.timeout)
            if isinstance(message, PairBrokenError):
                _emit({"event": "error", "step": step, "error": f"rank {rank}: {message}"})
                return 3
            kind, round_, worker, status = message.meta[:4]
            if kind == _RESULT and round_ == step and status == _OK:
                arrived.append(worker)
                messages[worker] = message.tensors[0]
                finish_s[worker] = time.perf_counter() - start
        a = job.code.decode(arrived)
        used = a.nonzero().flatten().tolist()
        apply_update(job.model, combine(messages, a), lr=job.lr, num_partitions=job.code.num_partitions)
        store.set("ended", str(step))
        wall_s = time.perf_counter() - start
        arrivals.append(arrived)
        record = {"step": step, "wall_s": wall_s, "arrived": arrived, "used": used}
        if job.policy is not None:
            status = _collect_round(plane, step, finish_s, start, args.timeout)
            if status:
                return status
            job.policy.observe(
                finish_s.masked_fill(finish_s > args.wait_deadline, math.inf),
                stragglers=stragglers,
                watched_until=args.wait_deadline,
            )
            observed.append(finish_s)
            chosen.append(stragglers)
            record["S"] = stragglers
        _emit(record)
    for rank in ranks:
        plane.post(rank, Message(meta=[_STOP, job.steps]))
    pending = set(ranks)
    deadline = time.monotonic() + args.timeout
    while pending and time.monotonic() < deadline:  # every late result is received before the goodbyes
        rank, _, message = plane.inbox.get(timeout=max(deadline - time.monotonic(), 0.01))
        if not isinstance(message, PairBrokenError) and message.meta[0] == _BYE:
            pending.discard(rank)
    plane.close()
    if args.save is not None:
        saved = {"parameters": flat_parameters(job.model), "arrivals": arrivals, "args": vars(args)}
        if job.policy is not None:
            saved.update(S_by_step=chosen, finish_s=observed, wait_policy=job.policy.state_dict())
        torch.save(saved, args.save)
    _emit(
        {
            "event": "summary",
            "steps": job.steps,
            "wall_s": time.perf_counter() - start_all,
            "workers_not_closed": sorted(pending),
        }
    )
    return 0 if not pending else 4


def _collect_round(plane: DataPlane, step: int, finish_s: torch.Tensor, start: float, timeout: float) -> int:
    """After round ``step`` closed: wait for the answer of every worker not yet heard and fill ``finish_s``.

    A late result's time is its arrival; an abandoned worker reports, in microseconds, when after the model reached
    it its result would have been ready. Returns 0, or 3 if a pair broke."""
    heard = torch.isfinite(finish_s)
    while not heard.all():
        rank, _, message = plane.inbox.get(timeout=timeout)
        if isinstance(message, PairBrokenError):
            _emit({"event": "error", "step": step, "error": f"rank {rank}: {message}"})
            return 3
        kind, round_, worker, status = message.meta[:4]
        if kind != _RESULT or round_ != step or heard[worker]:
            continue
        finish_s[worker] = time.perf_counter() - start if status == _OK else message.meta[4] / 1e6
        heard[worker] = True
    return 0


def serve(job: TrainingJob, store: dist.Store, rank: int) -> int:
    """Rank ``rank`` >= 1: coded worker ``rank - 1`` until the coordinator says stop."""
    pair = open_peer_pair(store, rank=rank)
    worker = GradientWorker(rank - 1, job.code, job.data)
    while True:
        message = pair.recv()
        kind, step = message.meta[:2]
        if kind == _STOP:
            pair.send(Message(meta=[_BYE, step, worker.index, _OK]))
            return 0
        received = time.perf_counter()
        load_flat(job.model, message.tensors[0])
        job.model.train()
        gradient = worker.message(job.model, step)
        release = time.perf_counter() + float(job.delays.delays(step)[worker.index])  # compute, then the delay
        status = _OK
        while time.perf_counter() < release:
            if _round_ended(store, step):
                status = _ABANDONED
                break
            time.sleep(min(_POLL_S, max(release - time.perf_counter(), 0.0)))
        tensors = [gradient] if status == _OK else []
        ready_us = round((release - received) * 1e6)  # when the result would have been ready (abandoned workers)
        pair.send(Message(meta=[_RESULT, step, worker.index, status, ready_us], tensors=tensors))


def _round_ended(store: dist.Store, step: int) -> bool:
    return store.check(["ended"]) and int(store.get("ended")) >= step


def main(argv: Optional[list[str]] = None) -> int:
    torch.set_num_threads(1)
    store, rank, world_size = next(dist.rendezvous("env://", timeout=timedelta(seconds=60)))
    store = dist.PrefixStore("torchgcc-gradient-coding", store)
    args, job = build_job(argv, num_workers=world_size - 1)
    if rank != 0:
        return serve(job, store, rank)
    status = coordinate(job, store, args)
    # The data plane's receiver threads stay blocked in gloo until the peers close; tearing the process groups down
    # under them during interpreter finalisation can abort the process, so rank 0 leaves without finalising.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main())
