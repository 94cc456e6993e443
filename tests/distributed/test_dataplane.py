"""The data plane (two-member gloo groups built from a PrefixStore) between threads of one process: fast."""

from __future__ import annotations

import threading
import time

import pytest
import torch
import torch.distributed as dist

from torchgcc.distributed.dataplane import (
    HEADER_LEN,
    DataPlane,
    Message,
    PairChannel,
    decode_header,
    encode_header,
    open_peer_pair,
)


@pytest.fixture
def master():
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)


def _pair(master, name=1, epoch=0):
    pairs = {}

    def build(side):
        pairs[side] = PairChannel.open(master.clone(), name=name, side=side, epoch=epoch, connect_timeout_s=20)

    threads = [threading.Thread(target=build, args=(side,)) for side in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return pairs[0], pairs[1]


def test_header_round_trip_and_limits():
    tensors = [torch.zeros(2, 3, 4), torch.zeros(0, dtype=torch.int64), torch.zeros((), dtype=torch.bfloat16)]
    meta, specs = decode_header(encode_header(Message([7, -1, 2**40], tensors)))
    assert meta == [7, -1, 2**40]
    assert specs == [(torch.float32, (2, 3, 4)), (torch.int64, (0,)), (torch.bfloat16, ())]
    with pytest.raises(ValueError, match="HEADER_LEN"):
        encode_header(Message(list(range(HEADER_LEN))))
    with pytest.raises(TypeError, match="cannot send dtype"):
        encode_header(Message([], [torch.zeros(2, dtype=torch.complex64)]))


def test_pair_streams_are_ordered_and_carry_any_payload(master):
    coordinator, peer = _pair(master)
    generator = torch.Generator().manual_seed(0)
    big = torch.randn(5 * 1024 * 1024, generator=generator)  # 20 MB: above the store's 8 MiB value limit
    sent = [
        Message([0, 3], [big.view(1024, -1), torch.arange(5, dtype=torch.float64)]),
        Message([1], [torch.zeros(0, 7)]),  # empty tensors are described but not sent
        Message([2], [torch.tensor([True, False]), torch.ones(2, 2, dtype=torch.bfloat16)]),
    ]
    sender = threading.Thread(target=lambda: [coordinator.send(m) for m in sent])
    sender.start()
    received = [peer.recv() for _ in sent]
    sender.join()
    for want, got in zip(sent, received):
        assert got.meta == want.meta
        assert len(got.tensors) == len(want.tensors)
        for a, b in zip(want.tensors, got.tensors):
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    # and the other direction, on its own tag, while nothing is pending on the first
    reply = Message([9], [torch.full((3,), 2.5)])
    thread = threading.Thread(target=peer.send, args=(reply,))
    thread.start()
    got = coordinator.recv()
    thread.join()
    assert got.meta == [9] and torch.equal(got.tensors[0], reply.tensors[0])


def test_open_times_out_without_the_other_side(master):
    with pytest.raises(TimeoutError, match="did not join"):
        PairChannel.open(master.clone(), name=5, side=0, connect_timeout_s=0.2)


def test_data_plane_fans_out_replaces_stale_work_and_collects(master):
    """Two peers: each echoes doubled tensors; a peer that has not received yet gets only the newest replaceable
    message; the coordinator's inbox sees every reply tagged with rank and epoch."""
    peers: dict[int, PairChannel] = {}
    release = threading.Event()

    def peer_main(rank):
        pair = open_peer_pair(master.clone(), rank=rank, connect_timeout_s=20)
        peers[rank] = pair
        release.wait(20)
        while True:
            message = pair.recv()
            if message.meta == [-1]:
                return
            pair.send(Message([rank, *message.meta], [2 * t for t in message.tensors]))

    threads = [threading.Thread(target=peer_main, args=(rank,), daemon=True) for rank in (1, 2)]
    for thread in threads:
        thread.start()
    plane = DataPlane(master.clone(), [1, 2], connect_timeout_s=20)
    # rank 1's sender thread is blocked delivering round 0 (the peer does not receive yet): round 1 queues behind
    # it and round 2 replaces round 1
    plane.post(1, Message([0], [torch.zeros(4)]), replaceable=True)
    while plane.pending(1):
        time.sleep(0.001)
    for round_ in (1, 2):
        plane.post(1, Message([round_], [torch.full((4,), float(round_))]), replaceable=True)
    plane.post(2, Message([7], [torch.ones(3)]))
    release.set()
    replies = {}
    while len(replies) < 3:
        rank, epoch, message = plane.inbox.get(timeout=20)
        assert epoch == 0 and isinstance(message, Message) and message.meta[0] == rank
        replies[tuple(message.meta)] = message.tensors[0]
    assert sorted(replies) == [(1, 0), (1, 2), (2, 7)]  # round 1 was superseded before it was sent
    assert torch.equal(replies[(1, 2)], torch.full((4,), 4.0))
    assert torch.equal(replies[(2, 7)], torch.full((3,), 2.0))
    for rank in (1, 2):
        plane.post(rank, Message([-1]))
    for thread in threads:
        thread.join(20)
    plane.close()
