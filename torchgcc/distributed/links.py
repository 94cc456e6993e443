"""How the executor's work and results travel: on the data plane (``--transport pg``) or through the store.

The coordinator posts one :class:`Work` per live worker rank and round and collects :class:`Result` s; a worker
rank takes its work and sends one result per coded worker. Both links give the same guarantees:

- a result is delivered to the round it belongs to, never to a later one (the round is in the message);
- the coordinator never blocks on a slow, hung or dead rank (``post`` and ``collect`` return at once);
- a rank that fell behind is given only the newest work (older, unsent work is replaced; store: deleted).

``pg`` (default): :class:`~torchgcc.distributed.dataplane.DataPlane` pairs, any payload size, one copy per hop.
``store``: chunked values in the rendezvous store (:meth:`Channel.put_payload`), the fallback when process groups
cannot be built; every byte goes through the single store server.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from torchgcc.distributed.dataplane import DataPlane, Message, PairBrokenError, PairChannel, epoch_key, open_peer_pair
from torchgcc.distributed.transport import STORE_CHUNK_BYTES, Channel, check_chunk_bytes

__all__ = ["TRANSPORTS", "Result", "Work", "coordinator_link", "worker_link"]

#: ``--transport`` choices.
TRANSPORTS = ("pg", "store")
#: message kinds on the data plane (first meta entry).
_WORK, _RESULT, _SHUTDOWN = 1, 2, 3
#: most per-worker input tensors in one work message (more are stacked into one; see the header limit).
_MAX_TENSORS = 16


@dataclass
class Work:
    """The coded inputs of one rank for one round.

    Attributes:
        round: the coordinator's round (one per step and scheme).
        step: the step number (for fault injection and reports).
        workers: the W coded workers hosted by the rank.
        inputs: ``(W, b, *in)`` their inputs (on the coordinator: a list of W ``(b, *in)`` views, so that the data
            plane sends them without copying).
        delays: ``(W,)`` float64 seconds to wait before releasing each result, or None.
    """

    round: int
    step: int
    workers: list[int]
    inputs: torch.Tensor | list[torch.Tensor]
    delays: torch.Tensor | None


@dataclass
class Result:
    """One coded worker's output ``(b, *out)`` for ``round``, and the seconds its rank spent in the model."""

    round: int
    worker: int
    output: torch.Tensor
    compute_s: float


# -- store ---------------------------------------------------------------------------------------------------------
class StoreCoordinatorLink:
    """Coordinator side of the store transport: ``work/<rank>/<round>`` and ``result/<round>/<worker>`` keys."""

    def __init__(self, channel: Channel, *, chunk_bytes: int = STORE_CHUNK_BYTES) -> None:
        check_chunk_bytes(chunk_bytes)
        self.channel, self.chunk_bytes = channel, chunk_bytes
        self._posted: dict[int, int] = {}  # rank -> round of its last work (maybe unread)
        self._unread: list[tuple[int, int]] = []

    def post(self, rank: int, work: Work) -> None:
        if rank in self._posted:  # unread work of an earlier round (a hung rank) is deleted, never accumulated
            self.channel.drop_payload(f"work/{rank}/{self._posted[rank]}")
        self._posted[rank] = work.round
        # stacked: torch.save of a view would write its whole storage (every worker's inputs)
        payload = dict(work.__dict__, inputs=torch.stack(list(work.inputs)))
        self.channel.put_payload(f"work/{rank}/{work.round}", payload, chunk_bytes=self.chunk_bytes)

    def collect(self, round_: int, workers: set[int]) -> tuple[list[Result], set[int]]:
        """Results of ``round_`` that arrived from ``workers``; no rank is ever reported broken here."""
        arrived = []
        for worker in sorted(workers):
            key = f"result/{round_}/{worker}"
            payload = self.channel.take_payload(key)
            if payload is not None:
                arrived.append(Result(**payload))
        return arrived, set()

    def end_round(self, round_: int, unread: set[int]) -> None:
        """Round ``round_`` is decoded; results of ``unread`` workers may still come: delete them later."""
        keep = []
        for old_round, worker in self._unread:
            if old_round < round_ - 1:
                self.channel.drop_payload(f"result/{old_round}/{worker}")
            else:
                keep.append((old_round, worker))
        self._unread = keep + [(round_, worker) for worker in unread]

    def close(self, ranks: list[int]) -> None:
        for rank, round_ in self._posted.items():
            self.channel.drop_payload(f"work/{rank}/{round_}")


class StoreWorkerLink:
    """Worker side of the store transport: polls for its rank's work of the latest round."""

    def __init__(self, channel: Channel, *, chunk_bytes: int = STORE_CHUNK_BYTES) -> None:
        check_chunk_bytes(chunk_bytes)
        self.channel, self.chunk_bytes = channel, chunk_bytes
        self.round = 0
        self.closed = False

    def next_work(self) -> Work | None:
        """This rank's work of the newest round if posted, else None (returns at once)."""
        self.round = max(self.round, self.channel.latest_round())
        payload = self.channel.take_payload(f"work/{self.channel.rank}/{self.round}")
        if payload is None:
            return None
        work = Work(**payload)
        self.round = work.round + 1
        return work

    def send(self, result: Result) -> None:
        self.channel.put_payload(
            f"result/{result.round}/{result.worker}", result.__dict__, chunk_bytes=self.chunk_bytes
        )


