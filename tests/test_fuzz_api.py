"""The API fuzzer (tests/api_fuzzer.py) on a small seeded slice, its oracles on injected faults, and regression
tests for what it found (meta masks, a warning from the check on results that require grad)."""

import api_fuzzer
import pytest
import torch

import torchgcc
from torchgcc.codes import maps


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Thousands of tiny ops: one thread is several times faster than two on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def slice_result(one_thread):
    return api_fuzzer.fuzz(400, seed=0, progress=False)


def test_a_seeded_slice_finds_no_silent_wrong_answer_and_no_raw_error(slice_result):
    signatures = slice_result["signatures"]
    assert signatures["silent_wrong"] == {} and signatures["raw_error"] == {}, slice_result["examples"]
    assert slice_result["by_entry_point"]["coded_module"]["raw_error"] == 0
    assert slice_result["flags"]["clear_error_not_naming_the_argument"] == 0, slice_result["examples"]["clear_error"]
    # the one documented warning: LCC's weights amplifying rounding (the decoder oracle checks where it must appear)
    assert all(": ConditioningWarning: LCC's " in key for key in slice_result["warnings"]), slice_result["warnings"]


def test_the_slice_reaches_every_entry_point_with_valid_and_invalid_calls(slice_result):
    for entry, counts in slice_result["by_entry_point"].items():
        assert 0 < counts["ok"] < sum(counts.values()), (entry, counts)


def test_the_same_seed_draws_the_same_calls():
    assert api_fuzzer.draw(3, 17).snippet == api_fuzzer.draw(3, 17).snippet
    assert api_fuzzer.draw(3, 17).snippet != api_fuzzer.draw(4, 17).snippet


def decoder_cases(count=60):
    """Valid-looking decoder calls of the seeded sequence."""
    cases = (api_fuzzer.draw_decoder(api_fuzzer.random.Random(i), i) for i in range(10 * count))
    return [case for case in cases if not case.invalid][:count]


def test_the_decoder_oracle_flags_a_relative_error_of_1e_minus_3(monkeypatch):
    """An injected error far above every dtype's tolerance but float16/bfloat16's is a silent wrong answer."""
    exact = maps.apply_linear
    monkeypatch.setattr(maps, "apply_linear", lambda matrix, flat, **kw: exact(matrix, flat, **kw) * 1.001)
    outcomes = [api_fuzzer.run_case(case)["category"] for case in decoder_cases()]
    assert outcomes.count("silent_wrong") >= len(outcomes) // 3, outcomes


def test_the_decoder_oracle_flags_straggler_values_leaking_into_the_estimate(monkeypatch):
    """A decoder that forgets the mask (every worker arrived) is wrong wherever a worker straggled."""
    original = maps.Decoder.forward
    monkeypatch.setattr(maps.Decoder, "forward", lambda self, y, mask: original(self, y, torch.ones_like(mask)))
    outcomes = [api_fuzzer.run_case(case)["category"] for case in decoder_cases()]
    assert "silent_wrong" in outcomes


def test_errors_are_classified_by_where_they_come_from():
    raw = api_fuzzer.Case("decoder", [], ["torch.zeros(2) @ torch.zeros(3)"], ["x"])
    clear = api_fuzzer.Case("decoder", ["code = torchgcc.GCC(2, 4)"], ["code.decoder(torch.zeros(1, 5), None)"], ["N="])
    accepted = api_fuzzer.Case("decoder", [], ["out = 1"], ["mask"])
    assert api_fuzzer.run_case(raw)["category"] == "raw_error"
    assert api_fuzzer.run_case(clear) | {"error": None} == {
        "category": "clear_error",
        "error": None,
        "named": True,
        "on_valid": False,
    }
    assert api_fuzzer.run_case(accepted)["category"] == "silent_wrong"


def test_the_tolerance_follows_the_dtype_and_the_absolute_sum():
    ref, env = torch.ones(1, 1, 1, dtype=torch.float64), torch.full((1, 1, 1), 100.0, dtype=torch.float64)
    u32 = torch.finfo(torch.float32).eps
    within = (ref + 2 * 6 * u32 * 100 * 0.9).float()  # terms = 4: 2 (4 + 2) u env, less 10%
    beyond = (ref + 2 * 6 * u32 * 100 * 1.5).float()
    assert api_fuzzer.compare(within, ref, env, 4, torch.float32) is None
    assert "off by" in api_fuzzer.compare(beyond, ref, env, 4, torch.float32)
    assert api_fuzzer.compare(beyond.double(), ref, env, 4, torch.float64) is not None  # float64's u is far smaller


@pytest.mark.parametrize("trouble", ["too_few", "nonfinite"])
def test_a_first_call_that_raises_leaves_the_default_rule_uncalibrated(trouble):
    """The default rule chooses its smoothing on the first batch decoded; a batch the check rejects must not be it
    (else every later call decodes with a smoothing chosen from rejected data: interpolation, here)."""
    code = torchgcc.GCC(4, 12)
    y, mask = torch.randn(3, 12, 2), torch.ones(3, 12, dtype=torch.bool)
    if trouble == "too_few":
        mask[0, 1:] = False
    else:
        y[0, 0, 0] = float("nan")
    with pytest.raises(ValueError):
        code.decoder(y, mask)
    assert not code.decoder.calibrated


