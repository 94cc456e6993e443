"""The loop a worker rank runs: take the coded inputs of its workers, run the model, send each result."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn

from torchgcc.distributed.faults import FaultPlan
from torchgcc.distributed.heartbeat import Heartbeat, acknowledge_shutdown
from torchgcc.distributed.links import Result, Work, worker_link
from torchgcc.distributed.transport import STORE_CHUNK_BYTES, Channel
from torchgcc.model_output import flatten_output

__all__ = ["CoordinatorLost", "serve"]


class CoordinatorLost(RuntimeError):
    """A worker rank's coordinator went away without asking it to shut down (killed, or crashed)."""


class _Poller:
    """Sleeps between store polls, backing off from ``min_s`` to ``max_s`` while nothing happens."""

    def __init__(self, min_s: float = 0.0005, max_s: float = 0.005) -> None:
        self.min_s, self.max_s, self.current = min_s, max_s, min_s

    def wait(self) -> None:
        time.sleep(self.current)
        self.current = min(2 * self.current, self.max_s)

    def reset(self) -> None:
        self.current = self.min_s


def serve(
    model: nn.Module,
    channel: Channel,
    *,
    device: torch.device | str = "cpu",
    faults: FaultPlan = FaultPlan(),
    transport: str = "pg",
    chunk_bytes: int = STORE_CHUNK_BYTES,
) -> None:
    """Serve coded workers on this rank until the coordinator asks for shutdown, then acknowledge it and return.

    Raises :class:`CoordinatorLost` when the coordinator vanished instead (its store or its pair is gone), so that
    the rank exits non-zero.

    Each round the coordinator sends a :class:`~torchgcc.distributed.links.Work` (``inputs`` ``(B, W, *in)`` and
    ``delays`` ``(W,)`` or None) for the W coded workers this rank hosts. The rank runs ``model`` once on the
    ``B * W`` rows, then sends worker i's output (``(B, *out)``, or the model's container of such tensors)
    ``delays[i]`` seconds after the model finished (fastest first: an injected delay comes on top of the real compute
    time), with the seconds the model took. It stops waiting, and sends nothing more, as soon as the coordinator no
    longer waits for the round (or asks for shutdown); work of a round that is already over is skipped. Runs the
    model on ``device`` (``cuda:<local rank>`` in one-GPU-per-rank jobs); with ``transport="pg"`` on CPU the data
    plane is gloo.
    """
    model = model.to(device).eval()
    heartbeat = Heartbeat(channel)
    heartbeat.start()
    channel.count("ready", 1)  # before the data plane: the coordinator opens its pairs once every rank is ready
    link = worker_link(transport, channel, chunk_bytes=chunk_bytes)
    poller = _Poller()

    def round_over(work: Work) -> bool:
        return heartbeat.shutdown_seen.is_set() or channel.latest_round() > work.round

    try:
        while not link.closed and not heartbeat.shutdown_seen.is_set():
            work = link.next_work()
            if work is None:
                poller.wait()
                continue
            poller.reset()
            if work.round < channel.latest_round():
                continue  # its round ended while this rank was busy or behind
            faults.strike(channel.rank, work.step)
            received = time.monotonic()
            assert isinstance(work.inputs, torch.Tensor)  # a rank receives them stacked
            inputs = work.inputs.to(device)  # (B, W, *in)
            groups, hosted = inputs.shape[:2]
            with torch.inference_mode():
                spec, leaves = flatten_output(model(inputs.flatten(0, 1)), groups * hosted)
            leaves = [leaf.unflatten(0, (groups, hosted)).cpu() for leaf in leaves]
            computed = time.monotonic()
            compute_s = computed - received
            delays = work.delays
            order = range(hosted) if delays is None else torch.argsort(delays, stable=True).tolist()
            for i in order:
                release = computed + (0.0 if delays is None else float(delays[i]))
                if time.monotonic() < release:  # (no store round trip for results due at once)
                    while time.monotonic() < release and not round_over(work):
                        time.sleep(min(0.002, max(release - time.monotonic(), 0.0)))
                    if round_over(work):
                        break  # its remaining results would only be discarded
                output = spec.build([leaf[:, i] for leaf in leaves])
                link.send(Result(work.round, work.workers[i], output, compute_s), groups)
        asked = link.asked_to_stop or heartbeat.shutdown_seen.is_set() or channel.shutdown_requested()
    except dist.DistError as error:  # the store went away: the coordinator is gone
        heartbeat.finish()
        raise CoordinatorLost(
            f"rank {channel.rank}: the coordinator is gone (store: {type(error).__name__})"
        ) from error
    heartbeat.finish()
    if not asked:  # the pair broke for good and nobody asked this rank to stop
        raise CoordinatorLost(f"rank {channel.rank}: the coordinator is gone (its data-plane pair broke)")
    acknowledge_shutdown(channel)
