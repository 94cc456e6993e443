"""One round on an engine: send a batch's N coded inputs to N workers, collect results until the wait is over.

This is the step loop of every engine (local processes, Ray actors, the ranks of a torchrun job, a virtual clock):
the engine-specific part is only :meth:`Workers.submit` and :meth:`Workers.wait`. The results come back as
``(B, N, *out)`` (a tuple, list or dict of such tensors for a model with several outputs), zeros where nothing
arrived, with the ``(B, N)`` mask of the results to decode from.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Optional

import torch

from torchgcc.model_output import ModelOutput, flatten_output
from torchgcc.workers.protocol import Task, Workers
from torchgcc.workers.wait import WaitPolicy

__all__ = ["Round", "TooFewWorkersError", "run_round", "stack_results"]

_ROUNDS = itertools.count()  # task keys are (round, worker): unique in this process


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

    Raises:
        TooFewWorkersError: the round could not decode (too few live workers, or nothing decodable by
            ``wait.timeout_s``).
    """
    groups, num_workers = coded.shape[:2]
    if workers.num_workers != num_workers:
        raise ValueError(f"the coded inputs are for N={num_workers} workers, but the engine has {workers.num_workers}")
    if required is not None and tuple(required.shape) != (groups, num_workers):
        raise ValueError(f"required must have shape (B, N) = {(groups, num_workers)}, got {tuple(required.shape)}")
    stragglers = wait.stragglers()
    ident = next(_ROUNDS)
    start = workers.now()
    lost = workers.lost_workers()
    pending = torch.tensor([n not in lost for n in range(num_workers)])
    workers.submit([Task((ident, n), n, coded[:, n]) for n in range(num_workers) if bool(pending[n])])
    arrived = torch.zeros(num_workers, dtype=torch.bool)
    outputs: dict[int, ModelOutput] = {}
    compute = torch.full((num_workers,), math.nan, dtype=torch.float64)
    arrival = torch.full((num_workers,), math.inf, dtype=torch.float64)

    def receive(until: float, *, keep: bool) -> None:
        for done in workers.wait(until):
            if done.error is not None:
                pending[done.worker] = False
            elif (
                isinstance(done.key, tuple)
                and done.key[0] == ident
                and bool(pending[done.worker])
                and done.output is not None
            ):
                pending[done.worker] = False
                arrival[done.worker] = done.finished_s - start
                if keep:
                    arrived[done.worker] = True
                    outputs[done.worker], compute[done.worker] = done.output, done.compute_s

    deadline, timeout = wait.deadline_at(start), wait.timeout_at(start)
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
            raise TooFewWorkersError(
                f"{int(arrived.sum())} of {num_workers} results after {now - start:.1f} s cannot be decoded (at "
                f"least {code.min_arrived} per group needed; still pending: {pending.nonzero().flatten().tolist()}, "
                f"lost: {sorted(workers.lost_workers())})"
            )
        receive(deadline if now < deadline < timeout else timeout, keep=True)  # the next timer
    waited = workers.now() - start
    if wait.watch_s is not None:  # late results: only when they came (what an adaptive controller learns from)
        while bool(pending.any()) and workers.now() < start + wait.watch_s:
            receive(start + wait.watch_s, keep=False)
    workers.cancel([(ident, n) for n in pending.nonzero().flatten().tolist()])
    # complete up to watch_s: the loop ran until then, or every live worker's result came before it
    watched = max(waited, wait.watch_s) if wait.watch_s is not None else waited
    wait.observe(arrival, stragglers, watched)
    return Round(
        results=stack_results(outputs, groups, num_workers),
        mask=wait.usable(code, arrived, required, groups),
        arrival_s=arrival,
        compute_s=compute,
        num_stragglers=stragglers,
        waited_s=waited,
        watched_s=watched,
        lost_workers=sorted(workers.lost_workers()),
    )


def stack_results(outputs: dict[int, ModelOutput], groups: int, num_workers: int) -> ModelOutput:
    """Every worker's ``(B, *out)`` output (or container of them; at least one) stacked into ``(B, N, *out)``,
    zeros for the workers without one."""
    flat = {worker: flatten_output(output, groups) for worker, output in outputs.items()}
    spec, first = next(iter(flat.values()))
    for worker, (this, _) in flat.items():
        if this != spec:
            raise ValueError(f"worker {worker} returned {this}, another worker {spec}: every worker runs one model")
    stacked = []
    for i, like in enumerate(first):
        zeros = like.new_zeros(like.shape)
        stacked.append(torch.stack([flat[n][1][i] if n in flat else zeros for n in range(num_workers)], dim=1))
    return spec.build(stacked)
