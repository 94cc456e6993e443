"""Gradient-coded training across processes under torchrun: a coordinator (rank 0) and one worker per other rank.

Run (5 processes: the coordinator and n = 4 workers; GC-FR with s = 1; worker 3 is 3 s late at every step)::

    torchrun --standalone --nproc-per-node 5 -m torchgcc.gradient_coding.runtime \\
        --scheme gc-fr -s 1 --steps 10 --slow-worker 3 --slow-delay 3 --save /tmp/run.pt

That command line is the application's (:mod:`torchgcc.app.commands.gradient_coding_job`, which builds the
:class:`TrainingJob` from its options; ``torchgcc.gradient_coding.runtime`` is its thin entry point); this module is
the runtime: :func:`run` on every rank.

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
emits one record per step (``step``, ``wall_s``, ``arrived``, ``used``) and a summary, and returns a
:class:`TrainingOutcome` with the final flat parameters and the arrived sets, so the simulator can replay the same
arrivals (``Simulation.run(arrivals=...)``) and must reach the same model. gloo on CPU only; the data plane's NCCL
path has never been run here.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
from torch import nn

from torchgcc.distributed.dataplane import DataPlane, Message, PairBrokenError, open_peer_pair
from torchgcc.gradient_coding.clock import DelaySchedule
from torchgcc.gradient_coding.codes import GradientCode
from torchgcc.gradient_coding.gradients import GradientWorker, apply_update, combine, flat_parameters, load_flat
from torchgcc.gradient_coding.partitions import PartitionedData

__all__ = ["EXIT_BROKEN_PAIR", "EXIT_NOT_CLOSED", "TrainingJob", "TrainingOutcome", "coordinate", "run", "serve"]

_MODEL, _STOP, _RESULT, _BYE = 1, 2, 3, 4  # message kinds (first meta entry)
_OK, _ABANDONED = 1, 0
_POLL_S = 0.005

#: exit status when a worker's data-plane pair broke.
EXIT_BROKEN_PAIR = 3
#: exit status when some worker did not say goodbye in time.
EXIT_NOT_CLOSED = 4

Record = dict[str, Any]


@dataclass
class TrainingJob:
    """What every process holds identically: the code, the data, the model, the delays and the run's settings.

    Attributes:
        code: the gradient code of the ``n`` workers (``code.num_workers`` must be the world size minus one).
        data: the partitioned training set (same seed on every rank).
        model: the model, initialised identically on every rank.
        delays: the seeded injected delays.
        lr: SGD learning rate; ``steps``: steps to run.
        policy: an adaptive wait count (:class:`~torchgcc.control.wait_count.WaitCountController` over S in
            ``0..s``) or None to wait for ``code.wait_for`` results.
        wait_deadline: with ``policy``, the seconds after which a result counts as late.
        timeout: seconds to wait for any one message.
    """

    code: GradientCode
    data: PartitionedData
    model: nn.Module
    delays: DelaySchedule
    lr: float
    steps: int
    policy: Any = None
    wait_deadline: Optional[float] = None
    timeout: float = 120.0

    def __post_init__(self) -> None:
        if self.policy is not None and not (self.wait_deadline is not None and self.wait_deadline > 0):
            raise ValueError(f"an adaptive wait count needs wait_deadline > 0 seconds, got {self.wait_deadline!r}")


@dataclass
class TrainingOutcome:
    """Rank 0's result: exit status, final flat parameters, the arrived workers per step and, with an adaptive wait
    count, the chosen S and every worker's finish time per step and the policy's state."""

    status: int
    parameters: torch.Tensor
    arrivals: list[list[int]]
    records: list[Record]
    S_by_step: list[int] = field(default_factory=list)
    finish_s: list[torch.Tensor] = field(default_factory=list)
    wait_policy: Optional[dict] = None


def run(job: TrainingJob, *, emit: Callable[[Record], None] = lambda record: None) -> Optional[TrainingOutcome]:
    """Join the torchrun job (``env://``) and take part: rank 0 coordinates and returns the outcome, the other
    ranks serve one coded worker each and return None."""
    store, rank, world_size = next(dist.rendezvous("env://", timeout=timedelta(seconds=60)))
    if world_size != job.code.num_workers + 1:
        raise ValueError(f"the code has {job.code.num_workers} workers but the job has {world_size - 1} worker ranks")
    store = dist.PrefixStore("torchgcc-gradient-coding", store)
    if rank != 0:
        serve(job, store, rank)
        return None
    return coordinate(job, store, emit=emit)


def coordinate(job: TrainingJob, store: dist.Store, *, emit: Callable[[Record], None]) -> TrainingOutcome:
    """Rank 0: run the steps, emit one record per step and a summary."""
    n = job.code.num_workers
    ranks = list(range(1, n + 1))
    plane = DataPlane(store, ranks)
    arrivals: list[list[int]] = []
    records: list[Record] = []
    start_all = time.perf_counter()
    observed: list[torch.Tensor] = []
    chosen: list[int] = []

    def outcome(status: int) -> TrainingOutcome:
        state = None if job.policy is None else job.policy.state_dict()
        return TrainingOutcome(status, flat_parameters(job.model), arrivals, records, chosen, observed, state)

    for step in range(job.steps):
        start = time.perf_counter()
        stragglers = None if job.policy is None else job.policy.choose()
        wait_for = job.code.wait_for if stragglers is None else n - stragglers
        flat = flat_parameters(job.model)
        for rank in ranks:
            plane.post(rank, Message(meta=[_MODEL, step], tensors=[flat]))
        arrived: list[int] = []
        messages: dict[int, torch.Tensor] = {}
        finish_s = torch.full((n,), math.inf, dtype=torch.float64)
        while len(arrived) < wait_for:
            rank, _, message = plane.inbox.get(timeout=job.timeout)
            if isinstance(message, PairBrokenError):
                emit({"event": "error", "step": step, "error": f"rank {rank}: {message}"})
                return outcome(EXIT_BROKEN_PAIR)
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
            # the policy chose S above, and TrainingJob checks that a policy comes with a deadline
            assert stragglers is not None and job.wait_deadline is not None
            if _collect_round(plane, step, finish_s, start, job.timeout, emit):
                return outcome(EXIT_BROKEN_PAIR)
            late = finish_s.masked_fill(finish_s > job.wait_deadline, math.inf)
            job.policy.observe(late, num_stragglers=stragglers, watched_until=job.wait_deadline)
            observed.append(finish_s)
            chosen.append(stragglers)
            record["S"] = stragglers
        records.append(record)
        emit(record)
    for rank in ranks:
        plane.post(rank, Message(meta=[_STOP, job.steps]))
    pending = set(ranks)
    deadline = time.monotonic() + job.timeout
    while pending and time.monotonic() < deadline:  # every late result is received before the goodbyes
        rank, _, message = plane.inbox.get(timeout=max(deadline - time.monotonic(), 0.01))
        if not isinstance(message, PairBrokenError) and message.meta[0] == _BYE:
            pending.discard(rank)
    plane.close()
    emit(
        {
            "event": "summary",
            "steps": job.steps,
            "wall_s": time.perf_counter() - start_all,
            "workers_not_closed": sorted(pending),
        }
    )
    return outcome(0 if not pending else EXIT_NOT_CLOSED)


def _collect_round(
    plane: DataPlane, step: int, finish_s: torch.Tensor, start: float, timeout: float, emit: Callable[[Record], None]
) -> bool:
    """After round ``step`` closed: wait for the answer of every worker not yet heard and fill ``finish_s``.

    A late result's time is its arrival; an abandoned worker reports, in microseconds, when after the model reached
    it its result would have been ready. Returns True if a pair broke."""
    heard = torch.isfinite(finish_s)
    while not heard.all():
        rank, _, message = plane.inbox.get(timeout=timeout)
        if isinstance(message, PairBrokenError):
            emit({"event": "error", "step": step, "error": f"rank {rank}: {message}"})
            return True
        kind, round_, worker, status = message.meta[:4]
        if kind != _RESULT or round_ != step or heard[worker]:
            continue
        finish_s[worker] = time.perf_counter() - start if status == _OK else message.meta[4] / 1e6
        heard[worker] = True
    return False


def serve(job: TrainingJob, store: dist.Store, rank: int) -> None:
    """Rank ``rank`` >= 1: coded worker ``rank - 1`` until the coordinator says stop."""
    pair = open_peer_pair(store, rank=rank)
    worker = GradientWorker(rank - 1, job.code, job.data)
    while True:
        message = pair.recv()
        kind, step = message.meta[:2]
        if kind == _STOP:
            pair.send(Message(meta=[_BYE, step, worker.index, _OK]))
            return
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
