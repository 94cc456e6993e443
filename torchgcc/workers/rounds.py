"""One round on an engine: send a batch's N coded inputs to N workers, collect results until the wait is over.

This is the step loop of every engine (local processes, Ray actors, the ranks of a torchrun job, a virtual clock):
the engine-specific part is only :meth:`Workers.submit` and :meth:`Workers.wait`. The results come back as
``(B, N, *out)`` (a tuple, list or dict of such tensors for a model with several outputs), zeros where nothing
arrived, with the ``(B, N)`` mask of the results to decode from.

A worker's result must be a model output (:func:`~torchgcc.model_output.flatten_output`: a tensor or a container of
them, one row per input row); one that is not (``None``, an integer tensor, the wrong number of rows) raises at once,
naming the worker, as the same model raises in process. A well-formed result whose trailing shapes, dtypes or devices
differ from those most of the round's results share is a worker fault (see :func:`stack_results`).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import math
from dataclasses import dataclass
from typing import Any, Optional

import torch

from torchgcc.checks import check_arrived, check_mask
from torchgcc.model_output import ModelOutput, OutputSpec, flatten_output
from torchgcc.workers.protocol import Task, Workers
from torchgcc.workers.wait import WaitPolicy

__all__ = ["Round", "TooFewWorkersError", "run_round", "stack_results"]

_ROUNDS = itertools.count()  # task keys are (round, worker): unique in this process

logger = logging.getLogger("torchgcc.workers")


class TooFewWorkersError(RuntimeError):
    """A round cannot decode: too few workers are left, or too few results came by the policy's timeout."""


@dataclass
class Round:
    """What one round left.

    Attributes:
        results: ``(B, N, *out)`` every worker's result (zeros where none arrived), or a tuple, list or dict of them.
        mask: ``(B, N)`` bool, the results to decode from (:meth:`WaitPolicy.usable`).
        arrival_s: ``(N,)`` float64 seconds from the start to each worker's result, ``inf`` if not seen by
            ``watched_s``.
        compute_s: ``(N,)`` float64 seconds each worker spent in the model (its own report; NaN without a result).
        num_stragglers: the S the round waited with (None: until decodable).
        waited_s: seconds from the start (before submitting) to the end of the wait.
        watched_s: seconds after the start up to which ``arrival_s`` is complete (``waited_s``, or the policy's
            ``watch_s`` when later).
        lost_workers: the workers the engine reported lost by the end of the round.
    """

    results: ModelOutput
    mask: torch.Tensor
    arrival_s: torch.Tensor
    compute_s: torch.Tensor
    num_stragglers: Optional[int]
    waited_s: float
    watched_s: float
    lost_workers: list[int]


