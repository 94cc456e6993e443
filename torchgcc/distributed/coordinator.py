"""Rank 0: encode a batch, post the coded inputs, collect results until the step's rule is met, decode."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import torch

from torchgcc.distributed.arrival import StepPlan
from torchgcc.distributed.faults import FaultPlan
from torchgcc.distributed.heartbeat import LivenessMonitor
from torchgcc.distributed.placement import place_workers
from torchgcc.distributed.schemes import CodedScheme, UncodedScheme
from torchgcc.distributed.transport import Channel

__all__ = ["Coordinator", "StepResult", "TooFewWorkersError"]


class TooFewWorkersError(RuntimeError):
    """Fewer results than the decoder needs can still arrive (workers lost, or the step timed out)."""


@dataclass
class StepResult:
    """The outcome of one coded step.

    Attributes:
        output: ``(M, *out)`` decoded outputs aligned with the inputs.
        mask: ``(B, N)`` bool mask the decoder used (True = result used).
        arrived: sorted worker indices whose results were used (in at least one group).
        latency_s: seconds from the start of the step (before encoding) to the decoded output.
        delays: ``(N,)`` injected delays of this step, or None.
        lost_workers: workers on ranks declared lost so far (permanent stragglers).
    """

    output: torch.Tensor
    mask: torch.Tensor
    arrived: list[int]
    latency_s: float
    delays: torch.Tensor | None
    lost_workers: list[int] = field(default_factory=list)


class Coordinator:
    """Drive the coded workers hosted on ranks ``1 .. P-1`` from rank 0.

    Args:
        channel: rank 0's :class:`Channel`.
        num_workers: N, the number of coded workers.
        placement: how workers are spread over ranks (see :mod:`torchgcc.distributed.placement`).
        faults: the fault plan; its slow workers' extra delays are added to every step.
        heartbeat_timeout_s: a rank silent for this long is lost (its workers become permanent stragglers).
        step_timeout_s: the longest a step may wait for the decoder's minimum number of results.
        start_timeout_s: the longest to wait for every worker rank to report ready.
        poll_s: pause between polls of the store while waiting for results.
    """

    def __init__(
        self,
        channel: Channel,
        *,
        num_workers: int,
        placement: str = "round_robin",
        faults: FaultPlan = FaultPlan(),
        heartbeat_timeout_s: float = 2.0,
        step_timeout_s: float = 30.0,
        start_timeout_s: float = 120.0,
        poll_s: float = 0.0005,
    ) -> None:
        if channel.rank != 0:
            raise RuntimeError(f"the coordinator runs on rank 0, not rank {channel.rank}")
        self.channel = channel
        self.num_workers = num_workers
        self.assignment = place_workers(num_workers=num_workers, world_size=channel.world_size, strategy=placement)
        self.rank_of = {worker: rank for rank, workers in self.assignment.items() for worker in workers}
        self.extra_delays = faults.extra_delays(num_workers)
        self.step_timeout_s = step_timeout_s
        self.poll_s = poll_s
        self._round = 0
        self._unread: list[tuple[int, int]] = []
        self._wait_ready(start_timeout_s)
        self.monitor = LivenessMonitor(channel, list(self.assignment), timeout_s=heartbeat_timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        start = time.monotonic()
        while self.channel.count("ready") < len(self.assignment):
            if time.monotonic() - start > timeout_s:
                raise RuntimeError(
                    f"only {self.channel.count('ready')} of {len(self.assignment)} worker ranks were ready "
                    f"after {timeout_s:.0f} s"
                )
            time.sleep(0.01)

    @property
    def lost_workers(self) -> list[int]:
        return sorted(w for rank in self.monitor.lost for w in self.assignment[rank])

    def step(
        self,
        scheme: CodedScheme | UncodedScheme,
        x: torch.Tensor,
        plan: StepPlan,
        *,
        step: int,
        deadline_s: float | None = None,
    ) -> StepResult:
        """Run one step of ``scheme`` on the batch ``x`` ``(M, *in)``.

        The wait ends when the plan's rule is met (its ``required`` workers arrived, or ``quorum`` results) and
        the scheme has at least ``min_arrived`` results, or at ``deadline_s`` after the start if by then at least
        ``min_arrived`` results arrived. Workers on lost ranks are not waited for.

        Raises:
            TooFewWorkersError: fewer live workers than ``scheme.min_arrived``, or still too few results after
                ``step_timeout_s``.
        """
        start = time.monotonic()
        round_ = self._round
        self._round += 1
        self.channel.set_latest_round(round_)
        self._drop_unread(before=round_ - 1)
        delays = self._post_work(round_, step, scheme.encode(x), plan.delays)
        deadline = float("inf") if deadline_s is None else start + deadline_s
        results = self._collect(round_, step, scheme, plan, start=start, deadline=deadline)

        arrived = torch.zeros(self.num_workers, dtype=torch.bool)
        arrived[list(results)] = True
        num_groups = scheme.num_groups(x.shape[0])
        mask = arrived.expand(num_groups, -1) if plan.required is None else plan.required & arrived
        first = next(iter(results.values()))
        stacked = first.new_zeros(self.num_workers, *first.shape)
        for worker, output in results.items():
            stacked[worker] = output
        output = scheme.decode(stacked, mask, x.shape[0])
        return StepResult(
            output=output,
            mask=mask.clone(),
            arrived=mask.any(0).nonzero().flatten().tolist(),
            latency_s=time.monotonic() - start,
            delays=delays,
            lost_workers=self.lost_workers,
        )

    def _post_work(
        self, round_: int, step: int, payloads: torch.Tensor, plan_delays: torch.Tensor | None
    ) -> torch.Tensor | None:
        """Post each live rank its workers' payloads ``(N, b, *in)`` and delays; returns the ``(N,)`` delays."""
        delays = None if plan_delays is None and not self.extra_delays.any() else self.extra_delays.clone()
        if plan_delays is not None:
            delays += plan_delays
        for rank, workers in self.assignment.items():
            if rank not in self.monitor.lost:
                work = {
                    "step": step,
                    "workers": workers,
                    "inputs": payloads[workers],
                    "delays": None if delays is None else delays[workers],
                }
                self.channel.post_work(rank, round_, work)
        return delays

    def _collect(
        self,
        round_: int,
        step: int,
        scheme: CodedScheme | UncodedScheme,
        plan: StepPlan,
        *,
        start: float,
        deadline: float,
    ) -> dict[int, torch.Tensor]:
        """Poll for the results of ``round_`` until the step's rule is met; returns ``{worker: (b, *out)}``."""
        results: dict[int, torch.Tensor] = {}
        pending = {w for w in range(self.num_workers) if self.rank_of[w] not in self.monitor.lost}
        required = None if plan.required is None else set(plan.required.any(0).nonzero().flatten().tolist())
        while True:
            for worker in sorted(pending):
                if self.channel.has_result(round_, worker):
                    results[worker] = self.channel.take_result(round_, worker)
                    pending.discard(worker)
            pending -= self._report_lost(step)
            live = self.num_workers - len(self.lost_workers)
            if live < scheme.min_arrived:
                raise TooFewWorkersError(
                    f"step {step}: only {live} of {self.num_workers} workers remain (lost: {self.lost_workers}); "
                    f"{scheme.name} needs at least {scheme.min_arrived}"
                )
            if required is None:
                usable, rule_met = len(results), len(results) >= min(plan.quorum, live)
            else:
                usable, rule_met = len(required & results.keys()), not (required & pending)
            now = time.monotonic()
            if usable >= scheme.min_arrived and (rule_met or now >= deadline or not pending):
                break
            if now - start > self.step_timeout_s or not pending:
                raise TooFewWorkersError(
                    f"step {step}: {usable} usable results after {now - start:.1f} s, {scheme.name} needs "
                    f"{scheme.min_arrived} (pending workers {sorted(pending)}, lost {self.lost_workers})"
                )
            time.sleep(self.poll_s)
        self._unread.extend((round_, worker) for worker in pending)
        return results

    def _report_lost(self, step: int) -> set[int]:
        """Workers of ranks declared lost by this poll (reported on stderr)."""
        newly_lost = self.monitor.poll()
        gone = {w for rank in newly_lost for w in self.assignment[rank]}
        if gone:
            print(
                f"[torchgcc] step {step}: lost rank(s) {sorted(newly_lost)} hosting workers {sorted(gone)}; "
                "they are permanent stragglers from now on",
                file=sys.stderr,
                flush=True,
            )
        return gone

    def _drop_unread(self, *, before: int) -> None:
        """Delete results of rounds older than ``before`` that arrived too late to be read."""
        keep = []
        for round_, worker in self._unread:
            if round_ < before:
                self.channel.drop_result(round_, worker)
            else:
                keep.append((round_, worker))
        self._unread = keep

    def close(self, *, grace_s: float = 3.0) -> None:
        """Ask every worker rank to exit and wait up to ``grace_s`` until each acknowledged or was declared lost.

        Hung ranks acknowledge from their heartbeat thread and then end themselves (see ``Heartbeat``).
        """
        self.channel.request_shutdown()
        start = time.monotonic()
        while self.channel.count("exited") + len(self.monitor.lost) < len(self.assignment):
            if time.monotonic() - start > grace_s:
                break
            self.monitor.poll()  # a rank that died late is still declared lost (and reported) here
            time.sleep(0.01)

    def __enter__(self) -> "Coordinator":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
