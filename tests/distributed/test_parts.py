"""Single-purpose pieces of torchgcc.distributed: worker layout, the uncoded scheme, fault plans, the launcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from torchgcc.app.commands.distributed_job import add_job_arguments, parse_value, settings_from
from torchgcc.distributed import FaultPlan, ReplicationScheme, UncodedScheme, layout_workers, make_execution_scheme
from torchgcc.distributed.launcher import launch
from torchgcc.distributed.transport import STORE_VALUE_LIMIT, Channel, check_chunk_bytes


@pytest.mark.parametrize("layout", ["round_robin", "contiguous"])
@pytest.mark.parametrize(("num_workers", "world_size"), [(8, 5), (7, 4), (3, 4), (5, 2)])
def test_layout_hosts_every_worker_exactly_once(layout, num_workers, world_size):
    assignment = layout_workers(num_workers=num_workers, world_size=world_size, layout=layout)
    assert sorted(assignment) == list(range(1, world_size))
    hosted = sorted(w for workers in assignment.values() for w in workers)
    assert hosted == list(range(num_workers))
    sizes = [len(w) for w in assignment.values()]
    assert max(sizes) - min(sizes) <= 1


def test_layout_layouts():
    assert layout_workers(num_workers=8, world_size=5) == {1: [0, 4], 2: [1, 5], 3: [2, 6], 4: [3, 7]}
    assert layout_workers(num_workers=7, world_size=4, layout="contiguous") == {1: [0, 1, 2], 2: [3, 4], 3: [5, 6]}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_workers": 4, "world_size": 1}, "at least 2 processes"),
        ({"num_workers": 2, "world_size": 4}, "at most 3 processes"),
        ({"num_workers": 4, "world_size": 3, "layout": "zigzag"}, "unknown layout"),
    ],
)
def test_layout_rejects_bad_layouts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        layout_workers(**kwargs)


def test_uncoded_scheme_reassembles_the_batch_and_needs_every_worker():
    scheme = UncodedScheme(num_workers=4)
    x = torch.arange(10.0).unsqueeze(1) * torch.tensor([1.0, -1.0])  # (10, 2)
    shares = scheme.encode(x)
    assert shares.shape == (4, 3, 2)
    results = shares.sum(-1, keepdim=True) + shares[..., :1] ** 2  # any per-sample function
    mask = torch.ones(1, 4, dtype=torch.bool)
    decoded, missing = scheme.decode(results, mask, 10)
    torch.testing.assert_close(decoded, x.sum(-1, keepdim=True) + x[:, :1] ** 2)
    assert missing == []
    mask[0, 2] = False
    with pytest.raises(ValueError, match="every worker"):
        scheme.decode(results, mask, 10)


def test_replication_sends_r_copies_and_decodes_from_any_arrived_copy():
    scheme = ReplicationScheme(num_inputs=2, num_workers=6)  # r = 3: workers 0-2 input 0, workers 3-5 input 1
    x = torch.arange(10.0).reshape(5, 2)  # M = 5 samples -> B = 3 groups (the last padded)
    payloads = scheme.encode(x)
    assert payloads.shape == (6, 3, 2)
    assert torch.equal(payloads[4, 1], x[3]) and torch.equal(payloads[0, 2], x[4])
    results = 3 * payloads  # the model: y = 3 x
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[0, :3] = False  # group 0 lost every copy of input 0 (sample 0)
    mask[1, [3, 4]] = False  # group 1 still has copy 5 of input 1
    assert not scheme.wait_over(mask, rule_met=True) and scheme.decodable(mask)
    decoded, missing = scheme.decode(results, mask, 5)
    assert missing == [0]
    assert torch.isnan(decoded[0]).all()  # reported and NaN, never a silent zero
    torch.testing.assert_close(decoded[1:], 3 * x[1:])
    assert scheme.used_mask(mask).sum(1).tolist() == [1, 2, 2]  # one copy per covered input
    mask[0, 1] = True
    assert scheme.wait_over(mask, rule_met=False)
    with pytest.raises(ValueError, match="multiple of K"):
        ReplicationScheme(num_inputs=3, num_workers=8)


def test_code_param_values_keep_their_type():
    """Bug (b): --code-param parsed every value as a float, so `--code lcc --code-param degree=1` failed."""
    assert [parse_value(v) for v in ("1", "1e-6", "true", "None", "cubic")] == [1, 1e-06, True, None, "cubic"]
    import argparse

    args = add_job_arguments(argparse.ArgumentParser()).parse_args(
        ["--code", "lcc", "--code-param", "degree=1", "--code-param", "lambda-dec=0.5"]
    )
    assert args.code_params == [("degree", 1), ("lambda_dec", 0.5)]
    assert settings_from(args).code_params == {"degree": 1, "lambda_dec": 0.5}
    scheme = make_execution_scheme("lcc", num_inputs=2, num_workers=4, degree=1)
    assert scheme.min_arrived == 2  # (K - 1) * degree + 1


def test_store_payloads_are_chunked_and_the_limit_is_checked_up_front():
    """Bug (d): a value above the store's limit used to kill the client with a raw DistNetworkError."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    channel = Channel(dist.PrefixStore("t", store), 0, 2)
    big = torch.randn(3 * 2**20, generator=torch.Generator().manual_seed(0))  # 12 MiB > the 8 MiB limit
    channel.put_payload("k", {"x": big}, chunk_bytes=2**20)
    assert store.check(["t/k/12"]) and not store.check(["t/k/13"])  # 13 chunks of at most 1 MiB
    assert torch.equal(channel.take_payload("k")["x"], big)
    assert channel.take_payload("k") is None and not store.check(["t/k/0"])  # read once, then deleted
    with pytest.raises(ValueError, match="--store-chunk-mb"):
        check_chunk_bytes(STORE_VALUE_LIMIT + 1)