def run_round(
    workers: Workers,
    coded: torch.Tensor,
    *,
    code: Any,
    wait: WaitPolicy,
    required: Optional[torch.Tensor] = None,
) -> Round:
    """Run ``coded`` ``(B, N, *in)`` on the N ``workers`` (worker ``n`` gets ``coded[:, n]``) until ``wait`` says
    the ``code`` can decode; cancel what is still running.

    Args:
        workers: the engine; its ``num_workers`` must be N.
        coded: the coded inputs.
        code: the code that will decode (its ``decodable`` and ``min_arrived`` decide the wait).
        wait: the rule that ends the wait.
        required: ``(B, N)`` bool, the results to decode from if they arrive (simulated stragglers), or None.

    A worker whose task failed (a :class:`~torchgcc.workers.protocol.Completion` with ``error``) or whose result
    disagrees with the others' (:func:`stack_results`; logged at WARNING on ``torchgcc.workers``) is a straggler
    for this round: the round decodes from the rest when the code can.

    Raises:
        TooFewWorkersError: the round could not decode (too few live workers, or nothing decodable by
            ``wait.timeout_s``); it names the workers still pending, lost, and (when any) failed this round. The round's
            tasks still running are cancelled whenever it raises.
        TypeError, ValueError: a worker's result is not a model output (naming the worker), the results have no
            majority shape, or a ``required`` row holds fewer than ``code.min_arrived`` workers (before any work
            is sent).
    """
    groups, num_workers = coded.shape[:2]
    if workers.num_workers != num_workers:
        raise ValueError(f"the coded inputs are for N={num_workers} workers, but the engine has {workers.num_workers}")
    if required is not None:
        _check_required(required, code, groups, num_workers)
    stragglers = wait.stragglers()
    ident = next(_ROUNDS)
    start = workers.now()
    lost = workers.lost_workers()
    pending = torch.tensor([n not in lost for n in range(num_workers)])
    arrived = torch.zeros(num_workers, dtype=torch.bool)
    received: dict[int, tuple[OutputSpec, list[torch.Tensor]]] = {}  # every kept result, flattened
    shapes: dict[int, tuple] = {}  # ... and its trailing shapes, dtypes and devices
    failed: dict[int, str] = {}  # worker -> why its task failed this round
    compute = torch.full((num_workers,), math.nan, dtype=torch.float64)
    arrival = torch.full((num_workers,), math.inf, dtype=torch.float64)

    def receive(until: float, *, keep: bool) -> None:
        for done in workers.wait(until):
            ours = isinstance(done.key, tuple) and done.key[0] == ident
            if done.error is not None:
                if ours or done.key is None or done.worker in workers.lost_workers():
                    pending[done.worker] = False
                    failed.setdefault(done.worker, done.error)
            elif ours and bool(pending[done.worker]):
                pending[done.worker] = False
                arrival[done.worker] = done.finished_s - start
                if keep:
                    try:
                        received[done.worker] = flatten_output(done.output, groups)
                    except (TypeError, ValueError) as error:
                        raise type(error)(f"worker {done.worker}'s result: {error}") from None
                    shapes[done.worker] = _shapes(received[done.worker][1])
                    compute[done.worker] = done.compute_s
        if keep:  # the results the majority agrees on (none while tied)
            agreed = _majority(shapes)
            for worker, shape in shapes.items():
                arrived[worker] = shape == agreed

    deadline, timeout = wait.deadline_at(start), wait.timeout_at(start)
    workers.submit([Task((ident, n), n, coded[:, n]) for n in range(num_workers) if bool(pending[n])])
    try:
        while True:
            now = workers.now()
            if wait.is_over(
                code,
                arrived,
                pending,
                started_s=start,
                now_s=now,
                num_stragglers=stragglers,
                required=required,
                num_groups=groups,
            ):
                break
            if not bool(pending.any()) or now >= timeout:
                if len(set(shapes.values())) > 1 and _majority(shapes) is None:
                    raise ValueError(_disagreement(shapes))
                for worker, shape in shapes.items():
                    if not bool(arrived[worker]):
                        failed[worker] = f"result of {_describe(shape)}, not the majority's"
                gone = workers.lost_workers()
                failures = {worker: why for worker, why in sorted(failed.items()) if worker not in gone}
                raise TooFewWorkersError(
                    f"{int(arrived.sum())} of {num_workers} results after {now - start:.1f} s cannot be decoded (at "
                    f"least {code.min_arrived} per group needed; still pending: "
                    f"{pending.nonzero().flatten().tolist()}, lost: {sorted(gone)}"
                    + (f", failed this round: {failures}" if failures else "")
                    + ")"
                )
            receive(deadline if now < deadline < timeout else timeout, keep=True)  # the next timer
    except BaseException:
        with contextlib.suppress(Exception):  # the round's error is the one to see
            workers.cancel([(ident, n) for n in pending.nonzero().flatten().tolist()])
        raise
    waited = workers.now() - start
    agreed = _majority(shapes)
    for worker, shape in shapes.items():
        if shape != agreed:  # a worker fault: not used, not counted as an arrival
            logger.warning(
                "worker %d returned %s where %d other worker(s) returned %s: a worker fault, left out of this round",
                worker,
                _describe(shape),
                sum(s == agreed for s in shapes.values()),
                _describe(agreed),
            )
            del received[worker]
            arrival[worker], compute[worker] = math.inf, math.nan
    if wait.watch_s is not None:  # late results: only when they came (what an adaptive controller learns from)
        while bool(pending.any()) and workers.now() < start + wait.watch_s:
            receive(start + wait.watch_s, keep=False)
    workers.cancel([(ident, n) for n in pending.nonzero().flatten().tolist()])
    # complete up to watch_s: the loop ran until then, or every live worker's result came before it
    watched = max(waited, wait.watch_s) if wait.watch_s is not None else waited
    wait.observe(arrival, stragglers, watched)
    return Round(
        results=_stack(received, groups, num_workers),
        mask=wait.usable(code, arrived, required, groups),
        arrival_s=arrival,
        compute_s=compute,
        num_stragglers=stragglers,
        waited_s=waited,
        watched_s=watched,
        lost_workers=sorted(workers.lost_workers()),
    )


