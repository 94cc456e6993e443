"""Transport micro-benchmark: one 16 MB tensor from a worker rank to the coordinator, data plane vs store.

Three local processes (rank 0 = coordinator, ranks 1 and 2 = workers; gloo). For every repetition each worker
rank in turn sends one float32 tensor of ``--megabytes`` MB to the coordinator

- over the data plane (``torchgcc.distributed.dataplane``: the worker's ``PairChannel.send``, received by the
  coordinator's ``DataPlane`` thread), and
- through the rendezvous store (``Channel.put_payload``: ``torch.save`` bytes cut into chunks of at most 4 MiB,
  since one store value is limited to 8 MiB; the coordinator polls and reads them with ``take_payload``).

The time of one transfer runs from the worker's call to the moment the coordinator holds the tensor (both read
``time.monotonic``, one clock on one machine), so the handshake that starts a repetition is not counted. Both
paths run in the same job, interleaved, so the ratio is measured under the same load. Writes
``transport.json`` (settings, per-transfer seconds, medians, the ratio) and prints ``wrote <path>``.

    python benchmarks/transport.py                 # default output: ./torchgcc-results/transport/<time>/
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from datetime import datetime, timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from torchgcc.distributed.dataplane import DataPlane, Message, open_peer_pair
from torchgcc.distributed.launch import free_port
from torchgcc.distributed.transport import KEY_PREFIX, STORE_CHUNK_BYTES, Channel

PATHS = ("pg", "store")
WORLD = 3


def _channel(port: int, rank: int) -> Channel:
    store = dist.TCPStore(
        "127.0.0.1", port, world_size=WORLD, is_master=rank == 0, wait_for_workers=False, timeout=timedelta(seconds=120)
    )
    return Channel(dist.PrefixStore(KEY_PREFIX, store), rank, WORLD)


def _worker(port: int, rank: int, numel: int, repeats: int) -> None:
    torch.set_num_threads(1)
    channel = _channel(port, rank)
    pair = open_peer_pair(channel.store, rank=rank)
    payload = torch.randn(numel, generator=torch.Generator().manual_seed(rank))
    for rep in range(repeats):
        for path in PATHS:
            channel.store.wait([f"go/{path}/{rep}/{rank}"])
            start_us = time.monotonic_ns() // 1000
            if path == "pg":
                pair.send(Message([rep, start_us], [payload]))
            else:
                channel.put_payload(
                    f"bench/{rep}/{rank}", {"start_us": start_us, "x": payload}, chunk_bytes=STORE_CHUNK_BYTES
                )
    channel.store.wait(["done"])


def _coordinate(port: int, numel: int, repeats: int, warmup: int, progress: bool) -> dict:
    channel = _channel(port, 0)
    plane = DataPlane(channel.store, [1, 2], connect_timeout_s=120)
    seconds: dict[str, list[float]] = {path: [] for path in PATHS}
    for rep in range(repeats):
        for path in PATHS:
            for rank in (1, 2):
                channel.store.set(f"go/{path}/{rep}/{rank}", "1")
                if path == "pg":
                    source, _, message = plane.inbox.get(timeout=120)
                    received = time.monotonic_ns() // 1000
                    assert source == rank and message.tensors[0].numel() == numel, message
                    start_us = message.meta[1]
                else:
                    while (payload := channel.take_payload(f"bench/{rep}/{rank}")) is None:
                        time.sleep(0.0002)
                    received = time.monotonic_ns() // 1000
                    assert payload["x"].numel() == numel
                    start_us = payload["start_us"]
                if rep >= warmup:
                    seconds[path].append((received - start_us) / 1e6)
        if progress:
            print(f"repetition {rep + 1}/{repeats}", flush=True)
    channel.store.set("done", "1")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=16.0, help="payload size in MB (10^6 bytes)")
    parser.add_argument("--repeats", type=int, default=12, help="repetitions (each: both paths, both ranks)")
    parser.add_argument("--warmup", type=int, default=2, help="leading repetitions not counted")
    parser.add_argument(
        "--out", type=Path, default=None, help="output folder (default ./torchgcc-results/transport/<time>/)"
    )
    args = parser.parse_args()
    if args.repeats <= args.warmup:
        parser.error("--repeats must exceed --warmup")
    numel = int(args.megabytes * 1e6) // 4
    port = free_port()
    context = mp.get_context("spawn")
    workers = [context.Process(target=_worker, args=(port, rank, numel, args.repeats), daemon=True) for rank in (1, 2)]
    torch.set_num_threads(1)
    for worker in workers:
        worker.start()
    started = time.monotonic()
    seconds = _coordinate(port, numel, args.repeats, args.warmup, progress=True)
    for worker in workers:
        worker.join(30)
    median = {path: float(torch.tensor(values).median()) for path, values in seconds.items()}
    result = {
        "settings": {
            "megabytes": args.megabytes,
            "bytes": numel * 4,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "world_size": WORLD,
            "backend": "gloo",
            "store_chunk_bytes": STORE_CHUNK_BYTES,
            "torch": torch.__version__,
            "cpu_count": os.cpu_count(),
            "load_average": os.getloadavg(),
            "command": "python benchmarks/transport.py",
        },
        "seconds": seconds,
        "median_s": median,
        "store_over_pg": median["store"] / median["pg"],
        "wall_s": time.monotonic() - started,
    }
    out = args.out or Path("torchgcc-results") / "transport" / datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "transport.json"
    path.write_text(json.dumps(result, indent=2))
    print(
        f"{args.megabytes:g} MB rank -> coordinator, median of {args.repeats - args.warmup} x 2 ranks: "
        f"data plane {median['pg'] * 1e3:.1f} ms, store (chunked) {median['store'] * 1e3:.1f} ms, "
        f"store / data plane = {result['store_over_pg']:.1f}x"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
