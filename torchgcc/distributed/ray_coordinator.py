"""The executor's coordinator on Ray actors: the same :meth:`step` and :class:`StepResult` as the torchrun
:class:`~torchgcc.distributed.coordinator.Coordinator`, with ``ray.wait`` deciding which results arrive first.

Each step encodes the batch, submits one task per live worker (:class:`~torchgcc.distributed.ray_workers.RayWorkers`)
and waits with ``ray.wait(refs, num_returns=..., timeout=...)``: for a code, the first ``N - S`` results (the
scheme's own S, or the plan's quorum); in simulated mode the drawn survivors; uncoded every worker; replication a
copy of every input. The wait ends at the deadline once the results are decodable (the same rule as the torchrun
executor: :func:`~torchgcc.distributed.arrival.wait_is_over`). Tasks still running are then cancelled.

A worker whose actor died (its task raised ``RayActorError``) is lost from that moment: reported on stderr, left
out of later steps, and the quorum shrinks to the live workers. With ``max_restarts > 0`` Ray restarts the actor;
it is re-admitted at the first step after it answers a ping.
"""

from __future__ import annotations

import sys
import time

import torch

from torchgcc.distributed.arrival import StepPlan, decode_arrived, wait_is_over
from torchgcc.distributed.coordinator import StepResult, check_live, too_few_results
from torchgcc.distributed.faults import FaultPlan
from torchgcc.distributed.ray_workers import RayWorkers
from torchgcc.distributed.schemes import CodedScheme, ReplicationScheme, UncodedScheme

__all__ = ["RayCoordinator"]

Scheme = CodedScheme | UncodedScheme | ReplicationScheme