def _check_required(required: object, code: Any, groups: int, num_workers: int) -> None:
    """A one-line error unless ``required`` is a ``(B, N)`` bool mask whose every row names ``code.min_arrived``
    workers (the in-process decoder's check; on workers such a row would only end at the timeout)."""
    try:
        check_mask(required, num_workers, groups)
    except (TypeError, ValueError) as error:
        raise type(error)(f"required: {error}") from None
    assert isinstance(required, torch.Tensor)
    try:
        check_arrived(required, code.min_arrived)
    except ValueError as error:
        raise ValueError(f"required: {error}") from None


def _shapes(tensors: list[torch.Tensor]) -> tuple:
    """What the results of one model must share: each tensor's trailing shape, dtype and device."""
    return tuple((tuple(t.shape[1:]), t.dtype, t.device) for t in tensors)


def _describe(shapes: Optional[tuple]) -> str:
    """``(5,) float32 on cpu`` (per tensor, comma-separated)."""
    return ", ".join(
        f"{shape} {str(dtype).removeprefix('torch.')} on {device}" for shape, dtype, device in shapes or ()
    )


def _majority(shapes: dict[int, tuple]) -> Optional[tuple]:
    """The shapes more workers' results have than any other (None: no result, or a tie)."""
    ranked = collections.Counter(shapes.values()).most_common(2)
    if not ranked or (len(ranked) == 2 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]


def _disagreement(shapes: dict[int, tuple]) -> str:
    by_shape: dict[tuple, list[int]] = collections.defaultdict(list)
    for worker, shape in sorted(shapes.items()):
        by_shape[shape].append(worker)
    listed = "; ".join(
        f"worker{'s' if len(w) > 1 else ''} {', '.join(map(str, w))} returned {_describe(s)}"
        for s, w in by_shape.items()
    )
    return f"the workers' results disagree and no shape has a majority: {listed} (every worker runs one model)"


def stack_results(outputs: dict[int, ModelOutput], groups: int, num_workers: int) -> ModelOutput:
    """Every worker's ``(B, *out)`` output (or container of them; at least one) stacked into ``(B, N, *out)``,
    zeros for the workers without one.

    Every output must have one container (the same keys) and, tensor by tensor, one trailing shape, dtype and
    device; else a ``ValueError`` names the workers and what each returned (no raw ``torch.stack`` error). Only
    metadata is compared: no host sync. :func:`run_round` does not get there: it leaves out, as a worker fault,
    each result that differs from what most of the round's results share (and raises this error when no shape
    has a majority)."""
    return _stack({worker: flatten_output(output, groups) for worker, output in outputs.items()}, groups, num_workers)


def _stack(flat: dict[int, tuple[OutputSpec, list[torch.Tensor]]], groups: int, num_workers: int) -> ModelOutput:
    """:func:`stack_results` of flattened outputs."""
    spec, first = next(iter(flat.values()))
    for worker, (this, _) in flat.items():
        if this != spec:
            raise ValueError(f"worker {worker} returned {this}, another worker {spec}: every worker runs one model")
    shapes = {worker: _shapes(tensors) for worker, (_, tensors) in flat.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(_disagreement(shapes).replace(" and no shape has a majority", ""))
    stacked = []
    for i, like in enumerate(first):
        zeros = like.new_zeros(like.shape)
        stacked.append(torch.stack([flat[n][1][i] if n in flat else zeros for n in range(num_workers)], dim=1))
    return spec.build(stacked)
