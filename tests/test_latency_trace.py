"""Recorded latency traces: the file format, replay in order, and recording from an executor's --save file."""

from __future__ import annotations

import json
import math

import pytest
import torch

from torchgcc.distributed.latency_trace import save_trace, trace_from_saved_run
from torchgcc.stragglers import TRACE_FORMAT, LatencyStragglers, TraceReplay, make_latency_model


def test_a_trace_survives_a_round_trip_and_replays_its_rows_in_order(tmp_path):
    delays = torch.arange(20, dtype=torch.float64).reshape(5, 4) / 100
    path = save_trace(TraceReplay(delays, source="made up"), tmp_path / "trace.json")
    record = json.loads(path.read_text())
    assert record["format"] == TRACE_FORMAT and record["num_workers"] == 4 and len(record["delays_s"]) == 5
    replay = TraceReplay.from_file(str(path))
    assert torch.equal(replay.delays_s, delays) and replay.source == "made up" and not replay.censored.any()
    generator = torch.Generator()
    assert torch.equal(replay.sample((3, 4), generator), delays[:3])
    assert torch.equal(replay.sample((3, 4), generator), delays[[3, 4, 0]])  # wraps around
    with pytest.raises(ValueError, match="4 workers"):
        replay.sample((1, 5), generator)


def test_latency_stragglers_from_a_trace_waits_for_the_fastest_of_each_recorded_row(tmp_path):
    delays = torch.tensor([[0.3, 0.1, 0.2, 0.9], [0.05, 0.5, 0.4, 0.01]], dtype=torch.float64)
    path = str(save_trace(TraceReplay(delays), tmp_path / "t.json"))
    mask, step = LatencyStragglers.from_trace(path, num_stragglers=2).sample_with_latency(2, 4)
    assert torch.equal(mask, torch.tensor([[False, True, True, False], [True, False, False, True]]))
    assert torch.equal(step, torch.tensor([0.2, 0.05], dtype=torch.float64))  # the 2nd fastest of each row
    assert torch.equal(make_latency_model("trace", path=path).sample((2, 4), torch.Generator()), delays)


def test_a_trace_from_a_saved_run_censors_the_workers_not_seen(tmp_path):
    inf = math.inf
    steps = [
        {"step": 0, "scheme": "gcc", "arrival_s": torch.tensor([0.1, inf, 0.2]), "watched_s": 0.25},
        {"step": 0, "scheme": "uncoded", "arrival_s": torch.tensor([0.1, 0.3, 0.2]), "watched_s": 0.3},
        {"step": 1, "scheme": "gcc", "arrival_s": torch.tensor([0.15, 0.12, inf]), "watched_s": 0.2},
    ]
    torch.save({"args": {"mode": "measured"}, "steps": steps}, tmp_path / "run.pt")
    trace = trace_from_saved_run(tmp_path / "run.pt")
    assert torch.allclose(trace.delays_s, torch.tensor([[0.1, 0.25, 0.2], [0.15, 0.12, 0.2]], dtype=torch.float64))
    assert trace.censored.tolist() == [[False, True, False], [False, False, True]]
    assert "mode measured" in trace.source
    assert trace_from_saved_run(tmp_path / "run.pt", scheme="uncoded").delays_s.shape == (1, 3)


@pytest.mark.parametrize(
    "record, message",
    [
        ({"format": "other"}, "not a latency trace"),
        ({"format": TRACE_FORMAT, "num_workers": 2, "delays_s": [[0.1, -1.0]]}, "non-negative"),
        ({"format": TRACE_FORMAT, "num_workers": 3, "delays_s": [[0.1, 0.2]]}, "num_workers 3"),
    ],
)
def test_bad_trace_files_are_refused_with_a_reason(tmp_path, record, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=message):
        TraceReplay.from_file(str(path))