@pytest.mark.parametrize(
    "args",
    [
        lambda: ([[0.0] * 12] * 3, torch.ones(3, 12, dtype=torch.bool)),  # a list: AttributeError
        lambda: (torch.randn(3, 11), torch.ones(3, 12, dtype=torch.bool)),  # wrong N: a raw reshape error
        lambda: (torch.randn(3, 12), torch.ones(3, 12, dtype=torch.long)),  # an int mask: a raw torch.where error
        lambda: (torch.ones(3, 12, dtype=torch.long), torch.ones(3, 12, dtype=torch.bool)),  # int results: accepted
    ],
)
def test_calibrate_rejects_bad_arguments_like_the_decoder(args):
    y, mask = args()
    with pytest.raises((TypeError, ValueError), match="mask|results|y "):
        torchgcc.GCC(4, 12).decoder.calibrate(y, mask)


# --- regressions of what the fuzzer found --------------------------------------------------------------------------


def test_a_meta_mask_with_results_on_the_cpu_is_a_clear_error():
    code = torchgcc.GCC(3, 8, lambda_dec="spacing")
    meta_mask = torch.ones(2, 8, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match="mask is a meta tensor"):
        code.decoder(torch.randn(2, 8, 4), meta_mask)
    with pytest.raises(ValueError, match="mask is a meta tensor"):
        torchgcc.CodedModule(torch.nn.Identity(), code)(torch.randn(6, 4), mask=meta_mask)


@pytest.mark.parametrize("check", [True, False])
@pytest.mark.parametrize("name", ["natural", "bacc", "lcc"])
def test_decode_matrix_of_a_meta_mask_infers_the_shape(name, check):
    code = torchgcc.make_code(name, num_inputs=3, num_workers=8, **({"degree": 1} if name == "lcc" else {}))
    out = code.decoder.decode_matrix(torch.ones(5, 8, dtype=torch.bool, device="meta"), check=check)
    assert out.is_meta and out.shape == (5, 3, 8) and out.dtype == torch.float64


def test_the_check_reads_results_that_require_grad_detached(monkeypatch):
    """The check's read of a result that requires grad must not warn ("Converting a tensor with requires_grad=True
    to a scalar", a warning torch prints once per process, so the test looks at what the check reads instead)."""
    reads: dict[str, list[bool]] = {"aminmax": [], "sum": []}
    aminmax, total = torch.aminmax, torch.sum

    def recorded_aminmax(t, **kw):
        result = aminmax(t, **kw)
        reads["aminmax"].append(result.min.requires_grad)  # float() of a result that requires grad is what warns
        return result

    def recorded_sum(t, *args, **kw):
        result = total(t, *args, **kw)
        reads["sum"].append(result.requires_grad)
        return result

    monkeypatch.setattr(torch, "aminmax", recorded_aminmax)
    monkeypatch.setattr(torch, "sum", recorded_sum)
    model = torch.nn.Linear(3, 2)
    out = torchgcc.CodedModule(model, torchgcc.GCC(4, 8, lambda_dec="spacing"))(torch.randn(8, 3))
    assert out.requires_grad
    assert reads["sum"] and not any(reads["sum"])  # the decoder's check: the sum of the estimates
    assert reads["aminmax"] and not any(reads["aminmax"])  # the encoder's overflow guard reads its input
    out.sum().backward()
    assert model.weight.grad is not None


def test_lccs_least_squares_fit_is_held_to_its_conditioning(monkeypatch):
    """Found by seed 31337, call 19828: LCC with 23 of 30 equispaced workers fits degree 21 by least squares, whose
    rounding grows with the Chebyshev-Vandermonde condition (7.6e6), beyond the gap-ratio estimate (2.1e5) the oracle
    had. Held to its conditioning the call passes, and an error of 1e-6 relative in the product is still caught."""
    assert "'lcc'" in api_fuzzer.draw(31337, 19828).snippet
    assert api_fuzzer.run_case(api_fuzzer.draw(31337, 19828))["category"] == "ok"
    exact = maps.apply_linear
    monkeypatch.setattr(maps, "apply_linear", lambda matrix, flat, **kw: exact(matrix, flat, **kw) * (1 + 1e-6))
    assert api_fuzzer.run_case(api_fuzzer.draw(31337, 19828))["category"] == "silent_wrong"


def lcc_decoder_cases(warned: bool, count: int = 3) -> list:
    """Valid LCC decoder calls of the seeded sequence with check=True that end in a ConditioningWarning (or not)."""
    found = []
    for index in range(3000):
        case = api_fuzzer.draw_decoder(api_fuzzer.random.Random(index), index)
        if case.invalid or "'lcc'" not in case.snippet or "check=False" in case.snippet:
            continue
        outcome = api_fuzzer.run_case(case)
        if (
            outcome["category"] == "ok"
            and any("ConditioningWarning" in w for w in outcome.get("warnings", [])) == warned
        ):
            found.append(case)
            if len(found) == count:
                return found
    raise AssertionError(f"fewer than {count} LCC decoder calls with warned={warned} in 3000 draws")


@pytest.mark.parametrize("warned", [True, False])
def test_the_decoder_oracle_flags_a_missing_or_a_needless_conditioning_warning(monkeypatch, warned):
    """LCC's ConditioningWarning is documented where its weights amplify rounding past half the digits: a decoder
    that never warns fails the calls that must warn, one that always warns the calls that must not."""
    from torchgcc.codes import lcc

    cases = lcc_decoder_cases(warned)
    always = lcc.warn_if_amplified

    def never(value, dtype, **options):
        return None

    def every_time(value, dtype, **options):
        return always(1e300, dtype, **options)

    monkeypatch.setattr(lcc, "warn_if_amplified", never if warned else every_time)
    assert [api_fuzzer.run_case(case)["category"] for case in cases] == ["silent_wrong"] * len(cases)
