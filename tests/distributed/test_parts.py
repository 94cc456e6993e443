"""Single-purpose pieces of torchgcc.distributed and its command lines: worker layout, code names, fault plans, the
store's chunking, the launcher."""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist

from torchgcc.app.code_names import named_code
from torchgcc.app.coded_job import EXIT_USAGE, JobSettings, build_codes
from torchgcc.app.commands.distributed_job import add_job_arguments, parse_value, settings_from
from torchgcc.distributed import FaultPlan, layout_workers
from torchgcc.distributed.launch import launch
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


def test_code_names_map_to_codes_and_waits():
    """The command line's names: baselines wait until decodable, codes for N - S (the run's, or their own)."""
    common = {"num_inputs": 2, "num_workers": 6, "num_stragglers": 1}
    uncoded, replication = named_code("uncoded", **common), named_code("replication", **common)
    assert (uncoded.code.num_inputs, uncoded.code.num_workers, uncoded.wait.num_stragglers) == (6, 6, None)
    assert (replication.code.num_inputs, replication.wait.num_stragglers) == (2, None)
    assert (
        named_code("gcc", **common).wait.num_stragglers == 1
        and named_code("gcc:S=3", **common).wait.num_stragglers == 3
    )
    for bad, message in (
        ("reed-solomon", "unknown name"),
        ("gcc:T=3", "bad name"),
        ("uncoded:S=1", "bad name"),
        ("gcc:S=6", "leaves no worker"),
        ("gcc:adaptive", "adaptive needs"),
    ):
        with pytest.raises(ValueError, match=message):
            named_code(bad, **common)


def test_code_param_values_keep_their_type():
    """Bug (b): --code-param parsed every value as a float, so `--code lcc --code-param degree=1` failed."""
    assert [parse_value(v) for v in ("1", "1e-6", "true", "None", "cubic")] == [1, 1e-06, True, None, "cubic"]
    import argparse

    args = add_job_arguments(argparse.ArgumentParser()).parse_args(
        ["--code", "lcc", "--code-param", "degree=1", "--code-param", "lambda-dec=0.5"]
    )
    assert args.code_params == [("degree", 1), ("lambda_dec", 0.5)]
    assert settings_from(args).code_params == {"degree": 1, "lambda_dec": 0.5}
    named = named_code("lcc", num_inputs=2, num_workers=4, num_stragglers=0, code_params={"degree": 1})
    assert named.code.min_arrived == 2  # (K - 1) * degree + 1


