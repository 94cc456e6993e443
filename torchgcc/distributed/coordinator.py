"""Rank 0: encode a batch, post the coded inputs, collect results until the step's rule is met, decode."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import torch

from torchgcc.distributed.arrival import StepPlan, decode_arrived, wait_is_over
from torchgcc.distributed.faults import FaultPlan
from torchgcc.distributed.heartbeat import LivenessMonitor
from torchgcc.distributed.layout import layout_workers
from torchgcc.distributed.links import Work, coordinator_link
from torchgcc.distributed.schemes import CodedScheme, ReplicationScheme, UncodedScheme
from torchgcc.distributed.transport import STORE_CHUNK_BYTES, Channel

__all__ = ["Coordinator", "StepResult", "TooFewWorkersError"]


class TooFewWorkersError(RuntimeError):
    """Fewer results than the decoder needs can still arrive (workers lost, or the step timed out)."""


def check_live(step: int, scheme, live: int, *, num_workers: int, lost: list[int]) -> None:
    """Raise :class:`TooFewWorkersError` when fewer than ``scheme.min_arrived`` of the workers are still live."""
    if live < scheme.min_arrived:
        raise TooFewWorkersError(
            f"step {step}: only {live} of {num_workers} workers remain (lost: {lost}); "
            f"{scheme.name} needs at least {scheme.min_arrived}"
        )


def too_few_results(step: int, scheme, results, pending, *, lost: list[int], elapsed_s: float) -> TooFewWorkersError:
    """The error of a step whose wait ended (timeout, or nobody left to wait for) without decodable results."""
    return TooFewWorkersError(
        f"step {step}: {len(results)} results after {elapsed_s:.1f} s are not enough for {scheme.name} "
        f"(min {scheme.min_arrived} per group; pending workers {sorted(pending)}, lost {lost})"
    )


Scheme = CodedScheme | UncodedScheme | ReplicationScheme


@dataclass
class StepResult:
    """The outcome of one step.

    Attributes:
        output: ``(M, *out)`` decoded outputs aligned with the inputs (NaN rows for ``missing`` samples).
        mask: ``(B, N)`` bool mask the decoder used (True = result used).
        arrived: sorted worker indices whose results were used (in at least one group).
        latency_s: seconds from the start of the step (before encoding) to the decoded output.
        delays: ``(N,)`` injected delays of this step, or None.
        lost_workers: workers on ranks declared lost so far (stragglers until their rank is re-admitted).
        missing: sample indices without any result (replication at the deadline); empty for the codes.
        compute_s: the longest time a rank whose results were used spent in the model (its own report).
        payload_bytes: the largest input payload sent to one rank in this step.
        arrival_s: ``(N,)`` float64 seconds from the start of the step to each worker's result, ``inf`` for results
            not seen by ``watched_s``.
        watched_s: seconds after the start up to which ``arrival_s`` is complete (the step latency, or the
            ``watch_s`` of :meth:`Coordinator.step` when that is later; watching ends early once all arrived).
    """

    output: torch.Tensor
    mask: torch.Tensor
    arrived: list[int]
    latency_s: float
    delays: torch.Tensor | None
    lost_workers: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    compute_s: float = 0.0
    payload_bytes: int = 0
    arrival_s: torch.Tensor | None = None
    watched_s: float = 0.0


class Coordinator:
    """Drive the coded workers hosted on ranks ``1 .. P-1`` from rank 0.

    Args:
        channel: rank 0's :class:`Channel` (the control plane).
        num_workers: N, the number of coded workers.
        layout: how workers are spread over ranks (see :mod:`torchgcc.distributed.layout`).
        faults: the fault plan; its slow workers' extra delays are added to every step.
        transport: ``"pg"`` (the data plane: a gloo pair per rank) or ``"store"`` (chunked store values).
        chunk_bytes: chunk size of the store transport (at most the store's value limit).
        heartbeat_timeout_s: a rank silent for this long is lost (its workers are stragglers until it beats again).
        step_timeout_s: the longest a step may wait for a decodable set of results.
        start_timeout_s: the longest to wait for every worker rank to report ready.
        poll_s: pause between polls while waiting for results.
    """

    def __init__(
        self,
        channel: Channel,
        *,
        num_workers: int,
        layout: str = "round_robin",
        faults: FaultPlan = FaultPlan(),
        transport: str = "pg",
        chunk_bytes: int = STORE_CHUNK_BYTES,
        heartbeat_timeout_s: float = 2.0,
        step_timeout_s: float = 30.0,
        start_timeout_s: float = 120.0,
        poll_s: float = 0.0005,
    ) -> None:
        if channel.rank != 0:
            raise RuntimeError(f"the coordinator runs on rank 0, not rank {channel.rank}")
        self.channel = channel
        self.num_workers = num_workers
        self.assignment = layout_workers(num_workers=num_workers, world_size=channel.world_size, layout=layout)
        self.rank_of = {worker: rank for rank, workers in self.assignment.items() for worker in workers}
        self.extra_delays = faults.extra_delays(num_workers)
        self.step_timeout_s = step_timeout_s
        self.poll_s = poll_s
        self._round = 0
        self._wait_ready(start_timeout_s)
        self.link = coordinator_link(transport, channel, list(self.assignment), chunk_bytes=chunk_bytes)
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
        scheme: Scheme,
        x: torch.Tensor,
        plan: StepPlan,
        *,
        step: int,
        deadline_s: float | None = None,
        watch_s: float | None = None,
    ) -> StepResult:
        """Run one step of ``scheme`` on the batch ``x`` ``(M, *in)``.

        The wait ends when the scheme's wait is over (codes: the plan's rule, i.e. its ``required`` workers or
        ``quorum`` results; uncoded: every worker; replication: a copy of every input) and the results are
        decodable, or at ``deadline_s`` after the start once they are decodable. Workers on lost ranks are not
        waited for. In simulated mode a group whose drawn survivors did not all arrive by the deadline is decoded
        from the drawn survivors that arrived, topped up with any other arrived worker if it has fewer than
        ``min_arrived``.

        With ``watch_s``, the coordinator keeps recording (not using) late arrivals after decoding until
        ``watch_s`` seconds after the start, so that :attr:`StepResult.arrival_s` tells which workers were late
        with respect to that time (what an adaptive wait count learns from); ``latency_s`` does not include it.

        Raises:
            TooFewWorkersError: fewer live workers than ``scheme.min_arrived``, or still not decodable after
                ``step_timeout_s``.
        """
        start = time.monotonic()
        round_ = self._round
        self._round += 1
        self.channel.set_latest_round(round_)
        num_samples = x.shape[0]
        num_groups = scheme.num_groups(num_samples)
        payloads = scheme.encode(x)
        delays = self._post_work(round_, step, payloads, plan.delays)
        deadline = float("inf") if deadline_s is None else start + deadline_s
        results, compute, arrival = self._collect(
            round_, step, scheme, plan, num_groups, start=start, deadline=deadline
        )

        output, missing, mask = decode_arrived(
            scheme, plan, results, num_workers=self.num_workers, num_groups=num_groups, num_samples=num_samples
        )
        arrived = mask.any(0).nonzero().flatten().tolist()
        latency_s = time.monotonic() - start
        if watch_s is not None:
            self._watch(round_, step, arrival, start=start, until=start + watch_s)
        self.link.end_round(
            round_,
            {w for w in range(self.num_workers) if w not in arrival and self.rank_of[w] not in self.monitor.lost},
        )
        return StepResult(
            output=output,
            mask=mask.clone(),
            arrived=arrived,
            latency_s=latency_s,
            delays=delays,
            lost_workers=self.lost_workers,
            missing=missing,
            compute_s=max((compute[w] for w in arrived), default=0.0),
            payload_bytes=max(len(w) * payloads[0].nbytes for w in self.assignment.values()),
            arrival_s=torch.tensor(
                [arrival.get(w, float("inf")) for w in range(self.num_workers)], dtype=torch.float64
            ),
            watched_s=latency_s if watch_s is None else max(latency_s, watch_s),
        )

    def _post_work(
        self, round_: int, step: int, payloads: torch.Tensor, plan_delays: torch.Tensor | None
    ) -> torch.Tensor | None:
        """Send each live rank its workers' payloads ``(N, b, *in)`` and delays; returns the ``(N,)`` delays."""
        delays = None if plan_delays is None and not self.extra_delays.any() else self.extra_delays.clone()
        if plan_delays is not None:
            delays += plan_delays
        for rank, workers in self.assignment.items():
            if rank not in self.monitor.lost:
                rank_delays = None if delays is None else delays[workers]
                self.link.post(rank, Work(round_, step, workers, [payloads[w] for w in workers], rank_delays))
        return delays

    def _collect(
        self, round_: int, step: int, scheme: Scheme, plan: StepPlan, num_groups: int, *, start: float, deadline: float
    ) -> tuple[dict[int, torch.Tensor], dict[int, float], dict[int, float]]:
        """Gather results of ``round_`` until the scheme's wait is over; returns ``{worker: (b, *out)}``, the
        compute seconds ``{worker: s}`` and the arrival seconds after ``start`` ``{worker: s}``."""
        results: dict[int, torch.Tensor] = {}
        compute: dict[int, float] = {}
        arrival: dict[int, float] = {}
        pending = {w for w in range(self.num_workers) if self.rank_of[w] not in self.monitor.lost}
        while True:
            arrived, broken = self.link.collect(round_, pending)
            for result in arrived:
                results[result.worker], compute[result.worker] = result.output, result.compute_s
                arrival[result.worker] = time.monotonic() - start
                pending.discard(result.worker)
            pending -= self._update_liveness(step, broken)
            live = self.num_workers - len(self.lost_workers)
            check_live(step, scheme, live, num_workers=self.num_workers, lost=self.lost_workers)
            now = time.monotonic()
            if wait_is_over(
                scheme,
                plan,
                set(results),
                pending,
                num_workers=self.num_workers,
                num_groups=num_groups,
                live=live,
                past_deadline=now >= deadline,
            ):
                break
            if now - start > self.step_timeout_s or not pending:
                raise too_few_results(step, scheme, results, pending, lost=self.lost_workers, elapsed_s=now - start)
            time.sleep(self.poll_s)
        return results, compute, arrival

    def _watch(self, round_: int, step: int, arrival: dict[int, float], *, start: float, until: float) -> None:
        """Record the arrival seconds of ``round_``'s late results in ``arrival`` until ``until`` (monotonic).

        Results are read at least once, also when ``until`` has passed: those that came in while the coordinator was
        decoding are recorded (stamped when read: it could not see them earlier), so that ``arrival`` is complete
        up to the time this returns."""
        pending = {w for w in range(self.num_workers) if w not in arrival and self.rank_of[w] not in self.monitor.lost}
        while pending:
            arrived, broken = self.link.collect(round_, pending)
            for result in arrived:
                arrival[result.worker] = time.monotonic() - start
                pending.discard(result.worker)
            pending -= self._update_liveness(step, broken)
            if time.monotonic() >= until:
                break
            time.sleep(self.poll_s)

    def _update_liveness(self, step: int, broken: set[int]) -> set[int]:
        """Apply heartbeats and broken pairs; report changes on stderr; returns the workers lost by this call."""
        newly_lost, readmitted = self.monitor.poll()
        newly_lost |= {rank for rank in broken if self.monitor.declare_dead(rank)}
        gone = {w for rank in newly_lost for w in self.assignment[rank]}
        if gone:
            print(
                f"[torchgcc] step {step}: lost rank(s) {sorted(newly_lost)} hosting workers {sorted(gone)}; "
                "they are stragglers from now on",
                file=sys.stderr,
                flush=True,
            )
        if readmitted:
            back = sorted(w for rank in readmitted for w in self.assignment[rank])
            print(
                f"[torchgcc] step {step}: rank(s) {sorted(readmitted)} beat again: re-admitted workers {back}",
                file=sys.stderr,
                flush=True,
            )
        return gone

    def close(self, *, grace_s: float = 3.0) -> None:
        """Ask every worker rank to exit and wait up to ``grace_s`` until each acknowledged or was declared lost.

        Hung ranks acknowledge from their heartbeat thread and then end themselves (see ``Heartbeat``).
        """
        self.channel.request_shutdown()
        self.link.close([rank for rank in self.assignment if rank not in self.monitor.lost])
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