# -- data plane ----------------------------------------------------------------------------------------------------
class GroupCoordinatorLink:
    """Coordinator side of the data-plane transport (one :class:`DataPlane` pair per worker rank)."""

    def __init__(
        self, channel: Channel, ranks: list[int], *, backend: str = "gloo", device: torch.device | str = "cpu"
    ) -> None:
        self.plane = DataPlane(channel.store, ranks, backend=backend, device=device)
        self._arrived: list[Result] = []

    def post(self, rank: int, work: Work) -> None:
        delays = torch.empty(0, dtype=torch.float64) if work.delays is None else work.delays
        meta = [_WORK, work.round, work.step, int(work.delays is not None), *work.workers]
        # one tensor per worker: the sender thread makes each contiguous, so the copies run beside other ranks'
        # sends; many workers per rank would overflow the message header: stack them here instead
        inputs = list(work.inputs) if len(work.inputs) <= _MAX_TENSORS else [torch.stack(list(work.inputs))]
        self.plane.post(rank, Message(meta, [delays, *inputs]), replaceable=True)

    def collect(self, round_: int, workers: set[int]) -> tuple[list[Result], set[int]]:
        """Results of ``round_`` received so far (older rounds' are dropped) and ranks whose pair broke."""
        broken = set()
        while True:
            try:
                rank, _, item = self.plane.inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, PairBrokenError):
                broken.add(rank)
            elif item.meta[1] >= round_:
                _, result_round, worker, compute_us = item.meta
                self._arrived.append(Result(result_round, worker, item.tensors[0], compute_us / 1e6))
        mine = [r for r in self._arrived if r.round == round_ and r.worker in workers]
        self._arrived = [r for r in self._arrived if r.round > round_]
        return mine, broken

    def end_round(self, round_: int, unread: set[int]) -> None:
        """Nothing to clean: late results are received by the pair's thread and dropped by :meth:`collect`."""

    def close(self, ranks: list[int]) -> None:
        for rank in ranks:
            self.plane.post(rank, Message([_SHUTDOWN]))


class GroupWorkerLink:
    """Worker side of the data-plane transport: blocks on its pair for the next work message."""

    def __init__(self, channel: Channel, *, backend: str = "gloo", device: torch.device | str = "cpu") -> None:
        self.channel, self.backend, self.device = channel, backend, device
        self.pair: PairChannel = open_peer_pair(channel.store, rank=channel.rank, backend=backend, device=device)
        self.closed = False

    def next_work(self) -> Work | None:
        """Block until the next work message; None once the coordinator closed (or the pair cannot be rebuilt)."""
        while True:
            try:
                message = self.pair.recv()
            except PairBrokenError:
                if not self._reopen():
                    self.closed = True
                    return None
                continue
            if message.meta[0] == _SHUTDOWN:
                self.closed = True
                return None
            _, round_, step, has_delays, *workers = message.meta
            delays, *inputs = message.tensors
            stacked = inputs[0] if len(inputs) == 1 and len(workers) > 1 else torch.stack(inputs)
            return Work(round_, step, workers, stacked, delays if has_delays else None)

    def send(self, result: Result) -> None:
        meta = [_RESULT, result.round, result.worker, round(result.compute_s * 1e6)]
        try:
            self.pair.send(Message(meta, [result.output]))
        except PairBrokenError:
            self._reopen()  # the result is lost; the coordinator has rebuilt (or abandoned) the pair

    def _reopen(self, timeout_s: float = 30.0) -> bool:
        """Wait for the coordinator to raise this pair's epoch, then join the new pair; False if it never does."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s and not self.channel.shutdown_requested():
            key = epoch_key(self.channel.rank)
            if self.channel.store.check([key]) and int(self.channel.store.get(key)) > self.pair.epoch:
                try:
                    self.pair = open_peer_pair(
                        self.channel.store, rank=self.channel.rank, backend=self.backend, device=self.device
                    )
                    return True
                except (TimeoutError, dist.DistError):
                    return False
            time.sleep(0.05)
        return False


def coordinator_link(
    transport: str, channel: Channel, ranks: list[int], *, chunk_bytes: int = STORE_CHUNK_BYTES, backend: str = "gloo"
) -> StoreCoordinatorLink | GroupCoordinatorLink:
    """The coordinator's link for ``transport`` (``"pg"`` or ``"store"``)."""
    if transport == "store":
        return StoreCoordinatorLink(channel, chunk_bytes=chunk_bytes)
    if transport == "pg":
        return GroupCoordinatorLink(channel, ranks, backend=backend)
    raise ValueError(f"unknown transport {transport!r}; choose from {TRANSPORTS}")


def worker_link(
    transport: str,
    channel: Channel,
    *,
    chunk_bytes: int = STORE_CHUNK_BYTES,
    backend: str = "gloo",
    device: torch.device | str = "cpu",
) -> StoreWorkerLink | GroupWorkerLink:
    """A worker rank's link for ``transport`` (the pair's tensors live on ``device``: CPU for gloo)."""
    if transport == "store":
        return StoreWorkerLink(channel, chunk_bytes=chunk_bytes)
    if transport == "pg":
        return GroupWorkerLink(channel, backend=backend, device=device)
    raise ValueError(f"unknown transport {transport!r}; choose from {TRANSPORTS}")
