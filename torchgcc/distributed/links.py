"""How the engine's work and results travel: on the data plane (``transport="pg"``) or through the store.

The coordinator posts one :class:`Work` per live worker rank and round and receives :class:`Result` s; a worker
rank takes its work and sends one result per coded worker. Both links give the same guarantees:

- a result names the round it belongs to (the coordinator drops those of rounds it no longer waits for);
- the coordinator never blocks on a slow, hung or dead rank (``post`` and ``receive`` return at once);
- a rank that fell behind is given only the newest work (older, unsent work is replaced; store: deleted).

A result's output is a tensor ``(B, *out)`` or a tuple, list or dict of them (what the model returns); it travels as
its tensors and its :class:`~torchgcc.model_output.OutputSpec`, pickled (the job's own processes send it).

``pg`` (default): :class:`~torchgcc.distributed.dataplane.DataPlane` pairs, any payload size, one copy per hop.
``store``: chunked values in the rendezvous store (:meth:`Channel.put_payload`), the fallback when process groups
cannot be built; every byte goes through the single store server.
"""

from __future__ import annotations

import pickle
import queue
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from torchgcc.distributed.dataplane import DataPlane, Message, PairBrokenError, PairChannel, epoch_key, open_peer_pair
from torchgcc.distributed.transport import STORE_CHUNK_BYTES, Channel, check_chunk_bytes
from torchgcc.model_output import ModelOutput, OutputSpec, flatten_output

__all__ = ["TRANSPORTS", "Result", "Work", "coordinator_link", "worker_link"]

#: The transports: the data plane (``"pg"``) or the store.
TRANSPORTS = ("pg", "store")
#: message kinds on the data plane (first meta entry).
_WORK, _RESULT, _SHUTDOWN = 1, 2, 3
#: most per-worker input tensors in one work message (more are stacked into one; see the header limit).
_MAX_TENSORS = 16


@dataclass
class Work:
    """The coded inputs of one rank for one round.

    Attributes:
        round: the coordinator's round (one per batch sent).
        step: the caller's step number (for fault injection and reports).
        workers: the W coded workers hosted by the rank.
        inputs: ``(B, W, *in)`` their inputs, worker ``workers[i]``'s in ``inputs[:, i]`` (on the coordinator: a list
            of W ``(B, *in)`` views, so that the data plane copies them beside other ranks' sends).
        delays: ``(W,)`` float64 seconds to wait before releasing each result, or None.
    """

    round: int
    step: int
    workers: list[int]
    inputs: torch.Tensor | list[torch.Tensor]
    delays: torch.Tensor | None


@dataclass
class Result:
    """One coded worker's output ``(B, *out)`` (or a container of them) for ``round``, and the seconds its rank spent
    in the model."""

    round: int
    worker: int
    output: ModelOutput
    compute_s: float


def pack_output(output: ModelOutput, rows: int) -> list[torch.Tensor]:
    """``[spec as uint8 bytes, *tensors]`` of a model output with ``rows`` rows (see :func:`unpack_output`), each
    tensor contiguous (a view would travel with its whole storage)."""
    spec, tensors = flatten_output(output, rows)
    return [torch.frombuffer(bytearray(pickle.dumps(spec)), dtype=torch.uint8), *(t.contiguous() for t in tensors)]


def unpack_output(packed: list[torch.Tensor]) -> ModelOutput:
    """The model output of :func:`pack_output`'s tensors."""
    spec: OutputSpec = pickle.loads(packed[0].numpy().tobytes())
    return spec.build(packed[1:])


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
        payload = dict(work.__dict__, inputs=torch.stack(list(work.inputs), dim=1))
        self.channel.put_payload(f"work/{rank}/{work.round}", payload, chunk_bytes=self.chunk_bytes)

    def receive(self, expected: set[tuple[int, int]]) -> tuple[list[Result], set[int]]:
        """The results that arrived among the ``expected`` ``(round, worker)``; no rank is ever reported broken
        here."""
        arrived = []
        for round_, worker in sorted(expected):
            payload = self.channel.take_payload(f"result/{round_}/{worker}")
            if payload is not None:
                arrived.append(Result(round_, worker, unpack_output(payload["output"]), payload["compute_s"]))
        return arrived, set()

    def end_round(self, round_: int, unread: set[int]) -> None:
        """Round ``round_`` is over; results of ``unread`` workers may still come: delete them later."""
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

    def release(self, timeout_s: float) -> None:
        """Nothing to release: the store transport has no threads."""


