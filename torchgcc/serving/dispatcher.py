"""The serving loop: dispatch each batch to the N workers when it forms; decode it from the results its scheme
needs; record every query's end-to-end latency.

A batch of M queries is encoded by its scheme (:mod:`torchgcc.distributed.schemes`: a code, replication or the
uncoded split) into N payloads, one per *slot*. Slots that hold only padding (a
batch smaller than the scheme's shape: uncoded shares or replicated inputs beyond the M queries) are not sent at
all and count as answered; the others go round robin: slot ``j`` of a batch to worker ``(j + o) mod N``, where
``o`` advances by the number of slots sent, so small batches spread over all workers (a code sends all N slots,
so its slot ``j`` is always worker ``j``). Workers run their tasks one at a
time in order (:class:`~torchgcc.serving.pool.WorkerPool`), so batches queue behind slow ones. A batch is decoded
as soon as its scheme's wait is over (codes: the fastest ``N - S`` slots; uncoded: every slot; replication: a copy
of every query) or, with a deadline, at the deadline from whatever can be decoded; its unfinished tasks are then
cancelled, so a straggler does not keep working on an answered batch.

With a :class:`~torchgcc.serving.hedging.HedgePolicy` every slot still unanswered ``policy.threshold_s()`` after
dispatch gets one backup task on the least-loaded other live worker; the first copy to answer fills the slot.
When a worker is lost, slots that the scheme cannot do without (uncoded: every slot) are sent to the least-loaded
live worker instead; a code decodes from the live workers.

A query's latency runs from its arrival to the end of its batch's decode: batching wait, queueing, compute,
transport and decoding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from torchgcc.distributed.arrival import stack_results
from torchgcc.distributed.schemes import CodedScheme, ReplicationScheme, UncodedScheme
from torchgcc.serving.batcher import Batch
from torchgcc.serving.hedging import HedgePolicy
from torchgcc.serving.pool import Completion, Task, WorkerPool

__all__ = ["BatchRecord", "ServingRun", "serve_open_loop"]

Scheme = CodedScheme | UncodedScheme | ReplicationScheme
PRIMARY, BACKUP = 0, 1


@dataclass
class BatchRecord:
    """What happened to one batch (times in seconds after the run's start).

    Attributes:
        index: the batch's index.
        size: its number of queries.
        formed_s, dispatched_s, done_s: when it formed, when its tasks were submitted, when it was decoded.
        arrived: slots whose results the decoder used (for a code, slot j is worker j).
        hedged: slots that got a backup task; ``backups_won``: how many of them the backup answered first.
        missing: query indices without an output (replication at a deadline, or a batch that could not decode).
        compute_s: the longest time a worker whose result was used spent in the model (its own measurement).
    """

    index: int
    size: int
    formed_s: float
    dispatched_s: float
    done_s: float
    arrived: list[int]
    hedged: list[int] = field(default_factory=list)
    backups_won: int = 0
    missing: list[int] = field(default_factory=list)
    compute_s: float = 0.0


@dataclass
class ServingRun:
    """The outcome of :func:`serve_open_loop`.

    Attributes:
        outputs: ``(Q, *out)`` decoded outputs in query order (NaN rows for ``missing`` queries).
        latency_s: ``(Q,)`` float64 end-to-end seconds, arrival to decoded output.
        batches: one :class:`BatchRecord` per batch.
        missing: query indices without an output.
        tasks: tasks submitted (primaries and backups); ``backups``: backups among them.
        lost_workers: workers lost during the run.
        duration_s: seconds from the start to the last decode.
    """

    outputs: torch.Tensor
    latency_s: torch.Tensor
    batches: list[BatchRecord]
    missing: list[int]
    tasks: int
    backups: int
    lost_workers: list[int]
    duration_s: float


@dataclass
class _InFlight:
    batch: Batch
    payloads: torch.Tensor  # (N, b, *in)
    dispatched_s: float
    hedge_at_s: float  # absolute; inf: no hedging
    deadline_at_s: float  # absolute; inf: no deadline
    give_up_at_s: float
    results: dict[int, torch.Tensor] = field(default_factory=dict)
    compute: dict[int, float] = field(default_factory=dict)
    outstanding: dict[tuple, int] = field(default_factory=dict)  # task key -> worker
    workers_of: dict[int, set[int]] = field(default_factory=dict)  # slot -> workers given it
    padding: set[int] = field(default_factory=set)  # slots no query of the batch needs: never sent
    hedged: list[int] = field(default_factory=list)
    backups_won: int = 0


def serve_open_loop(
    pool: WorkerPool,
    scheme: Scheme,
    queries: torch.Tensor,
    arrival_s: torch.Tensor,
    batches: list[Batch],
    *,
    num_stragglers: int = 0,
    delays: torch.Tensor | None = None,
    backup_delays: torch.Tensor | None = None,
    hedge: HedgePolicy | None = None,
    deadline_s: float | None = None,
    give_up_s: float = 60.0,
    on_batch: Callable[[int, int], None] | None = None,
) -> ServingRun:
    """Serve ``queries`` ``(Q, *in)`` arriving at ``arrival_s`` ``(Q,)`` seconds after the start, in ``batches``.

    Args:
        pool: the N workers (``pool.num_workers`` must equal the scheme's N).
        scheme: how a batch is encoded and decoded.
        num_stragglers: S of a code whose scheme does not carry its own: decode from the fastest ``N - S``.
        delays: ``(num_batches, N)`` seconds each worker stays busy after the model ran on that batch's primary
            task (injected slowdowns; the same tensor for every scheme gives every scheme the same delays).
        backup_delays: ``(num_batches, N)`` the same for backup tasks (default: none).
        hedge: send backups after ``hedge.threshold_s()`` (see :mod:`torchgcc.serving.hedging`); None: never.
        deadline_s: decode a batch this long after dispatch from whatever can be decoded (None: no deadline).
        give_up_s: a batch that still cannot be decoded this long after dispatch is given up (its queries are
            reported missing), so a hung worker cannot stall the run forever.
        on_batch: called with ``(batches decoded, total)`` after every decode (progress).
    """
    num_workers = pool.num_workers
    if scheme.num_workers != num_workers:
        raise ValueError(f"the scheme has N={scheme.num_workers} workers but the pool {num_workers}")
    if len(arrival_s) != len(queries):
        raise ValueError(f"{len(queries)} queries but {len(arrival_s)} arrival times")
    for name, table in (("delays", delays), ("backup_delays", backup_delays)):
        if table is not None and tuple(table.shape) != (len(batches), num_workers):
            raise ValueError(f"{name} must have shape (num_batches, N) = ({len(batches)}, {num_workers})")
    stragglers = getattr(scheme, "num_stragglers", None)
    quorum = num_workers - (num_stragglers if stragglers is None else stragglers)
    start = pool.now()
    arrival = arrival_s.double()
    latency = torch.full((len(queries),), math.nan, dtype=torch.float64)
    outputs: torch.Tensor | None = None
    records: list[BatchRecord] = []
    missing: list[int] = []
    in_flight: dict[int, _InFlight] = {}
    load = [0] * num_workers
    lost: set[int] = set(pool.lost_workers())  # lost before this run too
    counts = {"tasks": 0, "backups": 0}
    rotation = [0]  # worker of slot 0 in the next batch

    def submit(state: _InFlight, slot: int, worker: int, copy: int) -> None:
        table = delays if copy == PRIMARY else backup_delays
        delay = 0.0 if table is None else float(table[state.batch.index, worker])
        key = (state.batch.index, slot, copy)
        pool.submit(Task(key, worker, state.payloads[slot], delay))
        state.outstanding[key] = worker
        state.workers_of.setdefault(slot, set()).add(worker)
        load[worker] += 1
        counts["tasks"] += 1
        counts["backups"] += copy == BACKUP

    def least_loaded(exclude: set[int]) -> int | None:
        live = [w for w in range(num_workers) if w not in lost and w not in exclude]
        return min(live, key=lambda w: (load[w], w)) if live else None

    def dispatch(batch: Batch) -> None:
        now = pool.now()
        payloads = scheme.encode(queries[batch.queries])
        threshold = math.inf if hedge is None else hedge.threshold_s()
        state = _InFlight(
            batch,
            payloads,
            dispatched_s=now,
            hedge_at_s=now + threshold,
            deadline_at_s=math.inf if deadline_s is None else now + deadline_s,
            give_up_at_s=now + give_up_s,
        )
        in_flight[batch.index] = state
        state.padding = scheme.padding_workers(len(batch.queries))
        needed = sorted(set(range(num_workers)) - state.padding)
        offset = rotation[0]
        rotation[0] = (offset + len(needed)) % num_workers  # the next batch starts where this one ended
        for slot in needed:
            worker = (slot + offset) % num_workers
            if worker in lost:
                worker = least_loaded(set()) if _needs_every_slot(scheme) else None
            if worker is not None:
                submit(state, slot, worker, PRIMARY)
        check(state)

    def send_backups(state: _InFlight) -> None:
        state.hedge_at_s = math.inf
        for slot in range(num_workers):
            if slot in state.results or slot not in state.workers_of or slot in state.padding:
                continue
            worker = least_loaded(state.workers_of[slot])
            if worker is not None:
                submit(state, slot, worker, BACKUP)
                state.hedged.append(slot)

    def drop(state: _InFlight) -> None:
        pool.cancel(list(state.outstanding))
        for worker in state.outstanding.values():
            load[worker] -= 1
        state.outstanding.clear()
        del in_flight[state.batch.index]

    def finish(state: _InFlight, mask: torch.Tensor | None) -> None:
        nonlocal outputs
        batch = state.batch
        if mask is None:  # given up: nothing decodable arrived in time
            decoded, lost_queries = None, list(range(len(batch.queries)))
        else:
            decoded, lost_queries = scheme.decode(stack_results(state.results, num_workers), mask, len(batch.queries))
            mask = scheme.used_mask(mask)
        done = pool.now()
        index = torch.tensor(batch.queries)
        latency[index] = done - start - arrival[index]
        if decoded is not None:
            if outputs is None:
                outputs = decoded.new_full((len(queries), *decoded.shape[1:]), math.nan)
            outputs[index] = decoded
        gone = [batch.queries[i] for i in lost_queries]
        missing.extend(gone)
        used = [] if mask is None else [s for s in mask.any(0).nonzero().flatten().tolist() if s not in state.padding]
        records.append(
            BatchRecord(
                index=batch.index,
                size=len(batch.queries),
                formed_s=batch.formed_s,
                dispatched_s=state.dispatched_s - start,
                done_s=done - start,
                arrived=used,
                hedged=sorted(state.hedged),
                backups_won=state.backups_won,
                missing=gone,
                compute_s=max((state.compute[s] for s in used if s in state.compute), default=0.0),
            )
        )
        drop(state)
        if on_batch is not None:
            on_batch(len(records), len(batches))

    def check(state: _InFlight) -> None:
        """Decode ``state`` if its wait is over (or its deadline passed and it is decodable); give it up if it
        can no longer decode."""
        now = pool.now()
        arrived = torch.zeros(num_workers, dtype=torch.bool)
        arrived[[*state.results, *state.padding]] = True  # padding slots decode as zeros, then are dropped
        mask = arrived.expand(scheme.num_groups(len(state.batch.queries)), -1).clone()
        possible = len(state.results) + len({key[1] for key in state.outstanding} - set(state.results))
        rule_met = len(state.results) >= min(quorum, possible)
        decodable = bool(state.results) and scheme.decodable(mask)
        exhausted = not state.outstanding
        if decodable and (scheme.wait_over(mask, rule_met) or now >= state.deadline_at_s or exhausted):
            finish(state, mask)
        elif exhausted or now >= state.give_up_at_s:
            finish(state, None)

    def receive(completion: Completion) -> None:
        if completion.error is not None:
            lost.add(completion.worker)
            for state in list(in_flight.values()):
                for key, worker in list(state.outstanding.items()):
                    if worker == completion.worker:
                        del state.outstanding[key]
                        load[worker] -= 1
                        if _needs_every_slot(scheme) and key[1] not in state.results:
                            other = least_loaded(state.workers_of[key[1]])
                            if other is not None:
                                submit(state, key[1], other, key[2])
                check(state)
            return
        state = in_flight.get(completion.key[0])
        if state is None or completion.key not in state.outstanding:
            return  # a batch already decoded (a task that finished before its cancellation reached it)
        del state.outstanding[completion.key]
        load[completion.worker] -= 1
        _, slot, copy = completion.key
        if copy == PRIMARY and hedge is not None:
            hedge.observe(completion.finished_s - state.dispatched_s)
        if slot not in state.results:
            state.results[slot] = completion.output
            state.compute[slot] = completion.compute_s
            state.backups_won += copy == BACKUP
        check(state)

    next_batch = 0
    while next_batch < len(batches) or in_flight:
        now = pool.now()
        while next_batch < len(batches) and start + batches[next_batch].formed_s <= now:
            dispatch(batches[next_batch])
            next_batch += 1
        for state in list(in_flight.values()):
            if now >= state.hedge_at_s:
                send_backups(state)
            if now >= min(state.deadline_at_s, state.give_up_at_s):
                check(state)
        timers = [start + batches[next_batch].formed_s] if next_batch < len(batches) else []
        for state in in_flight.values():  # a deadline already passed waits for results, not for the clock
            timers += [t for t in (state.hedge_at_s, state.deadline_at_s, state.give_up_at_s) if t > now]
        until = min(timers, default=math.inf)
        if not in_flight and next_batch >= len(batches):
            break
        for completion in pool.wait(until):
            receive(completion)
    if outputs is None:
        raise RuntimeError("no batch could be decoded")
    return ServingRun(
        outputs=outputs,
        latency_s=latency,
        batches=sorted(records, key=lambda r: r.index),
        missing=sorted(missing),
        tasks=counts["tasks"],
        backups=counts["backups"],
        lost_workers=sorted(lost | pool.lost_workers()),
        duration_s=max((r.done_s for r in records), default=0.0),
    )


def _needs_every_slot(scheme: Scheme) -> bool:
    """Uncoded execution cannot decode without any of its slots: a lost worker's slot is sent elsewhere."""
    return isinstance(scheme, UncodedScheme)
