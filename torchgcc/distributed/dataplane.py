"""The data plane: ordered streams of tensor messages between two processes over a two-member process group.

The rendezvous store stays the *control plane* (rounds, heartbeats, shutdown); payloads (coded inputs, results,
gradients) travel here, point to point, on gloo (CPU tensors) or NCCL (CUDA tensors).

A :class:`PairChannel` joins exactly two processes: the coordinator (rank 0) and one other rank. Both build it
alone, without the rest of the job, from a ``PrefixStore`` over the rendezvous store
(``ProcessGroupGloo(PrefixStore("pair/<rank>/<epoch>", store), side, 2, timeout)``): ``new_group`` would need
every rank, and a hung or dead rank must not stop the others. After a fault a pair is rebuilt with a new
``epoch`` (a fresh prefix, so no key of the broken pair is reused).

A message is ``meta`` (a few int64: round, step, worker, kind, ...) plus any number of tensors of any dtype and
shape. On the wire it is one fixed-size int64 header (``HEADER_LEN`` entries: the meta, then dtype, ndim and shape
of every tensor) followed by one send per non-empty tensor, all with the stream's tag. Each direction is one
ordered stream (its tag is fixed, :data:`TAG_TO_PEER` / :data:`TAG_FROM_PEER` seen from the coordinator): NCCL
ignores tags and orders messages per pair, so the same protocol works on both backends.

Facts this design rests on (gloo, torch 2.14.1, checked in ``tests/distributed/test_dataplane.py`` or by hand):

- a send that the peer never receives blocks in ``wait()``, so **every message sent must be received**: the
  caller's protocol must pair them (the executor answers every work message with an end-of-round message);
- ``Work.wait()`` without a timeout uses the group's timeout, and an expired wait **closes the pair**: the pair is
  therefore built with :data:`OPERATION_TIMEOUT` (days) and a slow peer is detected by heartbeats, never by a
  timed-out wait; the connect step has its own timeout (both sides announce themselves in the store first);
- a dead peer makes a pending ``wait()`` raise ("Connection closed by peer") promptly; a hung (stopped) peer does
  not, so blocking calls belong in threads the caller can abandon.

NCCL (CUDA tensors, ``backend="nccl"``) is written with non-blocking communicators so that ``abort()`` can free a
pair whose peer failed, as torchft does. **It has never been run** (no GPU was available): treat it as untested.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["DataPlane", "HEADER_LEN", "Message", "PairBrokenError", "PairChannel", "open_peer_pair"]

#: int64 entries of a message header: [len(meta), *meta, num_tensors, (dtype, ndim, *shape) per tensor].
HEADER_LEN = 256
#: timeout of the pair's operations: effectively none (an expired wait would close the pair; see module doc).
OPERATION_TIMEOUT = timedelta(days=7)
#: tag of the coordinator -> peer stream and of the peer -> coordinator stream (gloo; NCCL ignores tags).
TAG_TO_PEER, TAG_FROM_PEER = 1, 2

_DTYPES: tuple[torch.dtype, ...] = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
)


class PairBrokenError(RuntimeError):
    """The pair failed (the peer died or closed it); rebuild it with a new epoch to talk to that rank again."""


@dataclass
class Message:
    """What travels on a :class:`PairChannel`.

    Attributes:
        meta: small integers chosen by the protocol (e.g. ``[kind, round, step, worker]``).
        tensors: payload tensors (any dtype in ``_DTYPES``, any shape; received contiguous on the pair's device).
    """

    meta: list[int] = field(default_factory=list)
    tensors: list[torch.Tensor] = field(default_factory=list)


def encode_header(message: Message) -> torch.Tensor:
    """The ``(HEADER_LEN,)`` int64 header of ``message`` (zero-padded)."""
    entries = [len(message.meta), *message.meta, len(message.tensors)]
    for tensor in message.tensors:
        if tensor.dtype not in _DTYPES:
            raise TypeError(f"cannot send dtype {tensor.dtype}; supported: {list(_DTYPES)}")
        entries += [_DTYPES.index(tensor.dtype), tensor.dim(), *tensor.shape]
    if len(entries) > HEADER_LEN:
        raise ValueError(
            f"message header needs {len(entries)} int64 entries, more than HEADER_LEN={HEADER_LEN}: send fewer "
            "meta values or tensors per message"
        )
    header = torch.zeros(HEADER_LEN, dtype=torch.int64)
    header[: len(entries)] = torch.tensor(entries, dtype=torch.int64)
    return header


def decode_header(header: torch.Tensor) -> tuple[list[int], list[tuple[torch.dtype, tuple[int, ...]]]]:
    """Inverse of :func:`encode_header`: ``(meta, [(dtype, shape), ...])``."""
    values = header.tolist()
    num_meta = values[0]
    meta = values[1 : 1 + num_meta]
    position = 1 + num_meta
    num_tensors = values[position]
    position += 1
    specs = []
    for _ in range(num_tensors):
        dtype, ndim = _DTYPES[values[position]], values[position + 1]
        specs.append((dtype, tuple(values[position + 2 : position + 2 + ndim])))
        position += 2 + ndim
    return meta, specs


class PairChannel:
    """Two ordered message streams between the coordinator (side 0) and one other rank (side 1).

    Build one with :meth:`open` on both processes (the same ``name`` and ``epoch``). :meth:`send` and
    :meth:`recv` block until the message is delivered / has arrived: call them from a thread that may be left
    blocked when the peer hangs. One thread may send while another receives; two threads must not send (or
    receive) on the same channel at once.

    Args:
        group: the two-member process group: a c10d ``ProcessGroupGloo`` or ``ProcessGroupNCCL`` (typed ``Any``: torch's
            stubs omit their ``send``, ``recv`` and ``abort``).
        side: 0 on the coordinator, 1 on the peer.
        device: where received tensors are allocated (``cpu`` for gloo, the rank's CUDA device for NCCL).
        backend: ``"gloo"`` or ``"nccl"``.
        epoch: the build generation of this pair (see :meth:`open`).
    """

    def __init__(self, group: Any, *, side: int, device: torch.device | str, backend: str, epoch: int) -> None:
        self.group, self.side, self.backend, self.epoch = group, side, backend, epoch
        self.device = torch.device(device)
        self.peer = 1 - side
        self._send_tag = TAG_TO_PEER if side == 0 else TAG_FROM_PEER
        self._recv_tag = TAG_FROM_PEER if side == 0 else TAG_TO_PEER
        self.broken = False

    @classmethod
    def open(
        cls,
        store: dist.Store,
        *,
        name: int | str,
        side: int,
        epoch: int = 0,
        backend: str = "gloo",
        device: torch.device | str = "cpu",
        connect_timeout_s: float = 60.0,
    ) -> "PairChannel":
        """Build the pair ``name`` (e.g. the worker rank) of generation ``epoch`` from the two sides alone.

        Both sides first add themselves to ``pair/<name>/<epoch>/joined`` in ``store`` and wait (at most
        ``connect_timeout_s``) until the other did, then build the group under the prefix ``pair/<name>/<epoch>``
        with :data:`OPERATION_TIMEOUT`.

        Raises:
            TimeoutError: the other side did not show up in time.
            ValueError: an unknown backend, or ``nccl`` without a CUDA device.
        """
        if side not in (0, 1):
            raise ValueError(f"side must be 0 (coordinator) or 1 (peer), got {side}")
        prefix = f"pair/{name}/{epoch}"
        pair_store = dist.PrefixStore(prefix, store)
        pair_store.add("joined", 1)
        start = time.monotonic()
        while pair_store.add("joined", 0) < 2:
            if time.monotonic() - start > connect_timeout_s:
                raise TimeoutError(f"pair {prefix}: the other side did not join within {connect_timeout_s} s")
            time.sleep(0.002)
        group_store = dist.PrefixStore("group", pair_store)
        group: Any
        if backend == "gloo":
            group = dist.ProcessGroupGloo(group_store, side, 2, OPERATION_TIMEOUT)
        elif backend == "nccl":  # never run: no GPU was available when this was written
            if torch.device(device).type != "cuda":
                raise ValueError(f"the nccl backend needs a CUDA device, got device={device!r}")
            options = dist.ProcessGroupNCCL.Options()
            options.config.blocking = 0  # non-blocking communicator, so abort() can free a failed pair
            options._timeout = OPERATION_TIMEOUT
            group = dist.ProcessGroupNCCL(group_store, side, 2, options)
        else:
            raise ValueError(f"unknown backend {backend!r}; choose 'gloo' (CPU) or 'nccl' (CUDA)")
        return cls(group, side=side, device=device, backend=backend, epoch=epoch)

    def send(self, message: Message) -> None:
        """Deliver ``message`` to the peer; blocks until the peer received it.

        Raises:
            PairBrokenError: the pair failed (it stays broken: rebuild it with a new epoch).
        """
        header = encode_header(message).to(self.device)
        tensors = [t.detach().to(self.device).contiguous() for t in message.tensors]
        try:
            works = [self.group.send([header], self.peer, self._send_tag)]
            works += [self.group.send([t], self.peer, self._send_tag) for t in tensors if t.numel()]
            for work in works:
                work.wait()
        except RuntimeError as error:
            self.broken = True
            raise PairBrokenError(f"pair epoch {self.epoch}: send failed ({error})") from error

    def recv(self) -> Message:
        """Block until the next message from the peer arrived; returns it.

        Raises:
            PairBrokenError: the pair failed.
        """
        try:
            header = torch.empty(HEADER_LEN, dtype=torch.int64, device=self.device)
            self.group.recv([header], self.peer, self._recv_tag).wait()
            meta, specs = decode_header(header.cpu())
            tensors = [torch.empty(shape, dtype=dtype, device=self.device) for dtype, shape in specs]
            works = [self.group.recv([t], self.peer, self._recv_tag) for t in tensors if t.numel()]
            for work in works:
                work.wait()
        except RuntimeError as error:
            self.broken = True
            raise PairBrokenError(f"pair epoch {self.epoch}: receive failed ({error})") from error
        return Message(meta=meta, tensors=tensors)

    def abort(self) -> None:
        """Release the pair's communicator (NCCL: ``abort()``; gloo: nothing to do, a dead peer already freed it).

        A pair whose peer is hung cannot be released on gloo (``abort`` does not free a pending receive): the
        blocked thread stays blocked, and the pair is abandoned for a new epoch.
        """
        self.broken = True
        if self.backend == "nccl":
            self.group.abort()


def epoch_key(name: int | str) -> str:
    """Store key holding the current epoch of pair ``name`` (set by the coordinator when it rebuilds the pair)."""
    return f"pair/{name}/epoch"


def open_peer_pair(
    store: dist.Store,
    *,
    rank: int,
    backend: str = "gloo",
    device: torch.device | str = "cpu",
    connect_timeout_s: float = 60.0,
) -> PairChannel:
    """The peer side (rank ``rank`` >= 1) of its pair with the coordinator, at the epoch the coordinator set."""
    epoch = int(store.get(epoch_key(rank))) if store.check([epoch_key(rank)]) else 0
    return PairChannel.open(
        store, name=rank, side=1, epoch=epoch, backend=backend, device=device, connect_timeout_s=connect_timeout_s
    )


class _Link:
    """The coordinator's end of one pair: a sender thread fed by a queue and a receiver thread feeding the inbox."""

    def __init__(self, rank: int, pair: PairChannel, inbox: queue.Queue) -> None:
        self.rank, self.pair, self.inbox = rank, pair, inbox
        self.outbox: list[tuple[Message, bool]] = []
        self.ready = threading.Condition()
        self.closed = False
        self.threads = [
            threading.Thread(target=self._send_loop, name=f"torchgcc-send-{rank}", daemon=True),
            threading.Thread(target=self._recv_loop, name=f"torchgcc-recv-{rank}", daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def post(self, message: Message, *, replaceable: bool) -> None:
        with self.ready:
            # a replaceable message still waiting is superseded: a slow peer only ever gets the newest one
            self.outbox = [(m, r) for m, r in self.outbox if not r] if replaceable else self.outbox
            self.outbox.append((message, replaceable))
            self.ready.notify()

    def pending(self) -> int:
        with self.ready:
            return len(self.outbox)

    def _send_loop(self) -> None:
        while True:
            with self.ready:
                while not self.outbox and not self.closed:
                    self.ready.wait()
                if self.closed:
                    return
                message, _ = self.outbox.pop(0)
            try:
                self.pair.send(message)
            except PairBrokenError as error:
                self.inbox.put((self.rank, self.pair.epoch, error))
                return

    def _recv_loop(self) -> None:
        while not self.closed:
            try:
                message = self.pair.recv()
            except PairBrokenError as error:
                self.inbox.put((self.rank, self.pair.epoch, error))
                return
            self.inbox.put((self.rank, self.pair.epoch, message))

    def close(self) -> None:
        with self.ready:
            self.closed = True
            self.outbox.clear()
            self.ready.notify()


class DataPlane:
    """The coordinator's side of the data plane: one :class:`PairChannel` to every peer rank, never blocking.

    Each peer has a sender thread (messages queue in order; :meth:`post` with ``replaceable=True`` drops a
    replaceable message still queued, so a slow peer is sent only the newest work) and a receiver thread that
    receives continuously, so every message a peer sends is matched at once. Everything received lands in
    :attr:`inbox` as ``(rank, epoch, Message)``, or ``(rank, epoch, PairBrokenError)`` when the pair failed (the
    peer died). A hung peer blocks only its own two threads.

    Peers call :func:`open_peer_pair` and then ``recv`` / ``send`` on their :class:`PairChannel`.

    Args:
        store: the control store (a ``PrefixStore`` over the rendezvous store).
        ranks: the peer ranks (``1 .. world_size - 1``).
        backend: ``"gloo"`` (CPU tensors) or ``"nccl"`` (CUDA tensors; never run).
        device: where received tensors live (``cpu`` for gloo).
        connect_timeout_s: how long to wait for each peer to join its pair.

    Raises:
        TimeoutError: a peer did not join its pair in time (when it first opens).
    """

    def __init__(
        self,
        store: dist.Store,
        ranks: list[int],
        *,
        backend: str = "gloo",
        device: torch.device | str = "cpu",
        connect_timeout_s: float = 60.0,
    ) -> None:
        self.store, self.backend, self.device = store, backend, device
        self.connect_timeout_s = connect_timeout_s
        self.inbox: queue.Queue = queue.Queue()
        self.epochs = {rank: 0 for rank in ranks}
        for rank in ranks:
            store.set(epoch_key(rank), "0")
        opened = open_pairs_concurrently(self._open, list(ranks))
        pairs = {rank: pair for rank, pair in opened.items() if isinstance(pair, PairChannel)}
        failed = {rank: error for rank, error in opened.items() if isinstance(error, BaseException)}
        if failed:
            first = next(iter(failed.values()))
            raise TimeoutError(f"could not open the data plane to ranks {sorted(failed)}: {first}")
        self.links = {rank: _Link(rank, pair, self.inbox) for rank, pair in pairs.items()}

    def _open(self, rank: int) -> PairChannel:
        return PairChannel.open(
            self.store,
            name=rank,
            side=0,
            epoch=self.epochs[rank],
            backend=self.backend,
            device=self.device,
            connect_timeout_s=self.connect_timeout_s,
        )

    def post(self, rank: int, message: Message, *, replaceable: bool = False) -> None:
        """Queue ``message`` for ``rank`` (returns at once)."""
        self.links[rank].post(message, replaceable=replaceable)

    def pending(self, rank: int) -> int:
        """Messages queued for ``rank`` and not yet handed to its pair."""
        return self.links[rank].pending()

    def reopen(self, rank: int) -> None:
        """Abandon ``rank``'s pair and build epoch + 1 in the background (the peer reopens when its pair fails).

        Messages of the old epoch still in :attr:`inbox` carry the old epoch number: compare with
        :attr:`epochs` to drop them.
        """
        self.links[rank].close()
        self.links[rank].pair.abort()
        self.epochs[rank] += 1
        self.store.set(epoch_key(rank), str(self.epochs[rank]))

        def build() -> None:
            try:
                self.links[rank] = _Link(rank, self._open(rank), self.inbox)
            except (TimeoutError, RuntimeError) as error:
                self.inbox.put((rank, self.epochs[rank], PairBrokenError(f"reopening failed: {error}")))

        threading.Thread(target=build, name=f"torchgcc-reopen-{rank}", daemon=True).start()

    def close(self, timeout_s: float = 0.0) -> None:
        """Stop the sender threads (what is still queued is dropped), then wait up to ``timeout_s`` for every
        pair's threads to end: a receiver ends when its peer closes the pair, so call this once the peers are
        exiting. A thread still blocked (on a hung peer) ends with the process; a process that exits normally while
        one is blocked in gloo aborts ("terminate called without an active exception"), so give it the time."""
        for link in self.links.values():
            link.close()
        deadline = time.monotonic() + timeout_s
        for link in self.links.values():
            for thread in link.threads:
                thread.join(max(deadline - time.monotonic(), 0.0))


def open_pairs_concurrently(opener, names: list[int]) -> dict[int, PairChannel | BaseException]:
    """Run ``opener(name)`` for every name in its own thread (each waits for its peer); ``{name: pair or error}``."""
    results: dict[int, PairChannel | BaseException] = {}

    def build(name: int) -> None:
        try:
            results[name] = opener(name)
        except BaseException as error:  # reported to the caller, per pair
            results[name] = error

    threads = [threading.Thread(target=build, args=(name,), daemon=True) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
