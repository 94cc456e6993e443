"""The loop a worker rank runs: take the coded inputs of its workers, run the model, publish each result."""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist
from torch import nn

from torchgcc.distributed.faults import FaultPlan
from torchgcc.distributed.heartbeat import Heartbeat
from torchgcc.distributed.transport import Channel

__all__ = ["serve"]


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
) -> None:
    """Serve coded workers on this rank until the coordinator asks for shutdown.

    Each round the coordinator posts ``{"step", "workers", "inputs" (W, b, *in), "delays" (W,) or None}`` for the
    W coded workers this rank hosts. The rank runs ``model`` once on the ``W * b`` rows, then publishes worker i's
    ``(b, *out)`` output at ``received + delays[i]`` (fastest first). It stops waiting, and publishes nothing more,
    as soon as the coordinator has moved to a later round; a rank that fell behind skips straight to the latest
    round. Runs on ``device`` (``cuda:<local rank>`` under NCCL-style one-GPU-per-rank jobs); results travel on
    the host.
    """
    model = model.to(device).eval()
    heartbeat = Heartbeat(channel)
    heartbeat.start()
    channel.count("ready", 1)
    poller = _Poller()
    round_ = 0
    try:
        while not channel.shutdown_requested():
            latest = channel.latest_round()
            for skipped in range(round_, latest):  # rounds that ended while this rank was busy or behind
                channel.drop_work(channel.rank, skipped)
            round_ = max(round_, latest)
            payload = channel.take_work(round_)
            if payload is None:
                poller.wait()
                continue
            poller.reset()
            faults.strike(channel.rank, payload["step"])
            received = time.monotonic()
            inputs = payload["inputs"].to(device)
            with torch.inference_mode():
                outputs = model(inputs.flatten(0, 1)).unflatten(0, inputs.shape[:2]).cpu()
            delays = payload["delays"]
            order = range(len(outputs)) if delays is None else torch.argsort(delays, stable=True).tolist()
            for i in order:
                release = received + (0.0 if delays is None else float(delays[i]))
                while time.monotonic() < release and channel.latest_round() <= round_:
                    time.sleep(min(0.002, max(release - time.monotonic(), 0.0)))
                if channel.latest_round() > round_:
                    break  # the round is over: its remaining results would only be discarded
                channel.post_result(round_, payload["workers"][i], outputs[i])
            round_ += 1
    except dist.DistError as error:  # the store went away: the coordinator is gone
        print(f"[torchgcc] rank {channel.rank}: stopping ({type(error).__name__}: {error})", file=sys.stderr)
        return
    heartbeat.stopped.wait(timeout=heartbeat.grace_s)