class StoreWorkerLink:
    """Worker side of the store transport: polls for its rank's work of the latest round."""

    def __init__(self, channel: Channel, *, chunk_bytes: int = STORE_CHUNK_BYTES) -> None:
        check_chunk_bytes(chunk_bytes)
        self.channel, self.chunk_bytes = channel, chunk_bytes
        self.round = 0
        self.closed = False
        self.asked_to_stop = False  # the store transport learns of a shutdown from the store itself

    def next_work(self) -> Work | None:
        """This rank's work of the newest round if posted, else None (returns at once)."""
        self.round = max(self.round, self.channel.latest_round())
        payload = self.channel.take_payload(f"work/{self.channel.rank}/{self.round}")
        if payload is None:
            return None
        work = Work(**payload)
        self.round = work.round + 1
        return work

    def send(self, result: Result, rows: int) -> None:
        """Send ``result`` (its output has ``rows`` rows)."""
        payload = {"output": pack_output(result.output, rows), "compute_s": result.compute_s}
        self.channel.put_payload(f"result/{result.round}/{result.worker}", payload, chunk_bytes=self.chunk_bytes)


# -- data plane ----------------------------------------------------------------------------------------------------
class GroupCoordinatorLink:
    """Coordinator side of the data-plane transport (one :class:`DataPlane` pair per worker rank)."""

    def __init__(
        self, channel: Channel, ranks: list[int], *, backend: str = "gloo", device: torch.device | str = "cpu"
    ) -> None:
        self.plane = DataPlane(channel.store, ranks, backend=backend, device=device)

    def post(self, rank: int, work: Work) -> None:
        delays = torch.empty(0, dtype=torch.float64) if work.delays is None else work.delays
        meta = [_WORK, work.round, work.step, int(work.delays is not None), *work.workers]
        # one tensor per worker: the sender thread makes each contiguous, so the copies run beside other ranks'
        # sends; many workers per rank would overflow the message header: stack them here instead
        inputs = list(work.inputs) if len(work.inputs) <= _MAX_TENSORS else [torch.stack(list(work.inputs), dim=1)]
        self.plane.post(rank, Message(meta, [delays, *inputs]), replaceable=True)

    def receive(self, expected: set[tuple[int, int]]) -> tuple[list[Result], set[int]]:
        """Every result received since the last call (the caller drops those it no longer expects) and the ranks
        whose pair broke."""
        arrived: list[Result] = []
        broken: set[int] = set()
        while True:
            try:
                rank, _, item = self.plane.inbox.get_nowait()
            except queue.Empty:
                return arrived, broken
            if isinstance(item, PairBrokenError):
                broken.add(rank)
            elif (item.meta[1], item.meta[2]) in expected:
                _, round_, worker, compute_us = item.meta
                arrived.append(Result(round_, worker, unpack_output(item.tensors), compute_us / 1e6))

    def end_round(self, round_: int, unread: set[int]) -> None:
        """Nothing to clean: late results are received by the pair's thread and dropped by :meth:`receive`."""

    def close(self, ranks: list[int]) -> None:
        for rank in ranks:
            self.plane.post(rank, Message([_SHUTDOWN]))

    def release(self, timeout_s: float) -> None:
        """Once the ranks are exiting: wait up to ``timeout_s`` for the data plane's threads to end."""
        self.plane.close(timeout_s)


class GroupWorkerLink:
    """Worker side of the data-plane transport: blocks on its pair for the next work message."""

    def __init__(self, channel: Channel, *, backend: str = "gloo", device: torch.device | str = "cpu") -> None:
        self.channel, self.backend, self.device = channel, backend, device
        self.pair: PairChannel = open_peer_pair(channel.store, rank=channel.rank, backend=backend, device=device)
        self.closed = False  # no more work will come: the coordinator asked to stop, or the pair is gone for good
        self.asked_to_stop = False

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
                self.closed = self.asked_to_stop = True
                return None
            _, round_, step, has_delays, *workers = message.meta
            delays, *inputs = message.tensors
            stacked = inputs[0] if len(inputs) == 1 and len(workers) > 1 else torch.stack(inputs, dim=1)
            return Work(round_, step, workers, stacked, delays if has_delays else None)

    def send(self, result: Result, rows: int) -> None:
        """Send ``result`` (its output has ``rows`` rows)."""
        meta = [_RESULT, result.round, result.worker, round(result.compute_s * 1e6)]
        try:
            self.pair.send(Message(meta, pack_output(result.output, rows)))
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