class RayCoordinator:
    """Drive N coded workers held by Ray actors.

    Args:
        workers: the actors.
        faults: the fault plan; its slow workers' extra delays are added to every step (kill and hang faults are
            for worker ranks of the torchrun executor; kill an actor with :meth:`RayWorkers.kill`).
        step_timeout_s: the longest a step may wait for a decodable set of results.

    Attributes:
        events: every loss and re-admission, ``{"step", "event": "lost" | "readmitted", "workers", "reason"}``.
    """

    def __init__(self, workers: RayWorkers, *, faults: FaultPlan = FaultPlan(), step_timeout_s: float = 30.0) -> None:
        self.workers = workers
        self.ray = workers.ray
        self.num_workers = workers.num_workers
        self.extra_delays = faults.extra_delays(self.num_workers)
        self.step_timeout_s = step_timeout_s
        self.lost: set[int] = set()
        self.events: list[dict] = []
        self._probes: dict[int, object] = {}  # lost worker -> ping ref (restartable actors only)

    @property
    def lost_workers(self) -> list[int]:
        return sorted(self.lost)

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
        """Run one step of ``scheme`` on the batch ``x`` ``(M, *in)`` (see
        :meth:`torchgcc.distributed.coordinator.Coordinator.step`; ``watch_s`` likewise keeps recording late
        arrivals after decoding)."""
        ray = self.ray
        self._readmit(step)
        start = time.monotonic()
        num_samples = x.shape[0]
        num_groups = scheme.num_groups(num_samples)
        payloads = scheme.encode(x)
        delays = None if plan.delays is None and not self.extra_delays.any() else self.extra_delays.clone()
        if plan.delays is not None:
            delays += plan.delays
        refs = {
            self.workers.run(w, payloads[w], 0.0 if delays is None else float(delays[w])): w
            for w in range(self.num_workers)
            if w not in self.lost
        }
        deadline = float("inf") if deadline_s is None else start + deadline_s
        required = None if plan.required is None else set(plan.required.any(0).nonzero().flatten().tolist())
        stragglers = getattr(scheme, "num_stragglers", None)
        quorum = plan.quorum if stragglers is None else self.num_workers - stragglers
        results: dict[int, torch.Tensor] = {}
        compute: dict[int, float] = {}
        arrival: dict[int, float] = {}
        waiting = dict(refs)
        while True:
            live = self.num_workers - len(self.lost)
            check_live(step, scheme, live, num_workers=self.num_workers, lost=self.lost_workers)
            now = time.monotonic()
            pending = set(waiting.values())
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
            if now - start > self.step_timeout_s or not waiting:
                raise too_few_results(step, scheme, results, pending, lost=self.lost_workers, elapsed_s=now - start)
            if required is not None:  # simulated: the drawn survivors
                watched = [ref for ref, w in waiting.items() if w in required] or list(waiting)
                needed = len(watched)
            else:
                watched = list(waiting)
                needed = {UncodedScheme: len(watched), ReplicationScheme: 1}.get(type(scheme), quorum - len(results))
            until = min(deadline if now < deadline else float("inf"), start + self.step_timeout_s)
            ready, _ = ray.wait(
                watched, num_returns=max(1, min(needed, len(watched))), timeout=max(until - now, 0.0), fetch_local=True
            )
            self._receive(ready, waiting, results, compute, arrival, start=start, step=step)

        output, missing, mask = decode_arrived(
            scheme, plan, results, num_workers=self.num_workers, num_groups=num_groups, num_samples=num_samples
        )
        arrived = mask.any(0).nonzero().flatten().tolist()
        latency_s = time.monotonic() - start
        if watch_s is not None:
            while waiting and (left := start + watch_s - time.monotonic()) > 0:
                ready, _ = ray.wait(list(waiting), num_returns=1, timeout=left)
                self._receive(ready, waiting, {}, {}, arrival, start=start, step=step)
        for ref in waiting:
            ray.cancel(ref)
        return StepResult(
            output=output,
            mask=mask.clone(),
            arrived=arrived,
            latency_s=latency_s,
            delays=delays,
            lost_workers=self.lost_workers,
            missing=missing,
            compute_s=max((compute[w] for w in arrived), default=0.0),
            payload_bytes=payloads[0].nbytes,
            arrival_s=torch.tensor(
                [arrival.get(w, float("inf")) for w in range(self.num_workers)], dtype=torch.float64
            ),
            watched_s=latency_s if watch_s is None else max(latency_s, watch_s),
        )

    def _receive(self, ready, waiting, results, compute, arrival, *, start: float, step: int) -> None:
        """Fetch the finished refs: results into the dicts, dead actors into :attr:`lost`."""
        for ref in ready:
            worker = waiting.pop(ref)
            try:
                output, compute_s = self.ray.get(ref)
            except self.ray.exceptions.RayActorError as error:
                self._lose(worker, step, f"{type(error).__name__}: {str(error).splitlines()[0]}")
                continue
            results[worker], compute[worker] = output, compute_s
            arrival[worker] = time.monotonic() - start

    def _lose(self, worker: int, step: int, reason: str) -> None:
        self.lost.add(worker)
        self.events.append({"step": step, "event": "lost", "workers": [worker], "reason": reason})
        print(f"[torchgcc] step {step}: lost worker [{worker}] ({reason}); a straggler from now on", file=sys.stderr)
        if self.workers.max_restarts > 0:
            self._probes[worker] = self.workers.ping(worker)

    def _readmit(self, step: int) -> None:
        """Re-admit restarted actors that answer their ping; ping again those that are still restarting."""
        if not self._probes:
            return
        ready, _ = self.ray.wait(list(self._probes.values()), num_returns=len(self._probes), timeout=0)
        back = []
        for worker, probe in list(self._probes.items()):
            if probe not in ready:
                continue
            try:
                self.ray.get(probe)
            except self.ray.exceptions.RayActorError:
                self._probes[worker] = self.workers.ping(worker)  # still restarting, or gone for good
                continue
            del self._probes[worker]
            self.lost.discard(worker)
            back.append(worker)
        if back:
            self.events.append({"step": step, "event": "readmitted", "workers": back, "reason": "actor restarted"})
            print(f"[torchgcc] step {step}: re-admitted workers {back} (actor restarted)", file=sys.stderr)

    def close(self) -> None:
        """Kill the actors."""
        self.workers.close()

    def __enter__(self) -> "RayCoordinator":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
