"""The probes of tests/api_probes.py on a seeded slice: no silent wrong answer and no unclear error, every entry point
reached with valid and invalid calls, and the probes' oracles catch the faults they are for (injected here)."""

import api_fuzzer
import api_probes
import pytest
import torch

from torchgcc.codes import gcc


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def slice_result(one_thread):
    return api_fuzzer.fuzz(150, seed=0, progress=False, draw=api_probes.draw, entry_points=api_probes.ENTRY_POINTS)


def test_a_seeded_slice_of_probes_finds_no_silent_wrong_answer_and_no_raw_error(slice_result):
    assert slice_result["signatures"]["silent_wrong"] == {} and slice_result["signatures"]["raw_error"] == {}
    assert slice_result["flags"]["clear_error_not_naming_the_argument"] == 0, slice_result["examples"]["clear_error"]


def test_the_slice_reaches_every_probe(slice_result):
    for entry, counts in slice_result["by_entry_point"].items():
        assert counts["ok"] > 0, (entry, counts)


def test_a_documented_none_is_a_valid_number():
    """``LatencyStragglers(deadline=None)`` means no deadline: the probe drawn at seed 1202, index 406 took the
    library's acceptance of it for a silent wrong answer; a None elsewhere stays invalid."""
    case = api_probes.draw(1202, 406)
    assert case.snippet.endswith("LatencyStragglers(deadline=None)") and not case.invalid
    assert api_fuzzer.run_case(case)["category"] == "ok"
    assert not api_probes._number_is_valid("num_stragglers", "None", "torchgcc.stragglers.FixedStragglers({value})")


def probe_cases(entry: str, count: int = 12) -> list:
    cases = (api_probes.draw(7, index) for index in range(40 * count))
    return [case for case in cases if case.entry == entry and not case.invalid][:count]


def test_the_points_oracle_flags_a_smoothing_off_by_a_factor_of_two(monkeypatch):
    """A decoder smoothing with twice its lambda is off the by-hand reference by far more than the bound."""
    original = gcc.SplineDecoder.lam_for
    monkeypatch.setattr(gcc.SplineDecoder, "lam_for", lambda self, n: 2 * original(self, n))
    cases = [
        case for case in probe_cases("points", 30) if "GCC(" in case.call[0] and "lambda_dec=0.0" not in case.call[0]
    ]
    outcomes = [api_fuzzer.run_case(case)["category"] for case in cases]
    assert outcomes.count("silent_wrong") >= len(outcomes) // 2, outcomes


def test_the_threads_oracle_flags_a_choice_kept_on_the_decoder(monkeypatch):
    """The old per-call GCV rule kept its choice on the decoder between scoring and use."""
    original = gcc.GCVSplineDecoder._choose

    def shared(self, flat, mask, survivors):
        self.last_ratio, self.last_lambda = original(self, flat, mask, survivors)
        __import__("time").sleep(0)
        return self.last_ratio, self.last_lambda

    monkeypatch.setattr(gcc.GCVSplineDecoder, "_choose", shared)
    cases = [case for case in probe_cases("threads", 30) if "lambda_dec='gcv'" in case.setup[-2]]
    outcomes = [api_fuzzer.run_case(case)["category"] for case in cases]
    assert set(outcomes) & {"silent_wrong", "raw_error"}, outcomes
