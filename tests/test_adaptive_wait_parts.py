"""Parts of the adaptive wait count in the executor: the changing-tail latency model, the adaptive scheme name, the
model latency at the chosen S, and the comparison with the fixed S rows."""

from __future__ import annotations

import argparse

import pytest
import torch

from torchgcc.app.code_names import named_code
from torchgcc.app.commands.bench_latency import model_latency, schemes_of, wait_stragglers_of
from torchgcc.app.wait_count_verdict import compare_with_fixed
from torchgcc.control.wait_count import WaitCountController
from torchgcc.stragglers import LATENCY_MODELS, ShiftedExponential, TailChange


def test_tail_change_draws_the_first_model_then_the_second():
    model = LATENCY_MODELS["tail_change"](shift=1.0, scale=0.2, scale_after=0.4, change_at=3)
    generator, reference = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    before, after = ShiftedExponential(1.0, 0.2), ShiftedExponential(1.0, 0.4)
    for draw in range(6):
        expected = (before if draw < 3 else after).sample((2, 5), reference)
        torch.testing.assert_close(model.sample((2, 5), generator), expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match="change_at"):
        TailChange(change_at=-1)


def test_an_adaptive_name_needs_a_controller_and_starts_at_its_fallback():
    common = {"num_inputs": 4, "num_workers": 8, "num_stragglers": 1}
    with pytest.raises(ValueError, match="--wait-deadline"):
        named_code("gcc:adaptive", **common)
    controller = WaitCountController(8, deadline=1.0, candidates=range(5))
    with pytest.raises(ValueError, match="adaptive needs a code"):
        named_code("uncoded:adaptive", **common, controller=lambda: controller)
    named = named_code("gcc:adaptive", **common, controller=lambda: controller, watch_s=1.0)
    assert named.name == "gcc:adaptive" and named.wait.adaptive is controller and named.wait.watch_s == 1.0
    assert named.wait.stragglers() == 4  # the fallback: the largest candidate S


def test_bench_rows_and_model_latency_at_the_chosen_s():
    args = argparse.Namespace(wait_stragglers=None)
    assert wait_stragglers_of(args, 24, 8) == [0, 2, 4, 6, 8, 10, 12, 14, 16]
    assert schemes_of(8, 4, [1, 3]) == ["uncoded", "gcc:S=1", "gcc:S=3", "gcc:adaptive"]
    delays = torch.tensor([0.5, 0.1, 0.4, 0.2, 0.3], dtype=torch.float64)
    assert model_latency(delays, "gcc:adaptive", 1, stragglers=2) == 0.3  # the 3rd fastest
    assert model_latency(delays, "gcc:S=2", 1) == model_latency(delays, "gcc:adaptive", 1, stragglers=2)


def test_compare_with_fixed_picks_the_most_accurate_s_meeting_the_deadline():
    fixed = [
        {"S": 2, "p99": 1.8, "agreement": 0.99},
        {"S": 4, "p99": 1.5, "agreement": 0.95},
        {"S": 6, "p99": 1.2, "agreement": 0.90},
    ]
    verdict = compare_with_fixed(fixed, {"p99": 1.45, "agreement": 0.96}, deadline=1.6)
    assert verdict["reference_S"] == 4
    assert verdict["adaptive_p99_no_worse"] and verdict["adaptive_agreement_no_worse"]
    assert not compare_with_fixed(fixed, {"p99": 1.55, "agreement": 0.96}, 1.6)["adaptive_p99_no_worse"]
    assert compare_with_fixed(fixed, {"p99": 1.0, "agreement": 1.0}, 1.0)["reference_S"] is None
