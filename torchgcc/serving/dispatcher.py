"""The serving loop: dispatch each batch to the N workers when it forms; decode it once its wait is over; record
every query's end-to-end latency.

The loop runs a :class:`~torchgcc.CodedModule` with an engine (``CodedModule(model, code, workers=..., wait=...)``):
a batch of M queries is grouped and encoded by it (:meth:`CodedModule.encode`) into N coded inputs, one per *slot*,
and decoded by it (:meth:`CodedModule.decode`) from the slots' results, so noise, attacks and every code (GCC, BACC,
LCC, replication, uncoded) behave as in :meth:`CodedModule.forward`. A slot that holds only padding (a batch smaller
than one group) and computes the same coded input as a slot that is sent (:func:`padding_slots`: uncoded's and
replication's copies of the last query) is not sent: it arrives with that slot, holding its result, so the decoder
sees what the in-process module computes. The others go round robin: slot ``j`` of a batch to worker ``(j + o) mod
N``, where ``o`` advances by the number of slots sent, so small batches spread over all workers (a batch that sends
all N slots has slot ``j`` on worker ``j``). Workers run their tasks one at a time in order
(:class:`~torchgcc.workers.Workers`), so batches queue behind slow ones. Each batch ends its wait by the module's
:class:`~torchgcc.workers.WaitPolicy`, the rule every engine uses (the fastest ``N - S`` slots that the code can
decode from, or its deadline); its unfinished tasks are then cancelled, so a straggler does not keep working on an
answered batch. An adaptive wait (``WaitPolicy(adaptive=...)``) chooses S when a batch is dispatched and observes
the batch's arrival times once it is decoded, as :func:`~torchgcc.workers.run_round` does per round; with its
``watch_s`` the decoded batch's unfinished tasks run on until ``watch_s`` after dispatch, so the controller learns
which slots were late, and are cancelled then.

Hedging is a policy of this loop, not a code: with a :class:`~torchgcc.serving.hedging.HedgePolicy` every slot
still unanswered ``policy.threshold_s()`` after dispatch gets one backup task on the least-loaded other live worker;
the first copy to answer fills the slot. When a worker is lost, the slots of a batch that can no longer be decoded
without them (uncoded: every slot; replication: the last copy of an input) are sent to the least-loaded live worker.
A task that fails on a worker that lives on (its model raised, on Ray: a :class:`~torchgcc.workers.Completion` with
``error`` from a worker not in ``lost_workers()``) loses that copy only: the worker keeps serving, and a slot the
batch needs goes to another live worker.

A query's latency runs from its arrival to the end of its batch's decode: batching wait, queueing, compute,
transport and decoding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import AbstractSet, Callable, Optional, cast

import torch

from torchgcc.checks import check_finite, check_integer, check_real, real_tensor
from torchgcc.coded_module import CodedBatch, CodedModule
from torchgcc.model_output import ModelOutput
from torchgcc.serving.batcher import Batch
from torchgcc.serving.hedging import HedgePolicy
from torchgcc.workers import Completion, Task, stack_results

__all__ = ["BatchRecord", "ServingRun", "padding_slots", "serve_open_loop"]

PRIMARY, BACKUP = 0, 1


@dataclass
class BatchRecord:
    """What happened to one batch (times in seconds after the run's start).

    Attributes:
        index: the batch's index.
        size: its number of queries.
        formed_s, dispatched_s, done_s: when it formed, when its tasks were submitted, when it was decoded.
        arrived: slots whose results the decoder used (slot j is coded input j of every group).
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
    coded: CodedBatch
    dispatched_s: float
    hedge_at_s: float  # absolute; inf: no hedging
    deadline_at_s: float  # absolute; inf: no deadline
    give_up_at_s: float
    stragglers: Optional[int]
    results: dict[int, ModelOutput] = field(default_factory=dict)  # slot -> output (b, *out)
    compute: dict[int, float] = field(default_factory=dict)
    outstanding: dict[tuple, int] = field(default_factory=dict)  # task key -> worker
    workers_of: dict[int, set[int]] = field(default_factory=dict)  # slot -> workers given it
    padding: dict[int, list[int]] = field(default_factory=dict)  # slot never sent -> the sent slots it copies
    hedged: list[int] = field(default_factory=list)
    backups_won: int = 0
    arrival: dict[int, float] = field(default_factory=dict)  # slot -> seconds from dispatch to its first result
    waited_s: float = 0.0  # seconds from dispatch to the decode
    watch_until_s: float = math.inf  # absolute: a decoded batch's late results are recorded until then


def padding_slots(coded: CodedModule, num_queries: int) -> dict[int, list[int]]:
    """The slots a batch of ``num_queries`` queries need not send, each with the slots whose result it takes.

    A batch of at least one group has none (its padding shares a group with real samples). In a smaller one, the
    padding samples are copies of the last query (:func:`~torchgcc.coded_module.group_samples`), so slot ``j``'s
    coded input is ``sum_{i < m - 1} E[j, i] x_i + (sum_{i >= m - 1} E[j, i]) x_{m - 1}`` (``m = num_queries``).
    A slot that reads only padding is skipped when another slot that is sent has the same coefficients (the same
    coded input, so the same result: uncoded's and replication's copies of the last query, BACC's and LCC's worker
    points on its regression point); it then arrives with the first of them, holding that result, as the in-process
    module would compute it. A slot that reads only padding without such a twin is sent like any other: its result
    is the model on a coded input no other slot computes, which an interpolating decoder uses (zeros would not be
    its result)."""
    if num_queries >= coded.code.num_inputs:
        return {}
    matrix = coded.code.encoder.matrix.detach().cpu()  # (N, K) float64
    last = num_queries - 1
    rows = torch.cat([matrix[:, :last], matrix[:, last:].sum(dim=1, keepdim=True)], dim=1)  # what slot j mixes
    only_padding = (matrix[:, :num_queries] == 0).all(dim=1).tolist()
    sent = [j for j, padding in enumerate(only_padding) if not padding]
    twins: dict[int, list[int]] = {}
    for slot in [j for j, padding in enumerate(only_padding) if padding]:
        same = [j for j in sent if torch.equal(rows[j], rows[slot])]
        if same:
            twins[slot] = same
        else:
            sent.append(slot)
    return twins


def _check_batches(batches: object, num_queries: int) -> None:
    """Raise a one-line error naming ``batches`` unless it is a non-empty list of :class:`Batch` es whose indices are
    ``0 .. len - 1`` (each once: batches in flight and ``delays`` rows are looked up by index) and whose queries are
    distinct indices in ``[0, num_queries)``, each in one batch, with a finite ``formed_s``."""
    if not isinstance(batches, (list, tuple)) or not all(isinstance(batch, Batch) for batch in batches):
        raise TypeError("batches must be a list of torchgcc.serving.Batch (form_batches(...) makes one)")
    if not batches:
        raise ValueError("batches is empty: there is nothing to serve")
    indices = sorted(check_integer("batches[].index", batch.index) for batch in batches)
    if indices != list(range(len(batches))):
        repeated = sorted({i for i in indices if indices.count(i) > 1})
        raise ValueError(
            f"batches must have the indices 0..{len(batches) - 1}, each once (they key the batches in flight and the "
            f"rows of delays), got {'repeated ' + str(repeated) if repeated else indices}"
        )
    seen: set[int] = set()
    for batch in batches:
        name = f"batches[{batch.index}]"
        check_real(f"{name}.formed_s", batch.formed_s)
        if len(batch.queries) == 0:
            raise ValueError(f"{name}.queries is empty; a batch holds at least one query")
        for query in batch.queries:
            query = check_integer(f"{name}.queries", query, minimum=0, maximum=num_queries - 1)
            if query in seen:
                raise ValueError(f"{name}.queries: query {query} is already in another batch (or twice in this one)")
            seen.add(query)


def serve_open_loop(
    coded: CodedModule,
    queries: torch.Tensor,
    arrival_s: torch.Tensor,
    batches: list[Batch],
    *,
    delays: Optional[torch.Tensor] = None,
    backup_delays: Optional[torch.Tensor] = None,
    hedge: Optional[HedgePolicy] = None,
    on_batch: Optional[Callable[[int, int], None]] = None,
) -> ServingRun:
    """Serve ``queries`` ``(Q, *in)`` arriving at ``arrival_s`` ``(Q,)`` seconds after the start, in ``batches``.

    Args:
        coded: the code, the engine (``coded.workers``, whose N must be the code's) and the wait
            (``coded.wait``: its S, or its controller's, ``deadline_s`` after dispatch, ``watch_s`` (see above),
            and ``timeout_s``, after which a batch that still cannot be decoded is given up and its queries
            reported missing, so a hung worker cannot stall the run).
        delays: ``(num_batches, N)`` seconds each worker stays busy after the model ran on that batch's primary
            task (injected slowdowns; the same tensor for every code gives every code the same delays).
        backup_delays: ``(num_batches, N)`` the same for backup tasks (default: none).
        hedge: send backups after ``hedge.threshold_s()`` (see :mod:`torchgcc.serving.hedging`); None: never.
        on_batch: called with ``(batches decoded, total)`` after every decode (progress).
    """
    pool, code, wait = coded.workers, coded.code, coded.wait
    if pool is None:
        raise ValueError("serve_open_loop needs a CodedModule with workers=... (the engine that serves the batches)")
    num_workers = pool.num_workers
    if not isinstance(queries, torch.Tensor):
        raise TypeError(
            f"queries must be a torch.Tensor (Q, *in), got {type(queries).__name__}; convert it with torch.as_tensor"
        )
    arrival = check_finite(arrival_s, "arrival_s")
    if arrival.ndim != 1 or len(arrival) != len(queries):
        raise ValueError(
            f"arrival_s must have shape (Q,) = ({len(queries)},), one time per query, got {tuple(arrival.shape)}"
        )
    _check_batches(batches, len(queries))
    for name, table in (("delays", delays), ("backup_delays", backup_delays)):
        if table is not None and tuple(real_tensor(table, name).shape) != (len(batches), num_workers):
            raise ValueError(f"{name} must have shape (num_batches, N) = ({len(batches)}, {num_workers})")
    start = pool.now()
    latency = torch.full((len(queries),), math.nan, dtype=torch.float64)
    outputs: Optional[torch.Tensor] = None
    records: list[BatchRecord] = []
    missing: list[int] = []
    in_flight: dict[int, _InFlight] = {}
    watching: dict[int, _InFlight] = {}  # decoded, recording late results until the wait's watch_s
    load = [0] * num_workers
    lost: set[int] = set(pool.lost_workers())  # lost before this run too
    counts = {"tasks": 0, "backups": 0}
    rotation = [0]  # worker of slot 0 in the next batch
    padding_of: dict[int, dict[int, list[int]]] = {}  # batch size -> its padding slots (one host read per size)

    def submit(state: _InFlight, slot: int, worker: int, copy: int) -> None:
        table = delays if copy == PRIMARY else backup_delays
        delay = 0.0 if table is None else float(table[state.batch.index, worker])
        key = (state.batch.index, slot, copy)
        pool.submit([Task(key, worker, state.coded.coded[:, slot], delay)])
        state.outstanding[key] = worker
        state.workers_of.setdefault(slot, set()).add(worker)
        load[worker] += 1
        counts["tasks"] += 1
        counts["backups"] += copy == BACKUP

    def least_loaded(exclude: AbstractSet[int]) -> Optional[int]:
        live = [w for w in range(num_workers) if w not in lost and w not in exclude]
        return min(live, key=lambda w: (load[w], w)) if live else None

    def covered(state: _InFlight, slots) -> list[bool]:
        """``(N,)`` the ``slots`` and the padding slots that copy one of them (:func:`padding_slots`)."""
        row = [False] * num_workers
        for slot in slots:
            row[slot] = True
        for slot, twins in state.padding.items():
            row[slot] = any(row[twin] for twin in twins)
        return row

    def slot_mask(state: _InFlight, slots) -> torch.Tensor:
        """``(B, N)`` bool over the ``slots`` and the padding slots that copy one of them."""
        return torch.tensor(covered(state, slots)).expand(state.coded.coded.shape[0], -1)

    def with_padding(state: _InFlight) -> dict[int, ModelOutput]:
        """The slots' results, with each padding slot holding the result of the first of its twins that arrived."""
        results = dict(state.results)
        for slot, twins in state.padding.items():
            arrived = [twin for twin in twins if twin in state.results]
            if arrived:
                results[slot] = state.results[arrived[0]]
        return results

    def resend_needed(state: _InFlight, avoid: frozenset[int] = frozenset()) -> None:
        """Send the slots without a live copy to other workers (the least loaded, not in ``avoid`` when another is
        live) if the batch cannot decode without them."""
        waiting = {key[1] for key in state.outstanding}
        if bool(code.decodable(slot_mask(state, set(state.results) | waiting)).all()):
            return
        for slot in sorted(set(range(num_workers)) - set(state.padding) - set(state.results) - waiting):
            worker = least_loaded(avoid)
            worker = least_loaded(frozenset()) if worker is None else worker
            if worker is not None:
                submit(state, slot, worker, PRIMARY)

    def dispatch(batch: Batch) -> None:
        now = pool.now()
        threshold = math.inf if hedge is None else hedge.threshold_s()
        state = _InFlight(
            batch,
            coded.encode(queries[batch.queries]),
            dispatched_s=now,
            hedge_at_s=now + threshold,
            deadline_at_s=wait.deadline_at(now),
            give_up_at_s=wait.timeout_at(now),
            stragglers=wait.stragglers(),
        )
        in_flight[batch.index] = state
        size = len(batch.queries)
        if size not in padding_of:
            padding_of[size] = padding_slots(coded, size)
        state.padding = padding_of[size]
        needed = sorted(set(range(num_workers)) - set(state.padding))
        offset = rotation[0]
        rotation[0] = (offset + len(needed)) % num_workers  # the next batch starts where this one ended
        for slot in needed:
            worker = (slot + offset) % num_workers
            if worker not in lost:
                submit(state, slot, worker, PRIMARY)
        resend_needed(state)
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

    def cancel(state: _InFlight, keys: list[tuple]) -> None:
        pool.cancel(keys)
        for key in keys:
            load[state.outstanding.pop(key)] -= 1

    def drop(state: _InFlight) -> None:
        cancel(state, list(state.outstanding))
        in_flight.pop(state.batch.index, None)
        watching.pop(state.batch.index, None)

    def stop_watching(state: _InFlight) -> None:
        """Tell an adaptive wait the decoded batch's ``(N,)`` arrival seconds, as :func:`~torchgcc.workers.run_round`
        does after each round (a padding slot arrives with the first of its twins), and cancel what still runs."""
        times = [state.arrival.get(slot, math.inf) for slot in range(num_workers)]
        for slot, twins in state.padding.items():
            times[slot] = min(times[twin] for twin in twins)
        watched = state.waited_s if wait.watch_s is None else max(state.waited_s, wait.watch_s)
        wait.observe(torch.tensor(times, dtype=torch.float64), state.stragglers, watched)
        drop(state)

    def finish(state: _InFlight, decodable: bool) -> None:
        nonlocal outputs
        batch = state.batch
        index = torch.tensor(batch.queries)
        used: list[int] = []
        if decodable:
            groups = state.coded.coded.shape[0]
            results = stack_results(with_padding(state), groups, num_workers)
            mask = slot_mask(state, state.results)
            decoded = coded.decode(results, mask, state.coded)
            if not isinstance(decoded, torch.Tensor):
                raise TypeError("serve_open_loop serves models that return one tensor")
            if outputs is None:
                outputs = decoded.new_full((len(queries), *decoded.shape[1:]), math.nan)
            outputs[index] = decoded
            lost_queries = torch.isnan(decoded).flatten(1).any(dim=1).nonzero().flatten().tolist()
            assert coded.last_mask is not None  # decode sets it: the mask it used, less non-finite results
            used = coded.last_mask.any(dim=0).nonzero().flatten().tolist()
        else:  # given up: nothing decodable arrived in time
            lost_queries = list(range(len(batch.queries)))
        done = pool.now()
        latency[index] = done - start - arrival[index]
        gone = [batch.queries[i] for i in lost_queries]
        missing.extend(gone)
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
        if not decodable:
            drop(state)  # no observation: run_round raises without one
        else:
            state.waited_s = done - state.dispatched_s
            cancel(state, [key for key in state.outstanding if key[1] in state.results])  # a slot's other copy
            if wait.watch_s is not None and state.outstanding and done < state.dispatched_s + wait.watch_s:
                state.watch_until_s = state.dispatched_s + wait.watch_s  # its stragglers run on until then
                del in_flight[batch.index]
                watching[batch.index] = state
            else:
                stop_watching(state)
        if on_batch is not None:
            on_batch(len(records), len(batches))

    def check(state: _InFlight) -> None:
        """Decode ``state`` if its wait is over; give it up if it can no longer decode."""
        now = pool.now()
        done = covered(state, state.results)
        waiting = covered(state, [slot for _, slot, _ in state.outstanding if slot not in state.results])
        arrived = torch.tensor(done)
        pending = torch.tensor([w and not d for w, d in zip(waiting, done)])
        over = state.results and wait.is_over(
            code,
            arrived,
            pending,
            started_s=state.dispatched_s,
            now_s=now,
            num_stragglers=state.stragglers,
            num_groups=state.coded.coded.shape[0],
        )
        if over:
            finish(state, True)
        elif not state.outstanding or now >= state.give_up_at_s:
            finish(state, False)

    def watched(state: _InFlight) -> bool:
        """Whether ``state`` is a decoded batch whose late results are being recorded (the watch ends with its last
        task)."""
        if state.batch.index not in watching:
            return False
        if not state.outstanding:
            stop_watching(state)
        return True

    def take(completion: Completion) -> Optional[_InFlight]:
        """The batch whose task ``completion`` ended, that task off its books (None: a batch already done, a task
        that finished before its cancellation reached it)."""
        index = cast("tuple[int, int, int]", completion.key)[0]  # this loop's task keys
        state = in_flight.get(index, watching.get(index))
        if state is None or completion.key not in state.outstanding:
            return None
        del state.outstanding[completion.key]
        load[completion.worker] -= 1
        return state

    def failed(completion: Completion) -> Optional[_InFlight]:
        """A task that failed on a worker that lives on (its model raised, on Ray): that copy is gone, as a
        straggler's; a slot the batch needs is sent again, to another worker when one is live."""
        state = take(completion)
        if state is None or watched(state):
            return None
        resend_needed(state, avoid=frozenset({completion.worker}))
        return state

    def receive(completion: Completion) -> Optional[_InFlight]:
        """Record ``completion``; the in-flight batch it brought a result to (checked once the engine's whole hand-over
        is in, as :func:`~torchgcc.workers.run_round` does: results that came together are decoded together)."""
        if completion.error is not None and completion.key is not None and completion.worker not in pool.lost_workers():
            return failed(completion)
        if completion.error is not None:  # the worker is gone (Completion.error): every task it held with it
            lost.add(completion.worker)
            for waiting in [*in_flight.values(), *watching.values()]:
                for key, worker in list(waiting.outstanding.items()):
                    if worker == completion.worker:
                        del waiting.outstanding[key]
                        load[worker] -= 1
                if watched(waiting):
                    continue
                resend_needed(waiting)
                check(waiting)
            return None
        state = take(completion)
        if state is None:
            return None
        _, slot, copy = cast("tuple[int, int, int]", completion.key)
        if copy == PRIMARY and hedge is not None:
            hedge.observe(completion.finished_s - state.dispatched_s)
        if completion.output is not None:
            state.arrival.setdefault(slot, completion.finished_s - state.dispatched_s)
        if watched(state):
            return None
        if slot not in state.results and completion.output is not None:
            state.results[slot] = completion.output
            state.compute[slot] = completion.compute_s
            state.backups_won += copy == BACKUP
        return state

    next_batch = 0
    while next_batch < len(batches) or in_flight or watching:
        now = pool.now()
        for state in [state for state in watching.values() if now >= state.watch_until_s]:
            stop_watching(state)
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
        timers += [state.watch_until_s for state in watching.values()]
        until = min(timers, default=math.inf)
        if not in_flight and not watching and next_batch >= len(batches):
            break
        touched = {id(state): state for state in map(receive, pool.wait(until)) if state is not None}
        for state in touched.values():
            if state.batch.index in in_flight:  # not finished meanwhile (a lost worker's check)
                check(state)
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
