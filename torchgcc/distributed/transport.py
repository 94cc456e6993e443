"""The control plane: torchgcc's keys in the rendezvous TCPStore (rounds, heartbeats, shutdown, counters), and
chunked payload values for the store transport (``transport="store"``).

Payloads normally travel on the data plane (:mod:`torchgcc.distributed.dataplane`). The store transport is the
fallback: a single store value is limited to :data:`STORE_VALUE_LIMIT` bytes (the libuv TCPStore rejects larger
ones and the client is unusable afterwards), so payloads are cut into chunks of at most ``chunk_bytes`` under
``<key>/<i>`` with the chunk count under ``<key>``; a chunk size above the limit is refused up front.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["Channel", "STORE_VALUE_LIMIT", "connect"]

#: Prefix of every key torchgcc writes, so the agent's own keys in a shared store are never touched.
KEY_PREFIX = "torchgcc"
#: largest value the c10d TCPStore (libuv server) accepts, in bytes.
STORE_VALUE_LIMIT = 8 * 1024 * 1024
#: default chunk size of payloads that travel through the store.
STORE_CHUNK_BYTES = 4 * 1024 * 1024


def _dumps(obj: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _loads(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=True)


@dataclass
class Channel:
    """Typed access to the torchgcc keys of a c10d store.

    Attributes:
        store: a ``torch.distributed.Store`` (a ``PrefixStore`` over the rendezvous ``TCPStore``).
        rank: this process's rank; 0 is the coordinator.
        world_size: number of processes; ranks ``1 .. world_size - 1`` host the coded workers.
    """

    store: dist.Store
    rank: int
    world_size: int

    def clone(self) -> "Channel":
        """A channel on a new connection, for a second thread (heartbeats must not queue behind big payloads)."""
        base = self.store.underlying_store if isinstance(self.store, dist.PrefixStore) else self.store
        return Channel(dist.PrefixStore(KEY_PREFIX, base.clone()), self.rank, self.world_size)

    # payloads (store transport) -----------------------------------------------------------------------------
    def put_payload(self, key: str, obj: object, *, chunk_bytes: int = STORE_CHUNK_BYTES) -> None:
        """Store ``obj`` (anything ``torch.save`` takes) under ``key`` in chunks of at most ``chunk_bytes``.

        The chunks are written first and the count last, so a reader that sees the count sees every chunk.
        """
        check_chunk_bytes(chunk_bytes)
        data = _dumps(obj)
        chunks = [data[i : i + chunk_bytes] for i in range(0, len(data), chunk_bytes)] or [b""]
        for i, chunk in enumerate(chunks):
            self.store.set(f"{key}/{i}", chunk)  # type: ignore[arg-type]  # the binding takes bytes; the stub says str
        self.store.set(key, str(len(chunks)))

    def take_payload(self, key: str) -> Any:
        """Read and delete the payload under ``key`` (the object :meth:`put_payload` stored); None if it is absent
        or was deleted meanwhile (the writer drops work a rank did not read in time; a ``get`` of a missing key would
        block)."""
        if not self.store.check([key]):
            return None
        count = int(self.store.get(key))
        chunks = []
        for i in range(count):
            if not self.store.check([f"{key}/{i}"]):
                return None
            chunks.append(bytes(self.store.get(f"{key}/{i}")))
        self.drop_payload(key, count)
        return _loads(b"".join(chunks))

    def drop_payload(self, key: str, count: int | None = None) -> None:
        """Delete ``key`` and its chunks, if present (a no-op otherwise)."""
        if count is None:
            if not self.store.check([key]):
                return
            count = int(self.store.get(key))
        self.store.delete_key(key)
        for i in range(count):
            self.store.delete_key(f"{key}/{i}")

    # control --------------------------------------------------------------------------------------------------
    def set_latest_round(self, round_: int) -> None:
        self.store.set("latest", str(round_))

    def latest_round(self) -> int:
        return int(self.store.get("latest")) if self.store.check(["latest"]) else -1

    def beat(self) -> int:
        """Advance this rank's heartbeat counter; returns the new value."""
        return self.store.add(f"heartbeat/{self.rank}", 1)

    def heartbeat(self, rank: int) -> int:
        return self.store.add(f"heartbeat/{rank}", 0)

    def request_shutdown(self) -> None:
        self.store.set("shutdown", "1")

    def shutdown_requested(self) -> bool:
        return self.store.check(["shutdown"])

    def count(self, name: str, increment: int = 0) -> int:
        """Add ``increment`` to the shared counter ``name`` (e.g. ``"ready"``, ``"exited"``); returns its value."""
        return self.store.add(f"count/{name}", increment)


def check_chunk_bytes(chunk_bytes: int) -> None:
    """Refuse a store chunk size the store cannot hold (checked before anything is sent)."""
    if not 0 < chunk_bytes <= STORE_VALUE_LIMIT:
        raise ValueError(
            f"chunk_bytes={chunk_bytes} is outside 1..{STORE_VALUE_LIMIT} (the TCPStore's largest value); "
            "pass a smaller chunk size"
        )


def connect(timeout_s: float = 60.0) -> Channel:
    """Join the job launched by torchrun (or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

    Uses torch's ``env://`` rendezvous, which connects to the torchrun agent's store when the agent serves one and
    otherwise lets rank 0 host it. No process group is created: nothing here can break one.
    """
    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"connect() joins a job whose processes were started by torchrun or torchgcc's local launcher "
            f"(torchgcc.distributed.launch.launch); the environment variables {missing} they set are missing"
        )
    store, rank, world_size = next(dist.rendezvous("env://", timeout=timedelta(seconds=timeout_s)))
    return Channel(dist.PrefixStore(KEY_PREFIX, store), rank, world_size)
