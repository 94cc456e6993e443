"""The channel between the coordinator and the worker ranks: keys in the rendezvous TCPStore.

Why the store and not ``send``/``recv`` on the process group: a straggler-tolerant coordinator must stop waiting
for a result without breaking anything. On gloo an expired ``Work.wait(timeout)`` closes every connection of the
process group and p2p ``is_completed()`` never polls; on NCCL a posted receive cannot be cancelled and the watchdog
kills the process at the group timeout. A store read is a short request/response, so the coordinator polls
``check`` and simply stops asking when the deadline passes: hung or dead peers cost nothing but the poll.

Every message carries its round in its key (``work/<rank>/<round>``, ``result/<round>/<worker>``), so a result
that arrives after its round was decoded is never read by a later round.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ["Channel", "connect"]

#: Prefix of every key torchgcc writes, so the agent's own keys in a shared store are never touched.
KEY_PREFIX = "torchgcc"


def _dumps(obj: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _loads(data: bytes) -> object:
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

    # work: coordinator -> worker rank ------------------------------------------------------------------------
    def post_work(self, rank: int, round_: int, payload: dict) -> None:
        self.store.set(f"work/{rank}/{round_}", _dumps(payload))

    def take_work(self, round_: int) -> dict | None:
        """This rank's work for ``round_`` if it was posted (the key is deleted once read), else None."""
        key = f"work/{self.rank}/{round_}"
        if not self.store.check([key]):
            return None
        payload = _loads(self.store.get(key))
        self.store.delete_key(key)
        return payload

    def drop_work(self, rank: int, round_: int) -> None:
        """Delete an unread work message (its round is over, so a worker that reads it late would waste time)."""
        self.store.delete_key(f"work/{rank}/{round_}")

    # results: worker -> coordinator ---------------------------------------------------------------------------
    def post_result(self, round_: int, worker: int, output: torch.Tensor) -> None:
        self.store.set(f"result/{round_}/{worker}", _dumps(output.detach().cpu()))

    def has_result(self, round_: int, worker: int) -> bool:
        return self.store.check([f"result/{round_}/{worker}"])

    def take_result(self, round_: int, worker: int) -> torch.Tensor:
        key = f"result/{round_}/{worker}"
        output = _loads(self.store.get(key))
        self.store.delete_key(key)
        return output

    def drop_result(self, round_: int, worker: int) -> None:
        self.store.delete_key(f"result/{round_}/{worker}")

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


def connect(timeout_s: float = 60.0) -> Channel:
    """Join the job launched by torchrun (or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

    Uses torch's ``env://`` rendezvous, which connects to the torchrun agent's store when the agent serves one and
    otherwise lets rank 0 host it. No process group is created: nothing here can break one.
    """
    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"torchgcc.distributed must be launched by torchrun (missing environment variables {missing}); "
            "try `torchrun --standalone --nproc-per-node 5 -m torchgcc.distributed`"
        )
    store, rank, world_size = next(dist.rendezvous("env://", timeout=timedelta(seconds=timeout_s)))
    return Channel(dist.PrefixStore(KEY_PREFIX, store), rank, world_size)