def test_store_payloads_are_chunked_and_the_limit_is_checked_up_front():
    """Bug (d): a value above the store's limit used to kill the client with a raw DistNetworkError."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    channel = Channel(dist.PrefixStore("t", store), 0, 2)
    big = torch.randn(3 * 2**20, generator=torch.Generator().manual_seed(0))  # 12 MiB > the 8 MiB limit
    channel.put_payload("k", {"x": big}, chunk_bytes=2**20)
    assert store.check(["t/k/12"]) and not store.check(["t/k/13"])  # 13 chunks of at most 1 MiB
    assert torch.equal(channel.take_payload("k")["x"], big)
    assert channel.take_payload("k") is None and not store.check(["t/k/0"])  # read once, then deleted
    with pytest.raises(ValueError, match="chunk_bytes=8388609"):
        check_chunk_bytes(STORE_VALUE_LIMIT + 1)
    with pytest.raises(ValueError, match="--store-chunk-mb 9"):  # the command line's check names its option
        JobSettings(store_chunk_mb=9)


def test_the_default_deadline_lies_beyond_the_injected_delays():
    """The injected mode's default deadline is 1 s after the latency model's 99.9th percentile: for the default
    1 s + Exp(mean 0.5 s), 2 + 0.5 ln 1000 s (closed form; the estimate from 10^4 draws has a standard deviation of
    sqrt(0.999e-7) / 0.002 = 0.16 s, so within 0.5 s); the other modes keep 1 s, and a given deadline is kept."""
    parser = add_job_arguments(argparse.ArgumentParser())

    def deadline(*argv: str) -> float:
        (named,) = build_codes(settings_from(parser.parse_args(argv)))
        return named.wait.deadline_s

    assert deadline("--mode", "injected") == pytest.approx(2 + 0.5 * math.log(1000), abs=0.5)
    assert deadline("--mode", "injected", "--latency-param", "shift=0.01") == pytest.approx(
        1.01 + 0.5 * math.log(1000), abs=0.5
    )
    assert deadline() == deadline("--mode", "measured") == 1.0
    assert deadline("--mode", "injected", "--deadline", "0.3") == 0.3


def test_fault_plan_extra_delays_and_validation():
    plan = FaultPlan(slow_workers=(1, 3), slow_delay_s=2.5)
    assert plan.extra_delays(4).tolist() == [0.0, 2.5, 0.0, 2.5]
    with pytest.raises(ValueError, match="slow worker 7"):
        FaultPlan(slow_workers=(7,)).extra_delays(4)
    with pytest.raises(ValueError, match="rank 0 is the coordinator"):
        FaultPlan(kill_rank=0)


@pytest.mark.parametrize(
    ("fields", "error", "name"),
    [
        ({"slow_delay_s": math.nan}, ValueError, "slow_delay_s"),  # injected no delay at all
        ({"slow_delay_s": -1.0}, ValueError, "slow_delay_s"),
        ({"slow_delay_s": math.inf}, ValueError, "slow_delay_s"),
        ({"slow_delay_s": "5"}, TypeError, "slow_delay_s"),
        ({"slow_workers": (1, -1)}, ValueError, "slow_workers"),
        ({"slow_workers": (1.5,)}, ValueError, "slow_workers"),
        ({"kill_rank": -2}, ValueError, "kill_rank"),
        ({"kill_rank": 1.5}, ValueError, "kill_rank"),
        ({"hang_rank": -1}, ValueError, "hang_rank"),
        ({"kill_step": -1}, ValueError, "kill_step"),
        ({"kill_step": 2.5}, ValueError, "kill_step"),
        ({"hang_step": -1}, ValueError, "hang_step"),
        ({"kill_exit_code": 256}, ValueError, "kill_exit_code"),
        ({"kill_exit_code": -1}, ValueError, "kill_exit_code"),
    ],
)
def test_a_fault_plan_built_in_python_checks_its_fields(fields, error, name):
    """A FaultPlan built directly (not through JobSettings) refuses a bad field with one line naming it: a NaN
    delay injected nothing, and a negative rank or step silently never or always fired."""
    with pytest.raises(error, match=f"^{name}"):
        FaultPlan(**fields)
    plan = FaultPlan(slow_workers=(np.int64(2),), slow_delay_s=np.float32(0.5), kill_rank=1, kill_exit_code=255)
    assert plan.slow_workers == (2,) and type(plan.slow_workers[0]) is int and type(plan.slow_delay_s) is float


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


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--deadline", "nan"], "--deadline"),  # meant "no deadline" (nan > 0 is False)
        (["--wait-deadline", "nan"], "--wait-deadline"),
        (["--slow-delay", "nan", "--slow-worker", "1"], "--slow-delay"),  # injected no delay
        (["--slow-delay", "-1", "--slow-worker", "1"], "--slow-delay"),
        (["--slow-delay", "inf", "--slow-worker", "1"], "--slow-delay"),
        (["-N", "8", "--slow-worker", "8"], "--slow-worker"),
        (["--slow-worker", "-1"], "--slow-worker"),
        (["--kill-rank", "0"], "--kill-rank"),
        (["--kill-rank", "-2"], "--kill-rank"),
        (["--hang-rank", "0"], "--hang-rank"),
        (["--kill-rank", "1", "--kill-step", "-1"], "--kill-step"),  # the FaultPlan on the ranks refuses it
        (["--hang-rank", "1", "--hang-step", "-1"], "--hang-step"),
        (["--kill-rank", "1", "--kill-exit-code", "256"], "--kill-exit-code"),
        (["--kill-rank", "1", "--kill-exit-code", "-1"], "--kill-exit-code"),
    ],
)
def test_fault_and_deadline_options_are_checked_with_the_settings(argv, option):
    """The settings reject them (one line naming the option), so the launcher refuses them before any rank starts
    and torchrun's ranks before the job (they were silently no deadline / no delay, or an error after every rank had
    started)."""
    parser = add_job_arguments(argparse.ArgumentParser())
    with pytest.raises(ValueError, match=re.escape(option)):
        settings_from(parser.parse_args(argv))


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("wait_deadline", [math.nan, 0.0, -1.0, math.inf]),  # nan: the NaN-deadline controller never adapted
        ("wait_budget", [math.nan, -0.1, 1.0, 2.0]),  # a share of steps, [0, 1)
        ("wait_discount", [math.nan, 0.0, 1.5]),  # a forgetting factor, (0, 1]
        ("wait_max_stragglers", [math.nan, -1, 8, 2.5]),  # candidates 0..this must lie in [0, N - 1]
        ("wait_warmup", [math.nan, -1, 1.5]),
        ("wait_max_step", [math.nan, 0, 2.5]),
        ("seed", [math.nan, 2**64, 1.5]),
    ],
)
def test_controller_options_are_checked_with_the_settings(name, bad):
    """Every option that reaches the wait-count controller is checked by the settings, one line naming the field
    and its option: NaN or out-of-range values got through to the first adaptive step (or were never used)."""
    option = f"--{name.replace('_', '-')}"
    for value in bad:
        with pytest.raises(ValueError, match=rf"^{name} \({option}\) must be"):
            JobSettings(**{name: value})
    parser = add_job_arguments(argparse.ArgumentParser())
    text = "nan" if name not in ("wait_max_stragglers", "wait_warmup", "wait_max_step", "seed") else str(bad[1])
    with pytest.raises(ValueError, match=re.escape(option)):
        settings_from(parser.parse_args([option, text]))


def test_the_controller_options_settings_allow_reach_a_controller():
    """The edges the settings allow are the controller's own: budget 0, discount 1, warm-up 0, S up to N - 1."""
    settings = JobSettings(
        schemes=("gcc:adaptive",),
        mode="measured",
        wait_deadline=0.5,
        wait_budget=0.0,
        wait_discount=1.0,
        wait_max_stragglers=7,
        wait_warmup=0,
        wait_max_step=1,
        seed=2**64 - 1,
    )
    (named,) = build_codes(settings)
    assert named.wait.adaptive.controller.sizes.tolist() == list(range(1, 9))