def test_fault_plan_extra_delays_and_validation():
    plan = FaultPlan(slow_workers=(1, 3), slow_delay_s=2.5)
    assert plan.extra_delays(4).tolist() == [0.0, 2.5, 0.0, 2.5]
    with pytest.raises(ValueError, match="slow worker 7"):
        FaultPlan(slow_workers=(7,)).extra_delays(4)
    with pytest.raises(ValueError, match="rank 0 is the coordinator"):
        FaultPlan(kill_rank=0)


@pytest.mark.distributed
def test_launcher_kills_a_stuck_job_when_its_time_is_up():
    # no deadline and a rank hung from the first step: the coordinator would wait for the whole step timeout
    args = ["-N", "2", "-K", "2", "-S", "0", "--deadline", "0", "--step-timeout", "600", "--hang-rank", "1"]
    with pytest.raises(TimeoutError, match="did not finish") as error:
        launch(args, nproc=2, timeout_s=6)
    pids = os.popen("pgrep -f '[t]orchgcc.distributed -N 2 -K 2 -S 0 --deadline 0'").read().split()
    assert pids == [], (pids, str(error.value))


@pytest.mark.distributed
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stopping_bench_latency_stops_every_process_and_removes_temp_folders(tmp_path, signum):
    """Ctrl-C or SIGTERM of `torchgcc bench-latency` used to leave its worker processes and temp folders behind."""
    marker = str(900_000 + signum)  # a seed no other job uses: finds this job's processes
    command = [sys.executable, "-m", "torchgcc", "bench-latency", "--seed", marker, "--out", str(tmp_path / "out")]
    env = dict(os.environ, TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    # a shell that starts pytest in the background ignores SIGINT, and children inherit that; Ctrl-C reaches a
    # foreground process, so give the bench the default disposition (Python then raises KeyboardInterrupt)
    bench = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 45
        while len(_job_pids(marker)) < 5 and time.monotonic() < deadline:  # every rank of the job has started
            time.sleep(0.2)
        assert len(_job_pids(marker)) == 5
        bench.send_signal(signum)
        output, _ = bench.communicate(timeout=30)
    finally:
        if bench.poll() is None:
            bench.kill()
    assert "interrupted" in output
    assert _job_pids(marker) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("torchgcc")] == []
    assert not (tmp_path / "out").exists()


def _job_pids(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-f", f"[t]orchgcc.distributed .*--seed {marker}"], capture_output=True, text=True)
    return found.stdout.split()
