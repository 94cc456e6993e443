"""``torchgcc profile`` and the timers behind it (CPU here; the CUDA path runs where a GPU exists)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from torchgcc import timing
from torchgcc.app import cli
from torchgcc.app.commands.profile import STAGES, ProfileSettings, profile_coded_inference

TINY = dict(
    model="test_resnet",
    num_inputs=4,
    num_workers=8,
    num_stragglers=2,
    groups=3,
    image_size=16,
    num_classes=5,
    warmup=0,
    repeats=2,
)


class FakeClock:
    """``time.perf_counter`` stand-in that only moves when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_timer_counts_fn_only_and_drops_warmup(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    calls = []

    def setup():
        clock.now += 100.0  # must not be counted
        calls.append("setup")

    def fn():
        clock.now += 0.25 if len(calls) > 4 else 7.0  # the two warm-up runs are slow
        calls.append("fn")

    times = timing.make_timer("cpu").measure(fn, warmup=2, repeats=3, setup=setup)
    assert times == [0.25, 0.25, 0.25]
    assert calls == ["setup", "fn"] * 5
    summary = timing.summarize(times)
    assert summary["median_ms"] == summary["mean_ms"] == 250.0 and summary["std_ms"] == 0.0


def test_timer_rejects_bad_arguments():
    with pytest.raises(ValueError, match="no timer"):
        timing.make_timer("meta")
    with pytest.raises(ValueError, match="repeats"):
        timing.make_timer("cpu").measure(lambda: None, repeats=0)


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (lambda t: t.measure(lambda: None, repeats=2.5), ValueError, "repeats"),
        (lambda t: t.measure(lambda: None, warmup=math.nan), ValueError, "warmup"),
        (lambda t: t.measure(lambda: None, warmup="1"), TypeError, "warmup"),
        (lambda t: timing.summarize([]), ValueError, "times"),
    ],
)
def test_timing_names_a_bad_argument(call, error, name):
    with pytest.raises(error, match=name):
        call(timing.make_timer("cpu"))


def test_profile_report_on_cpu(tmp_path):
    trace = tmp_path / "trace.json"
    report = profile_coded_inference(ProfileSettings(**TINY), trace=trace)
    assert report["shapes"] == {"images": [3, 4, 3, 16, 16], "coded": [3, 8, 3, 16, 16], "results": [3, 8, 5]}
    assert set(report["stages"]) == set(STAGES)
    for name, summary in report["stages"].items():
        assert len(summary["times_ms"]) == 2 and all(t > 0 for t in summary["times_ms"])
        assert report["per_group_ms"][name] == pytest.approx(summary["median_ms"] / 3)
    ratio = report["stages"]["decode"]["median_ms"] / report["stages"]["forward"]["median_ms"]
    assert report["decode_over_forward"] == pytest.approx(ratio)
    assert report["settings"]["num_stragglers"] == 2
    events = {event.get("name") for event in json.loads(trace.read_text())["traceEvents"]}
    assert {f"torchgcc/{name}" for name in STAGES} <= events


def test_profile_default_stragglers_and_bad_dtype():
    assert ProfileSettings(num_workers=32).stragglers == 4
    with pytest.raises(ValueError, match="dtype"):
        profile_coded_inference(ProfileSettings(**{**TINY, "dtype": "int8"}))


def test_profile_command_writes_json(tmp_path, capsys):
    argv = [
        "profile",
        "--model",
        "test_resnet",
        "--num-inputs",
        "4",
        "--num-workers",
        "8",
        "--image-size",
        "16",
        "--num-classes",
        "5",
        "--warmup",
        "0",
        "--repeats",
        "1",
        "--dtype",
        "bfloat16",
        "--quick",
        "--threads",
        "1",
        "--lambda-dec",
        "1e-6",
        "--no-progress",
        "--out",
        str(tmp_path),
    ]
    threads = torch.get_num_threads()
    try:
        assert cli.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    report = json.loads((tmp_path / "profile.json").read_text())
    assert len(report["environment"]["load_average"]) == 3 and report["environment"]["threads"] == 1
    assert report["settings"]["dtype"] == "bfloat16" and report["settings"]["num_stragglers"] == 1
    assert report["settings"]["repeats"] == 1 and report["settings"]["code_kwargs"] == {"lambda_dec": 1e-6}
    assert math.isfinite(report["decode_over_forward"]) and report["decode_over_forward"] > 0
    out = capsys.readouterr().out
    assert "decode / forward" in out and f"wrote {tmp_path / 'profile.json'}" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "resnet181"], "unknown timm --model 'resnet181'; did you mean resnet18"),
        (["--code", "gccc"], "unknown --code 'gccc'; choose one of"),
        (["--threads", "0"], "--threads must be at least 1"),
        (["--num-stragglers", "-1"], "--num-stragglers must lie in [0, 30]"),
        (["--num-stragglers", "31"], "--num-stragglers must lie in [0, 30]"),
        (["--code", "bacc", "--num-stragglers", "32"], "--num-stragglers must lie in [0, 31]"),
        (
            ["--num-inputs", "40", "--num-workers", "32"],
            "--num-inputs 40 --num-workers 32: num_inputs (K=40) must not exceed num_workers (N=32)",
        ),
        (["--num-inputs", "0"], "--num-inputs must be at least 1"),
        (["--groups", "0"], "--groups must be at least 1"),
        (["--repeats", "0"], "--repeats must be at least 1"),
        (["--warmup", "-1"], "--warmup must be at least 0"),
    ]
    + (
        [] if torch.cuda.is_available() else [(["--device", "cuda"], "--device cuda: no CUDA device is available here")]
    ),
)
def test_profile_user_errors_are_one_line(argv, message, tmp_path, capsys):
    assert cli.main(["profile", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"torchgcc: error: {message}") and err.count("\n") == 1 and "Traceback" not in err
    assert not any(tmp_path.iterdir())


def test_profile_help_states_only_informative_defaults(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["profile", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "(default: True)" not in text and "(default: False)" not in text and "(default: None)" not in text
    assert "--no-progress hide progress bars --lambda-dec" in text
    assert "--num-workers NUM_WORKERS N, workers per group (default: 32)" in text
    assert "--warmup WARMUP untimed runs per stage (default 2; --quick: 1) --repeats" in text


def test_abbreviated_options_are_rejected(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["profile", "--outp", str(tmp_path / "x.json")])
    assert exit_info.value.code == 2


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_profile_on_cuda(tmp_path):
    report = profile_coded_inference(ProfileSettings(**{**TINY, "device": "cuda"}), trace=tmp_path / "trace.json")
    assert report["environment"]["device_name"] == torch.cuda.get_device_name()
    assert all(summary["median_ms"] > 0 for summary in report["stages"].values())