@pytest.mark.parametrize(
    ("job", "option"),
    [
        (["--wait-budget", "nan"], "--wait-budget"),
        (["--wait-discount", "2"], "--wait-discount"),
        (["--deadline", "nan"], "--deadline"),
        (["--slow-delay", "nan", "--slow-worker", "1"], "--slow-delay"),
        (["--slow-worker", "9"], "--slow-worker"),
        (["--kill-rank", "3"], "--kill-rank"),  # rank 3 of --nproc 3 does not exist: the fault would never fire
        (["--hang-rank", "5"], "--hang-rank"),
    ],
)
def test_the_launcher_refuses_bad_fault_options_before_any_process_starts(job, option, monkeypatch, capsys):
    from torchgcc.app.commands import launch as launch_command

    def no_launch(*args, **kwargs):
        raise AssertionError("the job was launched")

    monkeypatch.setattr(launch_command.launch, "launch", no_launch)
    assert launch_command.main(["--nproc", "3", "--", *job]) == EXIT_USAGE
    assert option in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv", [["--nproc", "0", "--", "-N", "8"], ["--nproc", "3", "--", "-N", "8", "--deadline", "abc"]]
)
def test_the_launcher_says_a_command_line_mistake_in_one_line(argv, monkeypatch, capsys):
    """The launcher's and the job's parsers print one error line (argparse printed its usage block above it, once
    per rank under torchrun), exit status 2, nothing launched."""
    from torchgcc.app.commands import launch as launch_command

    def no_launch(*args, **kwargs):
        raise AssertionError("the job was launched")

    monkeypatch.setattr(launch_command.launch, "launch", no_launch)
    try:
        code = launch_command.main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    assert code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and "--help for the options" in lines[0], lines
